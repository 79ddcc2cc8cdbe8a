"""The evaluation: shared-prefix runs, resume after a crash, samples and votes, calibration, the sweep."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from easd.cli import main
from easd.errors import EasdError, SettingsError
from easd.lab.acceptance.calibrate import nearest_candidate, top_share_mean
from easd.lab.grading.answers import is_correct
from easd.lab.grading.problems import load_problems
from easd.lab.reports.figures import accuracy_figure, paired_figure, speed_figure
from easd.lab.reports.paper import paper_table
from easd.lab.reports.report import SUMMARY_COLUMNS, paired_table, summary_table, write_reports, write_sweep
from easd.lab.runs.evaluate import (
    LocalRunner,
    WorkItem,
    decode_items,
    grid_variants,
    parse_methods,
    pending_work,
    run_evaluation,
    trace_name,
)
from easd.lab.runs.results_table import RESULT_COLUMNS, load_results
from easd.method.methods import METHODS, make_settings
from easd.method.settings import DecodeSettings
from easd.method.summary import summarize

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def data(tmp_path):
    rows = [
        {
            "question": f"Tom has {i} apples and buys {i + 2} more. How many apples does he have?",
            "answer": f"He has {2 * i + 2}.\n#### {2 * i + 2}",
        }
        for i in range(8)
    ]
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def keys(rows):
    return [(r["problem_id"], r["method"], str(r["sample"])) for r in rows]


def test_methods_are_parsed_with_sd_first():
    variants = parse_methods("easd,easd:no_overlap,target,sd", DecodeSettings())
    assert [v.label for v in variants] == ["sd", "easd", "easd:no_overlap", "target"]
    assert variants[2].settings.rule == "no_overlap" and variants[3].settings.method == "target"
    with pytest.raises(EasdError, match="--methods: 'sd:full'"):
        parse_methods("sd:full", DecodeSettings())


def rows_of(pair, item, batch_size=1):
    [(_, finished)] = decode_items(pair, [item], batch_size)
    return [row for row, _ in finished]


TIMINGS = ("seconds", "tokens_per_s", "saved_seconds")


def test_batched_evaluation_writes_the_rows_of_a_sequential_one(tiny_pair, data):
    base = DecodeSettings(max_new_tokens=24, temperature=0.8, seed=2)
    variants = tuple(parse_methods("target,sd,easd,easd:no_overlap", base))
    items = [WorkItem(p, s, variants) for p in load_problems(data, "gsm8k", limit=6) for s in range(2)]
    sequential = {(i.problem.id, i.sample): [r for r, _ in f] for i, f in decode_items(tiny_pair, items, 1)}
    batched = {(i.problem.id, i.sample): [r for r, _ in f] for i, f in decode_items(tiny_pair, items, 8)}
    assert sequential.keys() == batched.keys() and len(batched) == 12
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]
    for key in sequential:
        assert strip(batched[key]) == strip(sequential[key]), key


def test_shared_prefix_rows_equal_independent_rows(tiny_pair, data):
    base = DecodeSettings(max_new_tokens=40, temperature=0.9, seed=4)
    saved = 0.0
    for problem in load_problems(data, "gsm8k", limit=4):
        shared = rows_of(tiny_pair, WorkItem(problem, 0, tuple(parse_methods("sd,easd,easd:target_entropy_only", base))))
        alone = rows_of(tiny_pair, WorkItem(problem, 0, tuple(parse_methods("easd,easd:target_entropy_only", base))))
        for a, b in zip(shared[1:], alone):
            assert (a["text"], a["prediction"], a["penalized"], a["target_calls"]) == (
                b["text"],
                b["prediction"],
                b["penalized"],
                b["target_calls"],
            )
        saved += sum(r["saved_seconds"] for r in shared)
    assert saved > 0


def test_resumed_easd_rows_start_from_sd_redecoded_not_from_the_prompt(tiny_pair, data):
    """A folder whose SD rows are done and whose EASD rows are not (a study's grid widened on --resume): SD is decoded
    again as a leader, its row not written twice, and EASD resumes it at its first penalty."""
    base = DecodeSettings(max_new_tokens=40, temperature=0.9, seed=4)
    variants = parse_methods("sd,easd,easd:target_entropy_only", base)
    problems = load_problems(data, "gsm8k", limit=4)
    done = {(p.id, "sd", 0) for p in problems}
    items = pending_work(problems, variants, 1, done)
    assert [(i.leaders, i.variants) for i in items] == [((variants[0],), tuple(variants[1:]))] * 4
    assert pending_work(problems, variants[:1], 1, set())[0].leaders == ()  # nothing follows: no leader
    saved = 0.0
    for item in items:
        resumed = rows_of(tiny_pair, item)
        shared = rows_of(tiny_pair, WorkItem(item.problem, 0, tuple(variants)))
        assert [r["method"] for r in resumed] == ["easd", "easd:target_entropy_only"]
        strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]
        assert strip(resumed) == strip(shared[1:])
        saved += sum(r["saved_seconds"] for r in resumed)
    assert saved > 0  # without the leader, EASD would decode its prefix again and save nothing


def rows_written(path: Path) -> int:
    return max(0, len(list(csv.reader(path.open(newline="")))) - 1) if path.exists() else 0


@pytest.mark.slow  # a killed eval process loses and duplicates no row
def test_resume_after_a_killed_run_duplicates_and_loses_nothing(data, tmp_path):
    lines = data.read_text().splitlines()
    data.write_text("\n".join(lines * 2) + "\n")  # 16 problems: too many to finish before the kill
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "easd",
        "eval",
        "--pair",
        "tiny-random",
        "--data",
        str(data),
        "--methods",
        "sd,easd",
        "--max-new-tokens",
        "100",
        "--out",
        str(out),
    ]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and rows_written(results) < 4:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    with results.open("a", newline="") as handle:  # a kill in the middle of a write leaves half a row
        handle.write('7,sd,0,0,12,boxed,16,False,30,1.0,"unterminated')
    before = list(csv.DictReader(results.open(newline="")))[:-1]
    assert 4 <= len(before) < 32

    assert main([*command[3:], "--resume"]) == 0
    after = list(csv.DictReader((out / "results.csv").open(newline="")))
    assert sorted(keys(after)) == sorted({(str(i), m, "0") for i in range(16) for m in ("sd", "easd")})
    assert after[: len(before)] == before  # what was written before the kill is kept as it was
    assert (
        (out / "summary.csv").exists()
        and (out / "paired.csv").exists()
        and "plotly" in (out / "report.html").read_text()[:200000].lower()
    )


def test_output_folders_are_never_mixed(tiny_pair, data, tmp_path):
    problems = load_problems(data, "gsm8k", limit=1)
    config = {"pair": "tiny", "data": str(data), "format": "gsm8k", "shuffle": None, "samples": 1, "settings": {"k": 4}}
    variants = parse_methods("sd", DecodeSettings(max_new_tokens=5))
    run_evaluation(LocalRunner(tiny_pair), problems, variants, 1, tmp_path, config, progress=False)
    with pytest.raises(EasdError, match="already holds results; add --resume"):
        run_evaluation(LocalRunner(tiny_pair), problems, variants, 1, tmp_path, config, progress=False)
    with pytest.raises(EasdError, match="--resume: .* other settings"):
        run_evaluation(
            LocalRunner(tiny_pair), problems, variants, 1, tmp_path, {**config, "settings": {"k": 2}}, resume=True, progress=False
        )
    with pytest.raises(EasdError, match="--resume: .* other prompt_style"):  # no style said: ours, as before there were two
        asked = {**config, "prompt_style": "qwen25-math-cot"}
        run_evaluation(LocalRunner(tiny_pair), problems, variants, 1, tmp_path, asked, resume=True, progress=False)
    rows = run_evaluation(
        LocalRunner(tiny_pair),
        problems,
        parse_methods("sd,easd", DecodeSettings(max_new_tokens=5)),
        1,
        tmp_path,
        config,
        resume=True,
        progress=False,
    )
    assert sorted(keys(rows)) == [("0", "easd", "0"), ("0", "sd", "0")]  # a method added later runs; SD is not repeated


def test_samples_give_mean_std_and_vote(tiny_pair, data, tmp_path):
    problems = load_problems(data, "gsm8k", limit=3)
    config = {"pair": "tiny", "data": str(data), "format": "gsm8k", "shuffle": None, "samples": 3, "settings": {}}
    variants = parse_methods("sd,easd", DecodeSettings(max_new_tokens=12, temperature=1.0))
    rows = run_evaluation(LocalRunner(tiny_pair), problems, variants, 3, tmp_path, config, progress=False)
    assert len(rows) == 3 * 3 * 2 and {r["seed"] for r in rows} == {"0", "1", "2"}
    summary, paired = write_reports(tmp_path, "gsm8k")
    assert {"sample_accuracy_mean", "sample_accuracy_std", "vote_accuracy"} <= set(summary.columns)
    assert paired.loc[0, "pairs"] == 9 and paired.loc[0, ["both_right", "only_a", "only_b", "both_wrong"]].sum() == 9
    assert list(load_results(tmp_path / "results.csv").columns) == RESULT_COLUMNS


def test_calibration_mapping():
    assert [nearest_candidate(v) for v in (0.1, 0.74, 0.75, 0.76, 1.24, 1.26, 1.9, 3.7)] == [
        0.5,
        0.5,
        0.5,
        1.0,
        1.0,
        1.5,
        2.0,
        2.0,
    ]
    assert top_share_mean(list(range(100))) == pytest.approx(97.0)  # the top 5: 95..99
    assert top_share_mean([0.3, 2.0]) == 2.0  # always at least one value


def test_calibrate_command(data, tmp_path, capsys):
    arguments = f"calibrate --pair tiny-random --data {data} --limit 2 --max-new-tokens 24 --out {tmp_path}"
    assert main(arguments.split()) == 0
    results = json.loads((tmp_path / "calibration.json").read_text())
    assert [r["model"] for r in results] == ["target", "draft"] and all(r["tau_h"] in (0.5, 1.0, 1.5, 2.0) for r in results)
    assert all(r["tokens"] == 48 for r in results) and (tmp_path / "calibration.html").exists()
    assert "→ τ_H =" in capsys.readouterr().out
    assert main([*arguments.split(), "--batch-size", "4", "--out", str(tmp_path / "batched")]) == 0
    batched = json.loads((tmp_path / "batched" / "calibration.json").read_text())
    assert batched == results  # rows decode as they would alone, in any batch


def test_sweep_grid_shape(data, tmp_path):
    assert len(grid_variants(DecodeSettings(), "easd", {"tau_h": [1, 1.5, 2], "tau_o": [0.2, 0.4, 0.6, 0.8, 1.0]})) == 1 + 15
    arguments = (
        f"sweep --pair tiny-random --data {data} --limit 2 --max-new-tokens 16 --tau-hs 1,2 --tau-os 0.4,0.8,1 --out {tmp_path}"
    )
    assert main(arguments.split()) == 0
    sweep = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert sorted((float(r["tau_h"]), float(r["tau_o"])) for r in sweep) == [(h, o) for h in (1, 2) for o in (0.4, 0.8, 1.0)]
    assert all(0 <= float(r["penalized_token_rate"]) <= 1 for r in sweep) and (tmp_path / "sweep.html").exists()
    os.remove(tmp_path / "sweep.csv")


# --- results.csv read back: one line for a bad file, tables that survive an empty one ------------


def result_line(**changes) -> dict:
    row = dict.fromkeys(RESULT_COLUMNS, "")
    row.update(problem_id="1", method="sd", sample="0", seed="0", prediction="4", extraction="boxed", gold="4")
    row.update(correct="True", new_tokens="10", seconds="1.0", tokens_per_s="10", accepted="4")
    row.update(num_drafts="3", num_draft_tokens="12", mean_acceptance_length="2.33", draft_acceptance_rate="0.33")
    row.update(examined="8", penalized="0", target_calls="3", draft_calls="8", stop_reason="eos", saved_seconds="0")
    row.update(tau_h="1.0", tau_o="0.8", text="nan")
    return {**row, **changes}


def write_results(path: Path, rows: list[dict], columns=RESULT_COLUMNS) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns, extrasaction="ignore", lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize(
    "rows, columns, message",
    [
        ([], RESULT_COLUMNS, "results.csv: holds no results yet, only its header"),
        (
            [result_line(), result_line(new_tokens="nan")],
            RESULT_COLUMNS,
            "results.csv: row 3, column new_tokens: 'nan' is not a number",
        ),
        ([result_line(new_tokens="")], RESULT_COLUMNS, "results.csv: row 2, column new_tokens: '' is not a number"),
        ([result_line(seconds="abc")], RESULT_COLUMNS, "results.csv: row 2, column seconds: 'abc' is not a number"),
        ([result_line(tau_h="inf")], RESULT_COLUMNS, "results.csv: row 2, column tau_h: 'inf' is not a number"),
        ([result_line(correct="maybe")], RESULT_COLUMNS, "results.csv: row 2, column correct: 'maybe' is not one of False, True"),
        (
            [result_line()],
            [c for c in RESULT_COLUMNS if c != "tau_o"],
            "results.csv: not a results.csv of `easd eval`; missing columns: tau_o",
        ),
    ],
)
def test_bad_results_files_get_one_line(tmp_path, rows, columns, message):
    path = write_results(tmp_path / "results.csv", rows, columns)
    with pytest.raises(EasdError) as caught:
        load_results(path)
    assert str(caught.value) == message and str(tmp_path) not in str(caught.value)


def test_results_load_with_types(tmp_path):
    path = write_results(
        tmp_path / "results.csv", [result_line(), result_line(method="target", draft_acceptance_rate="", correct="False")]
    )
    results = load_results(path)
    assert list(results["correct"]) == [True, False] and list(results["text"]) == ["nan", "nan"]
    assert results["new_tokens"].tolist() == [10, 10] and results["draft_acceptance_rate"].isna().tolist() == [False, True]


def test_tables_and_figures_survive_an_empty_frame():
    empty = pd.DataFrame(columns=RESULT_COLUMNS)
    summary, paired = summary_table(empty), paired_table(empty)
    assert summary.empty and list(summary.columns) == SUMMARY_COLUMNS and paired.empty and "mcnemar_p" in paired.columns
    for figure in (accuracy_figure(summary), speed_figure(summary), paired_figure(paired)):
        assert figure.to_dict()["data"] is not None


def test_the_paired_table_says_what_its_problems_could_detect_and_what_a_gain_would_need(tmp_path):
    """100 problems where EASD alone is right on 12 and SD alone on 8 (ψ = 0.2): McNemar's power at that share, the
    lab's figures (easd.lab.reports.stats), beside the exact p; a method that never parts from SD extrapolates nothing."""
    from easd.lab.reports.stats import EFFECT_POINTS, detectable_difference, mcnemar_problems

    right = {"sd": [p >= 12 for p in range(100)], "easd": [p < 12 or p >= 20 for p in range(100)]}
    right["typical"] = right["sd"]
    rows = [result_line(problem_id=str(p), method=m, correct=str(c[p])) for m, c in right.items() for p in range(100)]
    paired = paired_table(load_results(write_results(tmp_path / "results.csv", rows))).set_index("a")
    easd = paired.loc["easd"]
    assert (easd["only_a"], easd["only_b"]) == (12, 8) and easd["mcnemar_p"] == pytest.approx(0.5034, abs=1e-4)
    assert easd["detectable"] == detectable_difference(0.2, 100) and 0.12 < easd["detectable"] < 0.13
    assert easd["problems_for_effect"] == mcnemar_problems(0.2, EFFECT_POINTS / 100) == 1280
    assert pd.isna(paired.loc["typical", "detectable"]) and pd.isna(paired.loc["typical", "problems_for_effect"])


def test_sweep_reads_tau_from_the_results_columns(tmp_path):
    """The labels say nothing about τ here: sweep.csv must take it from the tau_h and tau_o columns."""
    rows = [result_line(problem_id=str(p)) for p in range(2)]
    for label, tau_h, tau_o in (("easd@first", "1.5", "0.4"), ("easd@second", "1.5", "0.8"), ("easd@third", "2", "0.4")):
        rows += [result_line(problem_id=str(p), method=label, tau_h=tau_h, tau_o=tau_o, correct=str(p == 0)) for p in range(2)]
    write_results(tmp_path / "results.csv", rows)
    cells = write_sweep(tmp_path, "gsm8k")
    assert sorted(zip(cells["tau_h"], cells["tau_o"])) == [(1.5, 0.4), (1.5, 0.8), (2.0, 0.4)]
    assert list(cells["accuracy"]) == [0.5, 0.5, 0.5] and (tmp_path / "sweep.html").exists()


def test_result_rows_take_their_counts_from_the_trace_summary(tiny_pair, data):
    (problem,) = load_problems(data, "gsm8k", limit=1)
    variants = tuple(parse_methods("sd,easd", DecodeSettings(max_new_tokens=30, temperature=1.0, tau_h=0.5)))
    [(_, finished)] = decode_items(tiny_pair, [WorkItem(problem, 0, variants)], 1)
    for row, trace in finished:
        records = trace.records
        assert row["accepted"] == summarize(trace)["accepted"] == sum(r.origin == "draft_accepted" for r in records)
        assert row["examined"] == summarize(trace)["examined"] == sum(r.draft_token_id is not None for r in records) > 0
        assert row["penalized"] == sum(r.origin == "easd_penalty" for r in records)


def test_eval_compares_mti_with_target_only_and_writes_the_papers_table(data, tmp_path, capsys):
    out = tmp_path / "eval"
    arguments = f"eval --pair tiny-random --data {data} --limit 3 --max-new-tokens 16 --methods target,easd,mti --mti-tau 0"
    assert main([*arguments.split(), "--out", str(out)]) == 0
    results = load_results(out / "results.csv")
    mti = results[results["method"] == "mti"]
    assert (mti["interventions"] == mti["new_tokens"]).all()  # τ = 0 guides every token
    assert (mti["target_calls"] == 2 * mti["new_tokens"]).all()  # one extra target pass per guided token
    paired = pd.read_csv(out / "paired.csv")
    assert {("mti", "target"), ("easd", "target")} <= set(zip(paired["a"], paired["b"]))
    table, *warnings = (out / "paper.md").read_text().split("\n\n")
    table = table.splitlines()
    header = "| method | models | problems | average | tokens/s | mean acceptance length | interventions / 1k tokens |"
    header += " target passes / token | cut off |"
    assert table[0] == header + " problems: − target-only (paired 95%) |"
    assert [line.split("|")[1].strip() for line in table[2:]] == ["target", "easd", "mti"]
    models = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in table[2:]}
    assert models == {"target": "TM", "easd": "TM + DM", "mti": "TM"}  # as the paper's Table 1 marks them
    cells = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[6:-1]] for line in table[2:]}
    assert cells["mti"][1:3] == ["1000.0", "2.000"] and cells["target"][1:3] == ["0.0", "1.000"]  # τ = 0: a pass more a token
    assert cells["target"][4] == "—"  # target-only against itself
    summary = pd.read_csv(out / "summary.csv").set_index("method")
    for method in ("target", "easd", "mti"):  # 16 tokens cut most runs short: each such method is named under the table
        share = summary.loc[method, "cut_off"]
        assert cells[method][3] == f"{share:.1%}"
        warned = f"warning: {method} on problems: {share:.0%} of runs were cut off by the token budget"
        assert (warned in "".join(warnings)) == (share > 0.05)
    # the mean acceptance length pools the drafts: only EASD drafts here
    easd = results[results["method"] == "easd"]
    assert cells["easd"][0] == f"{1 + easd['accepted'].sum() / easd['num_drafts'].sum():.2f}"
    assert cells["target"][0] == cells["mti"][0] == "—"
    mti_vs_target = paired[(paired["a"] == "mti") & (paired["b"] == "target")].iloc[0]
    assert (
        cells["mti"][4]
        == f"{mti_vs_target['difference']:+.3f} ({mti_vs_target['boot95_low']:+.3f} to {mti_vs_target['boot95_high']:+.3f})"
    )
    assert "| mti |" in capsys.readouterr().out
    second = tmp_path / "second"
    assert main([*arguments.split(), "--offset", "3", "--out", str(second)]) == 0
    capsys.readouterr()
    assert main(["table", str(out), str(second)]) == 0
    header, _, *rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    # two benchmarks, their average, tokens/s, acceptance length, interventions, passes, cut off, and each benchmark's
    # paired difference
    assert header.count("|") == 13 and len(rows) == 3
    import shutil

    larger = tmp_path / "larger"  # the same benchmark run on another pair: the paper's second target scale
    shutil.copytree(second, larger)
    config = json.loads((larger / "run.json").read_text())
    (larger / "run.json").write_text(json.dumps(config | {"pair": "a larger target"}))
    assert main(["table", str(out), str(second), str(larger)]) == 0
    printed = capsys.readouterr().out
    blocks = [b for b in printed.split("### ") if b.strip()]
    assert [b.splitlines()[0] for b in blocks] == [config["pair"], "a larger target"]
    assert [sum(line.startswith("| ") for line in b.splitlines()) for b in blocks] == [4, 4]  # header and 3 methods


