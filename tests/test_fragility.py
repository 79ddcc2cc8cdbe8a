"""Precise signals, decision margins and fragile decisions (docs/method.md, "Fragile decisions")."""

import copy
import csv
import dataclasses

import pytest
import torch

from easd.backends.transformers import float32_head
from easd.lab.speed.bench import head_copy_bytes
from easd.method import acceptance as acc
from easd.method.generation import Generation
from easd.method.settings import DecodeSettings
from easd.method.step import Batch
from easd.method.summary import summarize
from easd.method.whatif import would_be_fragile
from easd.pairs.loading import Runtime
from easd.pairs.tiny import load_tiny_pair
from easd.traces import files as trace_io

RULE = {"rule": "full", "tau_o": 0.8, "top_n": 2}


def margins(draft, target, tau_h, eps=0.0, **rule):
    """decision_margins of one position from plain lists of logits."""
    d, t = torch.tensor([draft]), torch.tensor([target])
    h_d, h_t = acc.entropy(d), acc.entropy(t)
    settings = {**RULE, **rule}
    overlap = acc.overlap_count(d, t, settings["top_n"])
    return acc.decision_margins(d, t, h_d, h_t, overlap, tau_h=tau_h, rounding=acc.Rounding(eps, eps), **settings), h_d, h_t


# --- hand-made logits: margins and the fragile flag, exactly -----------------------------------

SPREAD = [3.0, 2.5, 1.0, 0.0, 0.0, 0.0]  # top-2 {0, 1}, boundary gap 1.5, entropy ≈ 1.26 nats


def test_margins_are_the_distances_to_each_threshold():
    m, h_d, h_t = margins(SPREAD, SPREAD, tau_h=1.0)
    assert float(m.h_draft_margin[0]) == float(h_d[0] - 1.0) and float(m.h_target_margin[0]) == float(h_t[0] - 1.0)
    assert float(m.draft_gap[0]) == pytest.approx(1.5) and float(m.target_gap[0]) == pytest.approx(1.5)
    # top-2 sets {0, 1} and {0, 1}: swapping either boundary pair (1 ↔ 2) leaves 1 shared instead of 2
    assert bool(m.overlap_swap[0])
    assert int(m.overlap_low[0]) == int(m.overlap_high[0]) == 2  # no swap is within rounding (eps 0, gap 1.5)
    assert not bool(m.fragile[0])  # it fires, and no condition is near


def test_an_entropy_exactly_at_tau_h_is_fragile_even_for_exact_logits():
    h = float(acc.entropy(torch.tensor([SPREAD]))[0])
    m, _, _ = margins(SPREAD, SPREAD, tau_h=h)
    assert float(m.h_draft_margin[0]) == 0.0 and bool(m.fragile[0])  # fires (≥), and the smallest step below flips it


def test_the_entropy_tolerance_decides_near_or_not():
    h = float(acc.entropy(torch.tensor([SPREAD]))[0])
    eps = 2.0**-7
    tolerance = float(margins(SPREAD, SPREAD, tau_h=1.0, eps=eps)[0].h_draft_tol[0])
    assert 0 < tolerance < 0.1
    inside, _, _ = margins(SPREAD, SPREAD, tau_h=h - tolerance / 2, eps=eps)
    outside, _, _ = margins(SPREAD, SPREAD, tau_h=h - tolerance * 2, eps=eps)
    assert bool(inside.fragile[0]) and not bool(outside.fragile[0])


def test_a_tie_at_the_boundary_that_flips_the_overlap_is_fragile():
    tied = [3.0, 2.0, 2.0, 0.0, 0.0, 0.0]  # the draft's 2nd and 3rd candidates tie
    m, _, _ = margins(tied, SPREAD, tau_h=0.5)
    assert float(m.draft_gap[0]) == 0.0
    assert int(m.overlap_low[0]) == 1 and int(m.overlap_high[0]) == 2  # token 1 or token 2 may be the draft's 2nd
    assert bool(m.fragile[0])


def test_a_boundary_swap_that_cannot_flip_the_condition_is_not_fragile():
    tied = [3.0, 2.0, 2.0, 0.0, 0.0, 0.0]
    m, _, _ = margins(tied, SPREAD, tau_h=0.5, tau_o=0.5)  # 1 shared of 2 is enough: both reachable counts hold
    assert bool(m.overlap_swap[0]) and not bool(m.fragile[0])


