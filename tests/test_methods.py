"""Every method of the spec table (easd.method.methods) through the loop, the trace files, the page's lanes and eval:
a method added to the table is tested here without a line more."""

import json
from dataclasses import dataclass

import gradio as gr
import pandas as pd
import pytest
import torch
from conftest import PROMPTS

from easd.cli import main
from easd.method import acceptance as acc
from easd.method.generation import Generation
from easd.method.knobs import Control, knob
from easd.method.methods import METHODS, make_settings, register
from easd.method.methods.sd import SD, Speculative
from easd.method.origins import Origin
from easd.method.prompts import encode_prompt
from easd.method.step import Batch
from easd.method.summary import summarize
from easd.method.trace import recorded
from easd.pairs.loading import with_prm
from easd.pairs.tiny import write_tiny_prm
from easd.render.lanes import lane_html, lane_title
from easd.traces import files as trace_io

# thresholds at which every method that can intervene does: EASD's rule fires at any entropy, MTI guides every
# token, RSD's reward model (rewards near 0.5) refuses every step of the draft at δ = 0.7, SpecGuard recomputes every
# step (by the draft's confidence alone, which llama.cpp allows too; its attention is tested in test_specguard.py)
EAGER = dict(max_new_tokens=16, tau_h=0.0, tau_o=0.0, mti_tau=0.0, rsd_delimiter=" ")
EAGER |= dict(specguard_delimiter=" ", specguard_threshold=1.0, specguard_grounding="none")


@pytest.fixture(scope="module")
def prm_folder(tmp_path_factory):
    return write_tiny_prm(tmp_path_factory.mktemp("prm"), bias=0.0)


def test_every_method_of_the_table_decodes_as_its_entry_says(tiny_pair, prm_folder, tmp_path):
    """Every method in one batch: those of one row and those of a group of rows (particles, candidates, beams)."""
    pair = with_prm(tiny_pair, str(prm_folder))
    traces = Batch(pair, [Generation(pair, PROMPTS[0], make_settings(method=name, **EAGER)) for name in METHODS]).run()
    for (name, method), trace in zip(METHODS.items(), traces):
        origins = {r.origin for r in trace.records}
        assert trace.settings.method == name and origins <= set(method.origin_names), name
        assert (trace.stats.draft_calls > 0, trace.stats.target_calls > 0) == (method.uses_draft, method.uses_target), name
        assert bool(origins & set(method.intervention_origins)) == method.intervenes, name  # each intervening one did
        assert summarize(trace)["interventions"] == sum(r.origin in method.intervention_origins for r in trace.records)
    trace_io.write_json(traces, tmp_path / "all.json")  # the trace files hold every method
    for trace, loaded in zip(traces, trace_io.read_json(tmp_path / "all.json")):
        assert (loaded.settings, loaded.records) == (trace.settings, trace.records)
    for (name, method), trace in zip(METHODS.items(), traces):
        assert lane_title("left", trace).startswith(method.title)
        assert str(lane_html("left", trace)).count('data-pos="') == len(trace.records), name


def test_eval_runs_every_method_of_the_table_and_the_papers_table_names_its_models(prm_folder, tmp_path, capsys):
    data = tmp_path / "problems.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"{i} + 2?", "answer": f"#### {i + 2}"}) for i in range(2)))
    arguments = ["eval", "--pair", "tiny-random", "--data", str(data), "--methods", ",".join(METHODS), "--prm", str(prm_folder)]
    arguments += ["--rsd-delimiter", " ", "--specguard-grounding", "none"]
    assert main([*arguments, "--max-new-tokens", "8", "--out", str(tmp_path / "out")]) == 0
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert sorted(summary["method"]) == sorted(METHODS)
    table = (tmp_path / "out" / "paper.md").read_text(encoding="utf-8")
    for name, method in METHODS.items():
        assert f"| {name} | {method.models} |" in table