def test_sweep_over_mtis_tau_and_omega(data, tmp_path, capsys):
    """The paper's "intervention scale β" may be MTI's threshold τ or its guidance strength ω: the sweep runs both."""
    arguments = f"sweep --grid mti --pair tiny-random --data {data} --limit 2 --max-new-tokens 12 --mti-taus 0,2,100"
    assert main([*arguments.split(), "--mti-omegas", "1,3", "--out", str(tmp_path)]) == 0
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    assert list(zip(sweep["mti_omega"], sweep["mti_tau"])) == [(w, t) for w in (1, 3) for t in (0, 2, 100)]
    rates = sweep["interventions_per_1k"].tolist()
    assert rates[0] == rates[3] == 1000 and rates[2] == rates[5] == 0 and (tmp_path / "sweep.html").exists()
    results = load_results(tmp_path / "results.csv")
    assert set(results["method"]) == {"target", *(f"mti@{t}/{w}" for t in (0, 2, 100) for w in (1, 3))}
    text = {m: results[results["method"] == m]["text"].tolist() for m in ("target", "mti@0/1", "mti@0/3")}
    assert text["mti@0/1"] == text["target"] != text["mti@0/3"]  # ω = 1 is target-only even where it guides every token
    capsys.readouterr()
    assert main([*arguments.split()[:-1], "0,-1", "--out", str(tmp_path / "bad")]) == 2
    assert "--mti-taus: must be a number of nats ≥ 0 (got -1.0)" in capsys.readouterr().err
    assert main([*arguments.split(), "--mti-omegas", "0.5,1", "--out", str(tmp_path / "bad")]) == 2
    assert "--mti-omegas: must be a number from 1 to 10 (got 0.5)" in capsys.readouterr().err