def test_a_decision_that_did_not_fire_is_fragile_only_if_every_failing_condition_is_near():
    h = float(acc.entropy(torch.tensor([SPREAD]))[0])
    tied = [3.0, 2.0, 2.0, 0.0, 0.0, 0.0]
    # τ_H just above H: both entropy conditions fail, each within its tolerance; the overlap holds
    near_both, _, _ = margins(SPREAD, SPREAD, tau_h=h + 1e-6, eps=2.0**-7)
    assert not acc.rule_fires(h_draft=h, h_target=h, overlap=2, tau_h=h + 1e-6, **RULE)
    assert bool(near_both.fragile[0])
    # entropies far below τ_H: not fragile, whatever the overlap's tie says
    far, _, _ = margins(tied, SPREAD, tau_h=5.0, eps=2.0**-7)
    assert not bool(far.fragile[0])


def test_the_rule_ignores_conditions_it_does_not_use():
    h = float(acc.entropy(torch.tensor([SPREAD]))[0])
    tied = [3.0, 2.0, 2.0, 0.0, 0.0, 0.0]
    full, _, _ = margins(tied, SPREAD, tau_h=h / 2)
    no_overlap, _, _ = margins(tied, SPREAD, tau_h=h / 2, rule="no_overlap")
    assert bool(full.fragile[0]) and not bool(no_overlap.fragile[0])


def test_fragile_decisions_work_on_plain_numbers_like_rule_fires():
    import numpy as np

    h = np.array([1.0, 1.5], dtype=np.float32)
    fragile = acc.fragile_decisions(h, h, np.array([2, 2]), np.float32(0.01), np.float32(0.01), 2, 2, tau_h=1.005, **RULE)
    assert fragile.tolist() == [True, False]


# --- precise signals ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_pair():
    return load_tiny_pair(Runtime(backend="transformers", dtype="bfloat16"))


def hidden_states_of(model):
    """Record the decoder's last hidden state on every pass (the very tensors the loop's lm_head sees)."""
    seen = []
    handle = model.get_decoder().register_forward_hook(lambda _m, _i, out: seen.append(out.last_hidden_state[0, -1]))
    return seen, handle


@pytest.mark.parametrize("method", ["target", "draft"])
def test_float32_signals_equal_a_float64_reference_from_the_same_hidden_states(bf16_pair, method):
    model = (bf16_pair.target if method == "target" else bf16_pair.draft).module
    weight = model.get_output_embeddings().weight.detach().double()[: bf16_pair.vocab_size]
    errors = {}
    for signals in ("float32", "model"):
        seen, handle = hidden_states_of(model)
        try:
            trace = Generation(
                bf16_pair, "Tom has 3 apples.", DecodeSettings(method=method, max_new_tokens=16, signals=signals)
            ).run()
        finally:
            handle.remove()
        steps = torch.stack(seen[1:])  # seen[0] is the prompt's prefill, which emits no token
        reference = torch.special.entr(torch.softmax(steps.double() @ weight.T, dim=-1)).sum(dim=-1)
        recorded = torch.tensor([getattr(r, f"h_{method}") for r in trace.records], dtype=torch.float64)
        errors[signals] = float((recorded - reference[: len(recorded)]).abs().max())
    assert errors["float32"] < 1e-5
    assert errors["model"] > 1e-5  # bfloat16 logits are coarser: the test can tell the two apart


def test_rows_with_either_signals_decode_in_one_batch_as_they_do_in_a_batch_of_their_own_kind(bf16_pair):
    """A float32-signals row and a model-signals row share a pass: each gets what it gets beside a row of its own
    kind in a batch of the same shape (in bfloat16 the shape itself moves the hidden states, so it is kept)."""
    runs = [DecodeSettings(method="easd", max_new_tokens=20, signals=s) for s in ("float32", "model")]

    def batch(settings):
        return Batch(bf16_pair, [Generation(bf16_pair, "def add(a, b):", s) for s in settings]).run()

    mixed = batch(runs)
    for row, kind in ((0, batch([runs[0], runs[0]])[0]), (1, batch([runs[1], runs[1]])[1])):
        assert mixed[row].token_ids == kind.token_ids
        assert [r.h_target for r in mixed[row].records] == pytest.approx([r.h_target for r in kind.records], abs=1e-3)
    assert [r.h_target for r in mixed[0].records] != [r.h_target for r in mixed[1].records]  # the two heads differ here