def test_the_docs_table_of_methods_is_the_code_s():
    from pathlib import Path

    from easd.cli.methods import methods_table

    page = (Path(__file__).resolve().parent.parent / "docs" / "method.md").read_text(encoding="utf-8")
    assert methods_table() in page


# --- a method added in one module: the one below, with a setting of its own, and nothing else edited -------------


@dataclass(frozen=True)
class CappedSettings:
    drafts: int = knob(
        2,
        "the most tokens the draft proposes per block, whatever k says",
        low=1,
        high=8,
        label="capped drafts",
        short="drafts per block at most",
        control=Control("slider", 1, 8, 1),
    )


@dataclass(frozen=True, kw_only=True)
class Capped(Speculative):
    """SD whose blocks draft at most `drafts` tokens: a researcher's variant of the kind the table is for."""

    def plan(self, generation) -> tuple[int, bool]:
        k, verifies = super().plan(generation)
        return min(k, self.own(generation.settings).drafts), verifies


@pytest.fixture
def capped():
    method = register(Capped(name="capped", title="SD, capped", models="TM + DM", origins=SD.origins, settings=CappedSettings))
    try:
        yield method
    finally:
        METHODS.pop(method.name)


def test_a_method_defined_in_one_module_is_offered_everywhere(capped, hf_tiny_pair, tmp_path, capsys):
    """The command line, the decoding loop, the trace files, the page's pickers and controls, the API's and the MCP
    tool's parameters and descriptions, eval and the docs' table all know it from its one module."""
    from components import api
    from components.gallery import Gallery
    from components.page import build_page
    from easd.cli import build_parser
    from easd.cli.flags import settings_from_args
    from easd.cli.methods import methods_table
    from easd.serving.host import ModelHost

    arguments = ["generate", "--method", "capped", "--capped-drafts", "1", "--max-new-tokens", "12", "--prompt", "x"]
    args = build_parser().parse_args(arguments)
    settings = settings_from_args(args)
    assert settings.method == "capped" and capped.own(settings).drafts == 1
    trace = Generation(hf_tiny_pair, PROMPTS[0], settings).run()
    assert len(trace.records) == 12 and max(len(block.drafted) for block in trace.blocks) == 1  # its hook ran
    for name in ("t.csv", "t.json"):  # its setting is a column, read back as it ran
        trace_io.save([trace], tmp_path / name)
        [back] = trace_io.load(tmp_path / name)
        assert (back.settings, back.records) == (trace.settings, trace.records)
    with gr.Blocks():
        page = build_page(ModelHost({}, None, max_new_tokens_cap=64), [], Gallery())
    assert ("SD, capped", "capped") in page.methods["left"].choices and "capped_drafts" in page.controls.settings()
    assert "capped_drafts" in [name for name, *_ in api.parameters()]
    described = api.endpoint(api.compare_briefly).__doc__
    assert "capped_drafts: the most tokens the draft proposes per block" in described and "capped" in described
    data = tmp_path / "problems.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"{i} + 2?", "answer": f"#### {i + 2}"}) for i in range(2)))
    arguments = ["eval", "--pair", "tiny-random", "--data", str(data), "--methods", "sd,capped", "--capped-drafts", "1"]
    assert main([*arguments, "--max-new-tokens", "8", "--out", str(tmp_path / "out")]) == 0
    assert sorted(pd.read_csv(tmp_path / "out" / "summary.csv")["method"]) == ["capped", "sd"]
    assert "| `capped` | SD, capped | yes | yes | yes |" in methods_table() and "`--capped-drafts`" in methods_table()


# --- issue 62's two toys: a method owns its acceptance (a deterministic draft, its own temperature) and its record -


@dataclass(frozen=True)
class GreedyCheckSettings:
    check_temperature: float = knob(
        0.7, "the target's temperature when it checks the greedy draft's tokens", low=0.05, high=2, label="check temperature"
    )