def test_eval_runs_beam_search_on_the_draft_beside_the_batch(data, tmp_path, capsys):
    arguments = f"eval --pair tiny-random --data {data} --limit 3 --max-new-tokens 12 --methods draft,beam:1,beam:3,beam:3/0,sd"
    assert main([*arguments.split(), "--out", str(tmp_path / "beams")]) == 0
    results = load_results(tmp_path / "beams" / "results.csv")
    text = {m: results[results["method"] == m]["text"].tolist() for m in ("draft", "beam:1", "beam:3")}
    assert text["beam:1"] == text["draft"] and text["beam:3"] != text["draft"]  # one beam is greedy; three search
    assert (results[results["method"] == "beam:3"]["draft_calls"] > 0).all() and len(results) == 15
    capsys.readouterr()
    assert main(["table", str(tmp_path / "beams")]) == 0  # the table says how each beam row searched
    notes = capsys.readouterr().out
    assert "beam:3 on problems: 3 beams on the draft, greedy, ranked by log-probability / length^1" in notes
    assert "beam:3/0 on problems: 3 beams on the draft, greedy, ranked by summed log-probability" in notes
    for label, message in (
        ("beam:x", "must be beam:N"),
        ("beam:0", "from 1 to 64"),
        ("beam:3/x", "must be beam:N or beam:N/α"),
        ("beam:3/-1", "must be a number from 0 to 10"),
    ):
        capsys.readouterr()
        assert main([*arguments.split()[:-1], label, "--out", str(tmp_path / "bad")]) == 2
        assert message in capsys.readouterr().err