def test_the_float32_head_is_a_copy_only_for_low_precision_heads(hf_tiny_pair, bf16_pair):
    float32_model = hf_tiny_pair.target.module
    assert float32_head(float32_model) is float32_model.get_output_embeddings()
    assert float32_head(bf16_pair.target.module).weight.dtype == torch.float32
    assert head_copy_bytes(hf_tiny_pair) == 0 and head_copy_bytes(bf16_pair) > 0
    assert bf16_pair.rounding == acc.Rounding(2.0**-7, 2.0**-7) and hf_tiny_pair.rounding.target == 2.0**-23


# --- the tiny pair with a forced tie ------------------------------------------------------------


@pytest.fixture(scope="module")
def tied_pair():
    """Both lm_heads zeroed: every logit ties, so the n-th and (n+1)-th candidates of both models tie everywhere."""
    pair = load_tiny_pair()
    for model in (pair.draft, pair.target):
        with torch.no_grad():
            model.module.get_output_embeddings().weight.zero_()
    return pair


def test_a_forced_tie_at_the_nth_rank_is_reported_fragile(tied_pair):
    # τ_O = 1: all 5 must be shared, so swapping one model's 5th and 6th candidates (tied) leaves 4 and flips the rule.
    # (At τ_O = 0.8, "at least 4 of 5" survives one swap: such a tie is not fragile, and is not reported so.)
    settings = DecodeSettings(method="easd", max_new_tokens=12, tau_o=1.0)
    trace = Generation(tied_pair, "Tom has 3 apples.", settings).run()
    penalties = [r for r in trace.records if r.origin == "easd_penalty"]
    assert penalties, "uniform distributions are uncertain and agree: EASD must refuse"
    for record in penalties:
        assert record.draft_gap == 0.0 and record.target_gap == 0.0 and record.overlap_swap
        assert record.fragile is True
    at_default = summarize(Generation(tied_pair, "Tom has 3 apples.", dataclasses.replace(settings, tau_o=0.8)).run())
    assert at_default["penalized"] > 0 and at_default["fragile_penalties"] == 0
    summary = summarize(trace)
    assert summary["fragile_penalties"] == summary["penalized"] == len(penalties) > 0
    assert summary["fired"] >= summary["penalized"]


def test_random_float32_logits_have_no_fragile_decisions(run):
    summaries = [summarize(run(prompt, method="easd", max_new_tokens=32)) for prompt in ("Tom has 3 apples.", "def add(a, b):")]
    assert sum(s["fired"] for s in summaries) > 0
    assert sum(s["fragile"] for s in summaries) == 0  # float32 precision: only exact ties would count


def test_the_what_if_reads_fragility_as_the_loop_recorded_it(tied_pair, run):
    for trace in (
        Generation(tied_pair, "Tom has 3 apples.", DecodeSettings(method="sd", max_new_tokens=12)).run(),
        run("def add(a, b):", method="sd", max_new_tokens=32),
    ):
        settings = trace.settings
        again = would_be_fragile(trace, settings.rule, settings.tau_h, settings.tau_o)
        assert [r.fragile for r in trace.records] == [None if v is None else bool(v) for v in again]


# --- files --------------------------------------------------------------------------------------


def test_margins_travel_through_csv_and_json(tmp_path, tied_pair):
    trace = Generation(tied_pair, "Tom has 3 apples.", DecodeSettings(method="easd", max_new_tokens=12, signals="model")).run()
    for name in ("t.csv", "t.json"):
        trace_io.save([trace], tmp_path / name)
        loaded = trace_io.load(tmp_path / name)[0]
        assert loaded.records == trace.records and loaded.settings.signals == "model"