@dataclass(frozen=True, kw_only=True)
class GreedyCheck(Speculative):
    """A greedy draft whose tokens the target checks, and replaces, at a temperature of its own."""

    def sampling(self, settings):
        return acc.Sampling(0.0), acc.Sampling(self.own(settings).check_temperature, settings.top_p)


@pytest.fixture
def greedy_check():
    method = register(
        GreedyCheck(
            name="greedy_check",
            title="greedy draft, sampled check",
            models="TM + DM",
            origins=SD.origins,
            settings=GreedyCheckSettings,
        )
    )
    try:
        yield method
    finally:
        METHODS.pop(method.name)


def test_a_deterministic_draft_is_kept_as_often_as_the_target_gives_its_tokens(greedy_check, hf_tiny_pair):
    """No hack: the draft proposes its argmax with no distribution, and the target's test at T = 0.7 keeps c_i with
    probability p̃(c_i). Over many drafted positions the kept count matches the sum of those probabilities, each
    recomputed here by a fresh forward pass of the target over the prefix (a z-test, 4 standard deviations)."""
    pair, kept, expected, variance = hf_tiny_pair, 0, 0.0, 0.0
    target = pair.target.module
    for seed in range(6):
        settings = make_settings(method="greedy_check", max_new_tokens=48, seed=seed, greedy_check_check_temperature=0.7)
        trace = Generation(pair, PROMPTS[seed % len(PROMPTS)], settings).run()
        prompt = encode_prompt(pair, PROMPTS[seed % len(PROMPTS)], chat=True)
        tokens = prompt + trace.token_ids
        for record in trace.records:
            if record.draft_token_id is None:
                continue
            assert record.h_draft is None and record.draft_gap is None  # EASD's signals: not asked for, not computed
            prefix = torch.tensor([tokens[: len(prompt) + record.position]])
            with torch.no_grad():
                logits = target(prefix).logits[0, -1, : pair.vocab_size].float()
            p = float(torch.softmax(logits / 0.7, dim=-1)[record.draft_token_id])
            assert record.accept_prob == pytest.approx(p, abs=1e-4)  # the test's probability, read independently
            kept += record.origin == "draft_accepted"
            expected, variance = expected + p, variance + p * (1 - p)
    assert variance > 5  # enough positions whose outcome was uncertain for the test to mean something
    assert abs(kept - expected) < 4 * variance**0.5, (kept, expected)


def test_a_method_s_own_setting_is_read_from_its_flag_not_ignored(greedy_check, tmp_path):
    """Its flag is parsed and recorded as given (a name with hyphens was once parsed and silently dropped)."""
    from easd.cli import build_parser
    from easd.cli.flags import settings_from_args

    args = build_parser().parse_args(
        ["generate", "--method", "greedy_check", "--greedy-check-check-temperature", "0.3", "--prompt", "x"]
    )
    settings = settings_from_args(args)
    assert greedy_check.own(settings).check_temperature == 0.3
    out = tmp_path / "t.json"
    assert (
        main(
            ["generate", "--pair", "tiny-random", "--method", "greedy_check", "--greedy-check-check-temperature", "0.3"]
            + ["--max-new-tokens", "8", "--prompt", "x", "--json", str(out)]
        )
        == 0
    )
    [trace] = trace_io.load(out)
    assert greedy_check.own(trace.settings).check_temperature == 0.3


@pytest.mark.parametrize(
    "name, settings, record, problem",
    [
        ("greedy-draft-check", None, None, "must be a lowercase identifier"),
        ("Greedy", None, None, "must be a lowercase identifier"),
        ("sd", None, None, "in the table already"),
        ("k", None, None, "the name of a setting (--k)"),
        ("tau", "clash", None, "clash with settings already declared"),
        ("toy", None, "clash", "columns of the trace already"),
    ],
)
def test_registering_refuses_a_name_that_cannot_be_a_flag_or_clashes_in_one_line(name, settings, record, problem):
    @dataclass(frozen=True)
    class H:  # its flat name tau_h is a setting every method reads
        h: float = knob(1.0, "a clash", low=0)

    @dataclass
    class Clash:  # a column every trace has
        h_draft: float = recorded("a clash", "float")

    method = Speculative(
        name=name,
        title="x",
        models="TM + DM",
        origins=SD.origins,
        settings=H if settings else None,
        record=Clash if record else None,
    )
    with pytest.raises(ValueError) as caught:
        register(method)
    assert problem in str(caught.value) and "\n" not in str(caught.value)
    assert METHODS.get(name) is not method