def voted_results(format: str, answers: list[str], gold: str) -> pd.DataFrame:
    """One problem, one method, a sample per answer: a results frame as `eval --samples` writes it."""
    rows = []
    for sample, answer in enumerate(answers):
        row = dict.fromkeys(RESULT_COLUMNS, 0) | {"problem_id": "p", "method": "sd", "sample": sample, "seed": sample}
        row |= {"prediction": answer, "gold": gold, "correct": is_correct(answer, gold, format), "new_tokens": 10}
        row |= {"seconds": 1.0, "stop_reason": "eos", "interventions": 0, "fragile_penalties": 0, "text": answer}
        rows.append(row)
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "format, answers, gold",
    [
        ("gpqa", ["B", "(B)", "C", "C", "B) iron"], "B"),
        ("aime", ["033", "33", "34", "34", "33.0"], "33"),
        ("math", ["\\frac{1}{2}", "0.5", "2", "2", "1/2"], "\\frac{1}{2}"),
    ],
)
def test_a_vote_counts_the_answers_the_grader_takes_for_one_together(format, answers, gold):
    """Three spellings of the right answer against two of a wrong one: the vote is right in every format (grouped
    by exact text, "C" or "34" or "2" won with two votes)."""
    summary = summary_table(voted_results(format, answers, gold), format)
    assert summary.loc[0, "vote_accuracy"] == 1.0 and summary.loc[0, "accuracy"] == pytest.approx(0.6)