def test_a_csv_written_before_margins_existed_still_loads(tmp_path, run):
    trace = run(method="easd", max_new_tokens=12)
    trace_io.write_csv([trace], tmp_path / "new.csv")
    with (tmp_path / "new.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    dropped = {i for i, name in enumerate(rows[0]) if name in trace_io.MARGIN_COLUMNS}
    with (tmp_path / "old.csv").open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\r\n").writerows([[c for i, c in enumerate(row) if i not in dropped] for row in rows])
    old = trace_io.load(tmp_path / "old.csv")[0]
    assert old.settings.signals == "float32" and old.token_ids == trace.token_ids
    assert all(r.fragile is None and r.h_draft_margin is None for r in old.records)
    assert summarize(old)["fragile"] == 0


def test_a_margin_out_of_range_is_refused(tmp_path, run):
    trace = copy.deepcopy(run(method="sd", max_new_tokens=8))
    drafted = next(r for r in trace.records if r.draft_token_id is not None)
    drafted.draft_gap = -1.0
    trace_io.write_json([trace], tmp_path / "bad.json")
    with pytest.raises(Exception, match="draft_gap"):
        trace_io.load(tmp_path / "bad.json")


def test_signals_is_a_checked_setting():
    with pytest.raises(Exception, match="signals"):
        DecodeSettings(signals="float16").validate()
    assert dataclasses.replace(DecodeSettings(), signals="model").validate().signals == "model"


# --- the evaluation: fragile penalties, robust accuracy, the reproducibility check ---------------


@pytest.fixture
def problems_file(tmp_path):
    import json

    rows = [{"question": f"Tom has {i} apples and buys 2 more. How many?", "answer": f"#### {i + 2}"} for i in range(5)]
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def eval_command(problems_file, out, *extra):
    base = ["eval", "--pair", "tiny-random", "--data", str(problems_file), "--max-new-tokens", "24", "--out", str(out)]
    return [*base, *extra]


def test_eval_reports_fragile_penalties_and_checks_another_order(problems_file, tmp_path, capsys):
    import pandas as pd

    from easd.cli import main
    from easd.lab.runs.results_table import load_results

    out = tmp_path / "run"
    assert main(eval_command(problems_file, out, "--batch-size", "4", "--check-reproducible", "3")) == 0
    results = load_results(out / "results.csv")
    assert (results["fragile_penalties"] <= results["penalized"]).all()
    summary = pd.read_csv(out / "summary.csv").set_index("method")
    easd = summary.loc["easd"]
    assert easd["penalties"] == results[results["method"] == "easd"]["penalized"].sum() > 0
    assert easd["robust_runs"] == (results[results["method"] == "easd"]["fragile_penalties"] == 0).sum()
    check = pd.read_csv(out / "reproducibility.csv")
    assert check["problems"].tolist() == [3] and check["rerun_order"].tolist() == ["alone"]
    # float32 on the tiny pair: a row decoded alone makes exactly the decisions it made in a batch of 4
    assert check["first_penalty_moved"].tolist() == [0] and check["texts_differ"].tolist() == [0]
    assert "first_penalty_moved" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--check-reproducible", "-1"], "--check-reproducible: must be a number of problems ≥ 1"),
        (
            ["--check-reproducible", "2", "--methods", "sd"],
            "--check-reproducible: needs a method that refuses drafts (easd) in --methods, e.g. --methods sd,easd",
        ),
        (["--check-reproducible", "1", "--batch-size", "1"], "so give N ≥ 2"),
        (["--check-reproducible", "2", "--ray"], "drop --ray"),
    ],
)
def test_check_reproducible_is_refused_clearly_before_decoding(problems_file, tmp_path, capsys, extra, message):
    from easd.cli import main

    assert main(eval_command(problems_file, tmp_path / "run", *extra)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_results_written_before_fragility_existed_still_report(problems_file, tmp_path):
    import pandas as pd

    from easd.cli import main
    from easd.lab.reports.report import write_reports

    out = tmp_path / "run"
    assert main(eval_command(problems_file, out)) == 0
    frame = pd.read_csv(out / "results.csv", dtype=str, keep_default_na=False)
    frame.drop(columns=["fragile_penalties"]).to_csv(out / "results.csv", index=False)
    summary, _ = write_reports(out, "gsm8k")
    assert summary["fragile_share"].isna().all() and summary["penalties"].notna().all()