FLAGGED_BONUS = Origin(
    "flagged_bonus",
    "flagged bonus",
    "background: #e69f00; border-bottom: 3px double #000;",
    "bonus",
    "Every draft was kept; the target added {chosen}, and this method flagged it.",
    ended="every draft was accepted; the bonus token is flagged",
)


@dataclass
class FlaggedRecord:
    bonus_prob: float = recorded("the target's probability of its bonus token", "float", low=0, high=1, label="bonus p")


@dataclass(frozen=True, kw_only=True)
class Flagged(Speculative):
    """SD whose bonus tokens carry an origin of their own and the target's probability of them."""

    def judge(self, plan):
        block = super().judge(plan)
        last = block.records[-1]
        if last.origin == "bonus":
            last.origin = block.end = FLAGGED_BONUS.name
            last.own = FlaggedRecord(dict((i, p) for i, _, p in last.target_top).get(last.token_id, 0.0))
        return block


@pytest.fixture
def flagged():
    origins = (*SD.origins[:2], FLAGGED_BONUS)  # its blocks end with a rejection or the flagged bonus
    method = register(
        Flagged(name="flagged", title="SD, flagged", models="TM + DM", origins=origins, signals=True, record=FlaggedRecord)
    )
    try:
        yield method
    finally:
        METHODS.pop(method.name)


def test_a_method_s_origin_and_record_field_reach_the_legend_inspector_search_and_csv(flagged, hf_tiny_pair, tmp_path):
    """Declared in the method alone: the legend and the lanes' style sheet, the inspector's sentence and lines, Find
    tokens' filters and the CSV's columns all come from the declarations."""
    from easd.method.whatif import RuleView
    from easd.render.inspector import inspector_html
    from easd.render.lanes import legend_html, origin_css
    from easd.render.search import Search

    trace = Generation(hf_tiny_pair, PROMPTS[0], make_settings(method="flagged", max_new_tokens=40)).run()
    flagged_rows = [i for i, r in enumerate(trace.records) if r.origin == "flagged_bonus"]
    assert flagged_rows, "the tiny pair keeps whole blocks, so some bonus tokens are flagged"
    assert "flagged bonus" in str(legend_html(["flagged"])) and ".o-flagged_bonus { background: #e69f00;" in origin_css()
    record = trace.records[flagged_rows[0]]
    shown = str(inspector_html("left", trace, record, RuleView.of(trace.settings)))
    assert "this method flagged it" in shown and "bonus p" in shown and "o-flagged_bonus" in shown
    assert Search.read("origin=flagged_bonus").positions(trace) == flagged_rows
    high = [i for i in flagged_rows if trace.records[i].own.bonus_prob > 0.05]
    assert Search.read("bonus_prob>0.05").positions(trace) == high
    trace_io.write_csv([trace], tmp_path / "t.csv")
    frame = pd.read_csv(tmp_path / "t.csv", keep_default_na=False)
    assert "bonus_prob" in frame.columns and frame.loc[flagged_rows[0], "bonus_prob"] != ""
    [back] = trace_io.load(tmp_path / "t.csv")
    assert back.records == trace.records
    sd = Generation(hf_tiny_pair, PROMPTS[0], make_settings(method="sd", max_new_tokens=8)).run()
    trace_io.write_csv([sd], tmp_path / "sd.csv")
    assert "bonus_prob" not in pd.read_csv(tmp_path / "sd.csv").columns  # a file holds its own methods' columns