def test_the_papers_table_prints_a_methods_vote_beside_its_mean(tmp_path):
    """With --samples the paper's "majority voting" row is the voted answer's accuracy, not the mean of the samples'
    (the table printed the mean there)."""
    format = "gsm8k"
    frames = [voted_results(format, answers, "18") for answers in (["18", "18", "7"], ["7", "7", "18"])]
    frames[1]["problem_id"] = "q"
    summary = summary_table(pd.concat(frames), format)
    assert summary.loc[0, "accuracy"] == pytest.approx(0.5) and summary.loc[0, "vote_accuracy"] == 0.5
    frames[1].loc[0, "prediction"] = "18.0"  # now each problem's vote is 18 (7 and 18 with one vote each: the earliest)
    frames[1].loc[1, "prediction"] = "nine"
    results = pd.concat(frames)
    results["correct"] = [is_correct(a, "18", format) for a in results["prediction"]]
    summary = summary_table(results, format)
    assert summary.loc[0, "vote_accuracy"] == 1.0 and summary.loc[0, "accuracy"] == pytest.approx(4 / 6)
    table = paper_table({"gsm8k": summary}).splitlines()
    cells = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in table[2:]}
    assert cells == {"sd, mean of 3 samples": "66.67", "sd, majority vote of 3 samples": "100.00"}


def test_the_table_adds_the_papers_best_on_test_row_from_a_sweep_of_the_same_problems(data, tmp_path, capsys):
    """The paper picks MTI's setting as the best on the test problems; our rows pick on held-out ones. A sweep run on
    the eval's own problems adds its best point, marked as the paper's protocol; a sweep of other problems is refused."""
    common = f"--pair tiny-random --data {data} --limit 3 --max-new-tokens 12"
    assert main([*f"eval {common} --methods target,mti".split(), "--out", str(tmp_path / "eval")]) == 0
    assert main([*f"sweep --grid mti {common} --mti-taus 0.5,1,100".split(), "--out", str(tmp_path / "sweep")]) == 0
    capsys.readouterr()
    assert main(["table", str(tmp_path / "eval"), "--best-on-test", str(tmp_path / "sweep")]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]  # warnings follow it
    rows = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in table}
    sweep = pd.read_csv(tmp_path / "sweep" / "sweep.csv")
    as_tau = sweep[sweep["mti_tau"].isin([0.5, 1])]  # τ = 100 is no β of the paper's grid: never chosen from
    best = as_tau.loc[as_tau["accuracy"].idxmax()]
    protocol = "best on these problems (the paper's protocol)"
    label = f"mti@{best['mti_tau']:g}/{best['mti_omega']:g}, best of 2 τ at ω = 1.5 (β read as τ), {protocol}"
    single = f"mti@1/1.5, best of 1 ω at τ = 1 (β read as ω − 1), {protocol}"
    assert set(rows) == {"target", "mti", label, single} and rows[label] == f"{100 * best['accuracy']:.2f}"
    other = f"sweep --grid mti --pair tiny-random --data {data} --offset 3 --limit 3 --max-new-tokens 12 --mti-taus 0"
    assert main([*other.split(), "--out", str(tmp_path / "other")]) == 0
    capsys.readouterr()
    assert main(["table", str(tmp_path / "eval"), "--best-on-test", str(tmp_path / "other")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --best-on-test: ") and "ran no eval folder's problems on its pair" in line


def test_mti_best_on_test_is_chosen_from_the_papers_4_point_grids_not_from_the_whole_sweep():
    from easd.cli.table import readings

    grid = [f"mti@{t:g}/{w:g}" for t in (0.5, 1, 1.5, 2) for w in (1.5, 2, 2.5, 3)]
    found = dict(readings(grid, {"mti_tau": 1.0, "mti_omega": 1.5}))
    assert found == {
        "best of 4 τ at ω = 1.5 (β read as τ)": ["mti@0.5/1.5", "mti@1/1.5", "mti@1.5/1.5", "mti@2/1.5"],
        "best of 4 ω at τ = 1 (β read as ω − 1)": ["mti@1/1.5", "mti@1/2", "mti@1/2.5", "mti@1/3"],
    }
    assert readings(["easd@1/0.2", "easd@1/0.4"], {}) == [("best of 2 grid points", ["easd@1/0.2", "easd@1/0.4"])]


def test_the_table_says_k_and_where_tau_h_came_from_beside_each_easd_row(data, tmp_path, capsys):
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps([{"model": "target", "tokens": 40, "raw": 1.61, "tau_h": 1.5}]))
    common = f"eval --pair tiny-random --data {data} --limit 2 --max-new-tokens 8 --methods sd,easd,easd:no_overlap --k 3"
    assert main([*common.split(), "--tau-h", "2", "--out", str(tmp_path / "given")]) == 0
    assert main([*common.split(), "--calibration", str(calibration), "--out", str(tmp_path / "calibrated")]) == 0
    capsys.readouterr()
    assert main(["table", str(tmp_path / "given")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if " on problems: k = " in line]
    assert notes == [
        f"{row} on problems: k = 3, τ_H = 2.0 (not calibrated: --tau-h 2), τ_O = 0.8, n = 5"
        for row in ("easd", "easd:no_overlap")
    ]
    assert main(["table", str(tmp_path / "calibrated")]) == 0
    [note, _] = [line for line in capsys.readouterr().out.splitlines() if " on problems: k = " in line]
    assert note.startswith("easd on problems: k = 3, τ_H = 1.5 (calibrated: calibration.json, the target's mean top-5%")


def test_eval_grades_with_the_harness_rules_when_asked_and_prints_the_other_graders_verdicts(data, tmp_path, capsys):
    out = tmp_path / "eval"
    arguments = f"eval --pair tiny-random --data {data} --limit 2 --max-new-tokens 8 --methods sd --out {out}".split()
    assert main([*arguments, "--grader", "qwen25-math"]) == 0
    assert json.loads((out / "run.json").read_text())["grader"] == "qwen25-math"
    results = load_results(out / "results.csv")
    expected = [is_correct(p or None, g, "gsm8k", "qwen25-math") for p, g in zip(results["prediction"], results["gold"])]
    assert list(results["correct"]) == expected
    printed = capsys.readouterr().out
    assert "graded by qwen25-math; by math-verify instead: sd " in printed and "the two graders part on" in printed
    # a folder's `correct` column holds one grader's verdicts: resuming it with the other is refused
    assert main([*arguments, "--resume"]) == 2
    assert "was run with other grader" in capsys.readouterr().err


def test_a_folder_made_before_a_setting_existed_resumes_at_its_default(tmp_path):
    """run.json written before `entropy` was a setting: resuming it at the default is the same run; otherwise not."""
    from dataclasses import replace

    from easd.lab.runs.results_table import prepare_folder
    from easd.method.methods import settings_values

    settings = {k: v for k, v in settings_values(DecodeSettings()).items() if k not in ("method", "rule")}
    config = {"pair": "tiny", "data": "d.jsonl", "format": "gsm8k", "samples": 1, "settings": settings}
    old = config | {"settings": {k: v for k, v in settings.items() if k != "entropy"}}
    (tmp_path / "run.json").write_text(json.dumps(old))
    prepare_folder(tmp_path, config, resume=True)  # the same run
    sampled = settings_values(replace(DecodeSettings(), entropy="sampling", temperature=0.7))
    (tmp_path / "run.json").write_text(json.dumps(old))
    with pytest.raises(EasdError, match="other settings"):
        prepare_folder(tmp_path, config | {"settings": {k: v for k, v in sampled.items() if k in settings}}, resume=True)


@pytest.mark.parametrize(
    "command, message",
    [
        ("eval --methods sd,easd,sd", "--methods: 'sd' is given twice"),
        ("sweep --tau-hs 1,1.0", "--tau-hs: '1' and '1.0' are one value"),
        ("sweep --tau-os 0.4,0.40", "--tau-os: '0.4' and '0.40' are one value"),
        ("sweep --grid mti --mti-taus 1,1", "--mti-taus: '1' is given twice"),
        ("sweep --grid mti --mti-omegas 2,2.0", "--mti-omegas: '2' and '2.0' are one value"),
        # issue 71: a grid's values in their setting's range, as its one-value flag checks it (τ_H −1 ran before)
        ("sweep --tau-hs 1,-1", "--tau-hs: must be a number of nats ≥ 0 (got -1.0)"),
        ("study --tau-os 0.4,1.5", "--tau-os: must be a number in [0, 1] (got 1.5)"),
    ],
)
def test_a_value_given_twice_in_a_list_is_refused_naming_its_flag(data, tmp_path, capsys, command, message):
    """Two variants of one name: their problems never counted as done, and no row was ever written."""
    argv = [*command.split(), "--pair", "tiny-random", "--data", str(data), "--limit", "1", "--max-new-tokens", "4"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "models:" not in err and not (tmp_path / "out").exists()  # before any model loads


def test_a_problem_too_long_for_the_context_is_refused_in_the_words_of_eval(tmp_path, capsys):
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"question": "How many apples? " * 2000, "answer": "#### 1"}) + "\n")
    assert main(["eval", "--pair", "tiny-random", "--data", str(data), "--methods", "sd", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "error: --data: problem '0': its prompt is 33,999 characters, more than the model's context" in err
    assert "--prompt" not in err


def test_more_new_tokens_than_the_context_holds_run_to_its_end(hf_tiny_pair, data, tmp_path, capsys):
    """A row's cache never holds more than the context, so a huge --max-new-tokens is no batch too large for memory."""
    from easd.lab.runs.evaluate import check_batch_fits

    argv = ["eval", "--pair", "tiny-random", "--data", str(data), "--limit", "1", "--methods", "target"]
    assert main([*argv, "--max-new-tokens", str(10**12), "--out", str(tmp_path / "out")]) == 0
    assert load_results(tmp_path / "out" / "results.csv")["stop_reason"].tolist() == ["context"]
    with pytest.raises(SettingsError, match=r"^--max-new-tokens: a row of up to 1,000,000,000,000 tokens needs about"):
        check_batch_fits(hf_tiny_pair, 1, 10**12)  # where even one row cannot fit, the flag to change is named


def cut_inside(path: Path, text: str) -> None:
    """results.csv as a kill leaves it: the last row written up to `text`, which the row's text column holds."""
    whole = path.read_bytes()
    path.write_bytes(whole[: whole.rindex(text.encode()) + len(text)])


@pytest.mark.parametrize("where", ["quoted", "plain", "line break"])
def test_a_row_a_kill_cut_short_is_dropped_and_the_next_starts_on_its_own_line(tmp_path, where):
    from easd.lab.runs.results_table import ResultsFile

    texts = {"quoted": 'He said, "12"\nand stopped', "plain": "twelve apples", "line break": "12\r\n"}
    results = ResultsFile(tmp_path)
    results.append([result_line(problem_id="1", text="the first"), result_line(problem_id="2", text=texts[where])])
    cut_inside(results.path, {"quoted": "He said", "plain": "twelve", "line break": "12\r\n"}[where])
    assert [r["problem_id"] for r in results.read()] == ["1"]  # the cut row dropped: its problem runs again
    results.append([result_line(problem_id="2", text=texts[where])])
    assert [(r["problem_id"], r["text"]) for r in results.read()] == [("1", "the first"), ("2", texts[where])]


def test_a_killed_run_cut_in_a_text_resumes_whole(hf_tiny_pair, data, tmp_path):
    problems = load_problems(data, "gsm8k", limit=3)
    config = {"pair": "tiny", "data": str(data), "format": "gsm8k", "shuffle": None, "samples": 1, "settings": {}}
    variants = parse_methods("sd", DecodeSettings(max_new_tokens=8))
    alone = run_evaluation(LocalRunner(hf_tiny_pair), problems, variants, 1, tmp_path / "alone", config, progress=False)
    out = tmp_path / "out"
    run_evaluation(LocalRunner(hf_tiny_pair), problems[:2], variants, 1, out, config, progress=False)
    cut_inside(out / "results.csv", alone[1]["text"][:5])  # the second row cut in its text
    rows = run_evaluation(LocalRunner(hf_tiny_pair), problems, variants, 1, out, config, resume=True, progress=False)
    assert [(r["problem_id"], r["text"]) for r in rows] == [
        ("0", alone[0]["text"]),
        *[(r["problem_id"], r["text"]) for r in alone[1:]],
    ]


def test_a_row_whose_trace_was_never_written_runs_again(hf_tiny_pair, data, tmp_path):
    problems = load_problems(data, "gsm8k", limit=2)
    config = {"pair": "tiny", "data": str(data), "format": "gsm8k", "shuffle": None, "samples": 1, "settings": {}}
    variants = parse_methods("sd,easd", DecodeSettings(max_new_tokens=8, tau_h=0.5))
    before = run_evaluation(LocalRunner(hf_tiny_pair), problems, variants, 1, tmp_path, config, keep_traces=True, progress=False)
    easd_row = {"problem_id": "1", "method": "easd", "sample": 0}
    (tmp_path / "traces" / trace_name(easd_row)).unlink()  # killed between the row and its trace
    after = run_evaluation(
        LocalRunner(hf_tiny_pair), problems, variants, 1, tmp_path, config, resume=True, keep_traces=True, progress=False
    )
    assert sorted(keys(after)) == sorted(keys(before)) and (tmp_path / "traces" / trace_name(easd_row)).is_file()
    assert {r["text"] for r in after if r["problem_id"] == "1"} == {r["text"] for r in before if r["problem_id"] == "1"}


@pytest.mark.parametrize(
    "written, why",
    [
        ('{"pair": "tiny", "settings": {"k": 4', "Expecting"),  # cut short
        ('{"pair": "tiny"}', "it has no settings"),
        ("[1, 2]", "it has no settings"),
        (b"\xff\xfe", "UnicodeDecodeError"),
    ],
)
def test_a_cut_or_foreign_run_json_is_one_line_that_says_what_to_do(data, tmp_path, written, why):
    (tmp_path / "results.csv").write_text(",".join(RESULT_COLUMNS) + "\r\n")
    path = tmp_path / "run.json"
    path.write_bytes(written if isinstance(written, bytes) else written.encode())
    config = {"pair": "tiny", "data": str(data), "format": "gsm8k", "shuffle": None, "samples": 1, "settings": {}}
    with pytest.raises(EasdError) as caught:
        run_evaluation(None, [], [], 1, tmp_path, config, resume=True, progress=False)
    message = str(caught.value)
    assert message.startswith(f"{path}: cut short or not a run.json") and why in message and "\n" not in message
    assert "--resume" in message and "another --out" in message


def test_one_sampling_protocol_for_every_method_of_a_comparison():
    """Greedy where every method can (SpecGuard's greedy variant: one greedy candidate); where one cannot (SMC-SD), every
    method samples at 0.7, SMC-SD's particles and SpecGuard's candidates too; the run's own temperature wins; a method's
    own temperature set apart, or a nucleus SMC-SD cannot take, refused naming its flag."""
    from easd.lab.runs.protocol import protocol_for, under

    base = make_settings(method="specguard")
    greedy = protocol_for(["sd", "easd", "specguard"], base)
    assert greedy.greedy and "every method has a greedy form" in greedy.line()
    guard = METHODS["specguard"].own(under(greedy, base))
    assert (guard.temperature, guard.top_p) == (0, 1.0)
    sampled = protocol_for(["sd", "specguard", "smc"], base)
    assert (sampled.temperature, sampled.top_p) == (0.7, 1.0) and "SMC-SD has no greedy form" in sampled.line()
    for method in ("sd", "specguard", "smc"):
        placed = under(sampled, replace(base, method=method))
        assert (placed.temperature, placed.top_p) == (0.7, 1.0)
    smc = METHODS["smc"].own(under(sampled, replace(base, method="smc")))
    assert (smc.draft_temperature, smc.target_temperature) == (0.7, 0.7)
    assert protocol_for(["sd", "smc"], replace(base, temperature=0.9)).temperature == 0.9
    with pytest.raises(SettingsError) as caught:
        under(protocol_for(["sd", "smc"], replace(base, top_p=0.8)), make_settings(method="smc", top_p=0.8))
    assert caught.value.setting == "top_p" and "without a nucleus" in caught.value.message
    with pytest.raises(SettingsError) as caught:
        under(sampled, make_settings(method="smc", smc_draft_temperature=0.5))
    assert caught.value.setting == "smc_draft_temperature" and "one protocol" in caught.value.message


def test_eval_decodes_every_method_under_one_protocol_and_says_which(data, tmp_path, capsys):
    """eval of SD beside SMC-SD at the default temperature: SD samples at 0.7 too; the protocol is printed, recorded in
    run.json and written under paper.md's table; `table` prints it; a refused nucleus is one line before any model."""
    out = tmp_path / "out"
    command = ["eval", "--pair", "tiny-random", "--data", str(data), "--limit", "1", "--max-new-tokens", "6"]
    assert main([*command, "--methods", "sd,smc", "--smc-particles", "2", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    line = "sampling protocol: every method sampled at temperature 0.7, top-p 1 (SMC-SD has no greedy form, so every method samples alike)"
    assert line in err and line in (out / "paper.md").read_text()
    config = json.loads((out / "run.json").read_text())
    assert config["protocol"]["temperature"] == 0.7 and config["settings"]["temperature"] == 0.7
    assert main(["table", str(out)]) == 0 and line in capsys.readouterr().out
    assert main([*command, "--methods", "sd,smc", "--top-p", "0.8", "--out", str(tmp_path / "nucleus")]) == 2
    assert "error: --top-p: SMC-SD samples without a nucleus" in capsys.readouterr().err
    assert not (tmp_path / "nucleus").exists()
