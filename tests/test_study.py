"""`python -m easd study`: one folder and one report that say whether EASD helped, on the tiny pair."""

import html
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from easd.cli import main
from easd.lab.grading.problems import load_problems
from easd.lab.reports.report import paired_row
from easd.lab.reports.stats import detectable_difference, mcnemar_exact, mcnemar_problems
from easd.lab.runs.evaluate import trace_name, trace_path
from easd.lab.runs.results_table import load_results
from easd.lab.study.findings import analyse, speed_note
from easd.lab.study.plan import StudyPlan, run_study, studied
from easd.lab.study.power import power as study_power
from easd.lab.study.power import power_lines
from easd.lab.study.report import write_report
from easd.lab.study.where import token_kind
from easd.method.generation import Generation
from easd.method.methods import make_settings, settings_values
from easd.method.settings import DecodeSettings
from easd.render.study import study_file
from easd.traces.files import read_json

TOKENS = 24


def problem_file(folder: Path) -> Path:
    rows = [
        {"question": f"Tom has {i} apples and buys {i + 2} more. How many apples does he have?", "answer": f"#### {2 * i + 2}"}
        for i in range(5)
    ]
    path = folder / "problems.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def data(tmp_path):
    return problem_file(tmp_path)


def config_of(data: Path, base: DecodeSettings, plan_problems, grid: int, speed: int, values: dict) -> dict:
    """What the command writes to run.json, for a study made through `run_study` directly."""
    settings = {k: v for k, v in settings_values(base).items() if k not in ("method", "rule")}
    return {
        "pair": "tiny",
        "data": str(data),
        "format": "gsm8k",
        "shuffle": None,
        "prompt_style": "qwen25-math-cot",
        "samples": 1,
        "settings": settings,
        "command": "python -m easd study (test)",
        "study": {
            "tau_h_source": "not calibrated: --tau-h 0.5",
            "method": base.method,
            "problems": len(plan_problems),
            "grid": {setting: list(points) for setting, points in values.items()},
            "grid_problems": [p.id for p in plan_problems[:grid]],
            "speed_problems": [p.id for p in plan_problems[:speed]],
            "target_runs": "timed",
            "batch_size": 4,
        },
    }


EASD_GRID = {"tau_h": (0.5, 1.0), "tau_o": (0.4, 0.8)}


def study(tiny_pair, data, out, temperature=0.0, limit=4, resume=False, method="easd", grid=EASD_GRID, **settings):
    """A study of `method` (at `settings`, its own by their flat names) against SD, its grid's values `grid`."""
    problems = load_problems(data, "gsm8k", limit, 0, None, "qwen25-math-cot")
    common = dict(tau_h=0.5, tau_o=0.8, max_new_tokens=TOKENS, temperature=temperature, top_p=1.0)
    base = make_settings(method=method, **common, **settings)
    plan = StudyPlan(problems, base, grid_limit=2, speed_limit=2, grid=grid, batch_size=4, speed_repeats=1)
    run_study(tiny_pair, plan, out, config_of(data, base, problems, 2, 2, grid), resume, progress=False)
    found = analyse(out)
    write_report(out, found)
    return plan, found


@pytest.fixture(scope="module")
def greedy(tiny_pair, tmp_path_factory):
    """One greedy study per backend, which the tests that only read it share: (plan, figures, folder)."""
    folder = tmp_path_factory.mktemp("greedy")
    plan, found = study(tiny_pair, problem_file(folder), folder / "study")
    return plan, found, folder / "study"


def test_a_greedy_study_answers_with_paired_figures_a_grid_and_the_target_read_from_sd(tiny_pair, greedy):
    plan, found, out = greedy
    results = load_results(out / "results.csv")
    # the paired comparison is the one results.csv gives, counted again here
    again = paired_row(results, "easd", "sd")
    assert found["paired"]["only_a"] == again["only_a"] and found["paired"]["only_b"] == again["only_b"]
    assert found["paired"]["mcnemar_p"] == mcnemar_exact(again["only_a"], again["only_b"])
    sd, easd = (results[results["method"] == m].set_index("problem_id") for m in ("sd", "easd"))
    assert found["paired"]["texts_differ"] == int((sd["text"] != easd["text"].reindex(sd.index)).sum())
    assert found["paired"]["texts_differ"] > 0  # at τ_H 0.5 the tiny pair's EASD fires: the test can tell
    # greedy: target-only ran on the timed problems only, equalled SD there, and SD's rows stand for it elsewhere
    assert set(results[results["method"] == "target"]["problem_id"]) == set()
    speed = load_results(out / "speed" / "results.csv")
    assert sorted(set(speed["method"])) == ["easd", "sd", "target"] and speed["problem_id"].nunique() == 2
    assert found["target"] == {**found["target"], "greedy": True, "checked": 2, "equal_count": 2, "equal": True}
    target = next(r for r in found["accuracy"] if r["method"] == "target")
    assert target["source"] == "SD's texts" and target["correct"] == int(sd["correct"].sum())
    assert {r["method"] for r in found["speed"]} == {"target", "sd", "easd"}
    assert next(r for r in found["speed"] if r["method"] == "target")["speedup"] == 1.0
    # every grid cell over the grid's two problems; the study's own point is its "easd" rows
    cells = found["grid"]["cells"]
    assert set(cells) == {"0.5/0.4", "0.5/0.8", "1/0.4", "1/0.8"} and all(c["runs"] == 2 for c in cells.values())
    grid_problems = plan.problems[:2]
    for problem in grid_problems:  # a grid point resumed from SD's run equals EASD decoded from the prompt there
        alone = Generation(tiny_pair, problem.prompt, replace(plan.base, tau_h=1.0, tau_o=0.4), system=problem.system).run()
        row = results[(results["method"] == "easd@1/0.4") & (results["problem_id"] == problem.id)].iloc[0]
        assert row["text"] == alone.text
    # where it intervenes: every penalty of the EASD traces counted once, by position and by the kind of draft refused
    penalties = int(easd["penalized"].sum())
    fires = found["interventions"]
    assert fires["count"] == penalties == sum(fires["by_tenth"]) == sum(fires["by_kind"].values()) == fires["set_aside"]
    assert sum(p["count"] for p in fires["pairs"]) <= penalties and fires["kind_of"] == "kind of token set aside"
    # the files
    for name in ("study.json", "study.md", "study.html"):
        assert (out / name).stat().st_size > 0
    assert found["verdict"] in (out / "study.md").read_text()
    # both graders' accuracy beside each other, the study's own being results.csv's `correct`
    graders = found["graders"]
    assert (graders["grader"], graders["other"]) == ("math-verify", "qwen25-math")
    assert graders["accuracy"]["sd"][0] == sd["correct"].mean() and set(graders["accuracy"]) == {"sd", "easd"}
    assert "## Graders" in (out / "study.md").read_text() and "<h2>Graders</h2>" in (out / "study.html").read_text()


def test_each_difference_links_to_the_token_where_the_runs_part(greedy):
    _, found, out = greedy
    results = load_results(out / "results.csv")
    answers = {m: results[results["method"] == m].set_index("problem_id")["prediction"].astype(str) for m in ("sd", "easd")}
    differing = {p for p in answers["sd"].index if answers["sd"][p] != answers["easd"][p]}
    assert {d["problem_id"] for d in found["differences"]} == differing
    for d in found["differences"]:
        rows = ({"problem_id": d["problem_id"], "method": m, "sample": 0} for m in ("sd", "easd"))
        sd_trace, easd_trace = (read_json(trace_path(out / "traces", row))[0] for row in rows)
        pairs = zip(sd_trace.token_ids, easd_trace.token_ids)
        assert d["token"] == next(
            (i for i, (a, b) in enumerate(pairs) if a != b), min(len(sd_trace.token_ids), len(easd_trace.token_ids))
        )
        assert f"token={d['token']}" in d["app_link"] and "eval=study" in d["app_link"] and "right=easd" in d["app_link"]
        if d["file"]:  # one right, one wrong: the one-file export opened at the parting token
            assert d["file"].endswith(f"#right-{d['token']}")
            assert (out / d["file"].split("#")[0]).is_file()


@pytest.mark.slow  # the sampled path: target-only run on every problem, since its text is not SD's
def test_a_sampled_study_runs_the_target_on_every_problem(tiny_pair, data, tmp_path):
    _, found = study(tiny_pair, data, tmp_path / "study", temperature=0.7, limit=2)
    results = load_results(tmp_path / "study" / "results.csv")
    assert results[results["method"] == "target"]["problem_id"].nunique() == 2
    assert found["target"]["equal"] is False and "sampled" in found["target"]["why"]
    assert next(r for r in found["accuracy"] if r["method"] == "target")["source"] == "run"


@pytest.mark.slow  # two studies in one folder: a resumed study adds problems and repeats no row
def test_a_study_resumed_with_more_problems_adds_them_and_repeats_nothing(tiny_pair, data, tmp_path):
    study(tiny_pair, data, tmp_path / "study", limit=2)
    before = load_results(tmp_path / "study" / "results.csv")
    _, found = study(tiny_pair, data, tmp_path / "study", limit=3, resume=True)
    after = load_results(tmp_path / "study" / "results.csv")
    key = ["problem_id", "method", "sample"]
    assert not after.duplicated(key).any()
    kept = after.merge(before, on=key, suffixes=("", "_before"))
    assert len(kept) == len(before) and (kept["text"] == kept["text_before"]).all()
    assert after[after["method"] == "sd"]["problem_id"].nunique() == 3 == found["paired"]["pairs"]


def test_the_report_escapes_model_output_and_runs_only_its_hashed_scripts(greedy):
    found = {**greedy[1], "interventions": dict(greedy[1]["interventions"])}
    hostile = "<img src=x onerror=alert(1)>"
    found["interventions"]["pairs"] = [{"set_aside": hostile, "chosen": "</script><script>alert(2)</script>", "count": 1}]
    found["differences"] = [
        {
            "problem_id": hostile,
            "gold": hostile,
            "left": hostile,
            "left_correct": False,
            "right": "1",
            "right_correct": True,
            "token": 3,
            "app_link": "http://127.0.0.1:7860/?eval=study&problem=%3Cimg%3E&token=3",
            "file": "differences/%3Cimg.html#right-3",
        }
    ]
    page = study_file(found)
    assert hostile not in page and "<script>alert(2)" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    policy = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1))
    assert policy.startswith("default-src 'none'") and policy.count("'sha256-") == 2
    assert page.count("<script>") == 2  # Plotly and the figures' script; the figures' JSON does not run


@pytest.mark.parametrize(
    "text, kind",
    [
        (" 42", "digit"),
        ("7", "digit"),
        (" +", "operator"),
        ("=", "operator"),
        (" The", "word start"),
        ("ing", "word piece"),
        (",", "punctuation"),
        (".\n", "punctuation"),
        ("\n\n", "whitespace"),
        (" ", "whitespace"),
        ("\\(", "punctuation"),
        ("€", "other"),
    ],
)
def test_token_kinds(text, kind):
    assert token_kind(text) == kind


def test_the_command_line_says_what_is_wrong_before_loading_a_model(data, tmp_path, capsys):
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps([{"model": "target", "tokens": 10, "raw": 1.4, "tau_h": 1.5}]))
    cases = [
        ([], "--data: is needed to decode"),
        (["--report-only"], "holds no study"),
        (["--data", str(data), "--grid-limit", "-1"], "--grid-limit: must be ≥ 0"),
        (["--data", str(data), "--tau-os", "0.2,7"], r"--tau-os: must be a number in \[0, 1\]"),
        (["--data", str(data), "--tau-h", "1", "--calibration", str(calibration)], "--tau-h: and --calibration both set"),
        (["--data", str(data), "--calibration", str(data)], "--calibration: .* is not a calibration.json"),
        (["--data", str(data), "--app-url", "javascript:alert(1)"], "--app-url: must be the app's address"),
        (["--data", str(data), "--ray-actors", "2"], "--ray-actors: needs --ray"),
    ]
    # a method the study cannot compare with SD: SD and target-only themselves, an --methods label, none
    for method in ("sd", "target", "easd:no_overlap"):
        message = f"--method: must be one of {', '.join(studied())}: the methods a study compares with SD (got '{method}')"
        cases.append((["--data", str(data), "--method", method], re.escape(message)))
    for effect in ("0", "-3.5", "101", "nan", "inf"):
        for extra in (["--data", str(data)], ["--report-only"]):
            cases.append(
                ([*extra, "--effect", effect], r"--effect: must be a gain in accuracy points, more than 0 and at most 100")
            )
    for extra, message in cases:
        assert main(["study", "--pair", "tiny-random", "--out", str(tmp_path / "out"), *extra]) == 2
        err = capsys.readouterr().err
        assert re.search(message, err) and err.count("\n") == 1 and "models:" not in err, (message, err)
        assert not (tmp_path / "out").exists(), message  # nothing made for a command refused


def test_the_command_line_study_reads_tau_h_from_a_calibration_and_says_so(data, tmp_path, capsys):
    calibration = tmp_path / "calibration.json"
    calibration.write_text(
        json.dumps(
            [
                {"model": "target", "tokens": 10, "raw": 1.4, "tau_h": 1.5},
                {"model": "draft", "tokens": 9, "raw": 2.1, "tau_h": 2.0},
            ]
        )
    )
    out = tmp_path / "out"
    argv = ["study", "--pair", "tiny-random", "--data", str(data), "--limit", "2", "--max-new-tokens", "8"]
    argv += ["--grid-limit", "1", "--speed-limit", "1", "--tau-hs", "1.5", "--tau-os", "0.8", "--calibration", str(calibration)]
    assert main([*argv, "--out", str(out)]) == 0
    config = json.loads((out / "run.json").read_text())
    assert config["settings"]["tau_h"] == 1.5
    assert config["tau_h_source"].startswith("calibrated: calibration.json, the target's mean top-5% entropy 1.400")
    assert "the draft's 2" in config["tau_h_source"]
    printed = capsys.readouterr().out
    assert "# Does EASD help?" in printed and "τ_H = 1.5 (calibrated" in printed
    assert main(["study", "--out", str(out), "--report-only"]) == 0  # redrawn from the folder alone
    assert pd.read_json(out / "study.json", typ="series")["grid"]["cells"]["1.5/0.8"]["runs"] == 1


# --- reliability: bad input in one line before any model loads, a study that loses nothing --------------------------

FLAGS = ["--max-new-tokens", "8", "--grid-limit", "2", "--speed-limit", "1", "--speed-repeats", "2"]
FLAGS += ["--tau-hs", "1", "--tau-os", "0.4", "--tau-h", "0.5"]


def study_command(data: Path, out, *extra: str) -> list[str]:
    return ["study", "--pair", "tiny-random", "--data", str(data), "--limit", "3", *FLAGS, *extra, "--out", str(out)]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A study the command line made (3 problems, the grid on 2, 1 timed twice): (its data, its folder)."""
    folder = tmp_path_factory.mktemp("made")
    data = problem_file(folder)
    assert main(study_command(data, folder / "study")) == 0
    return data, folder / "study"


def refused(argv: list[str], capsys) -> str:
    """The one line a command refused `argv` with, before any model loaded."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "models:" not in err and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "grid, message",
    [
        (["--tau-hs", "1,1"], "--tau-hs: '1' is given twice"),
        (["--tau-hs", "1,1.0"], "--tau-hs: '1' and '1.0' are one value"),
        (["--tau-os", "1,1.0"], "--tau-os: '1' and '1.0' are one value"),
    ],
)
def test_a_grid_value_given_twice_is_refused_naming_its_flag(data, tmp_path, capsys, grid, message):
    """Two grid points of one name never finished: the report said "unfinished" forever, or a KeyError."""
    argv = ["study", "--pair", "tiny-random", "--data", str(data), "--limit", "1", "--max-new-tokens", "4", *grid]
    assert message in refused([*argv, "--out", str(tmp_path / "out")], capsys)


def test_an_out_that_cannot_be_written_is_refused_before_the_model_loads(data, tmp_path, capsys):
    file = tmp_path / "file.txt"
    file.write_text("mine")
    for out, why in (
        (file, "a file, not a folder"),
        (file / "under", "Not a directory"),
        ("/dev/null", "a file, not a folder"),
        ("/proc/easd-study", "No such file or directory"),
        ("/sys/easd-study", "not permitted"),
    ):
        err = refused(study_command(data, out), capsys)
        assert err.startswith(f"error: --out: {out} cannot be the study's folder (") and why in err, err
    with pytest.raises(SystemExit, match="2"):  # argparse's one line: not the current folder
        main(study_command(data, ""))
    assert "argument --out: is empty" in capsys.readouterr().err
    assert file.read_text() == "mine"


def test_a_folder_that_is_not_a_study_is_refused_and_left_as_it_was(data, tmp_path, capsys, made):
    _, study = made
    other = tmp_path / "other"
    other.mkdir()
    (other / "run.json").write_text("my own run.json")
    (other / "study.md").write_text("my notes")
    assert f"--out: {other} holds other files" in refused(study_command(data, other), capsys)
    assert (other / "run.json").read_text() == "my own run.json" and (other / "study.md").read_text() == "my notes"
    evaluation = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--pair",
                "tiny-random",
                "--data",
                str(data),
                "--limit",
                "1",
                "--max-new-tokens",
                "4",
                "--out",
                str(evaluation),
            ]
        )
        == 0
    )
    capsys.readouterr()
    for resume in ([], ["--resume"]):  # a study never takes over eval's folder
        assert "made by `eval` or `sweep`, not by `study`" in refused(study_command(data, evaluation, *resume), capsys)
    # nor eval a study's
    argv = ["eval", "--pair", "tiny-random", "--data", str(data), "--limit", "3", "--tau-h", "0.5", "--max-new-tokens", "8"]
    assert main([*argv, "--out", str(study), "--resume"]) == 2
    assert "holds results made by `study`; choose another --out" in capsys.readouterr().err
    assert "study" in json.loads((study / "run.json").read_text())


@pytest.mark.parametrize(
    "changed, message",
    [
        (["--offset", "1"], "--offset: {out} holds a study run with --offset 0: resume with it"),
        (["--limit", "2"], "--limit: {out} holds a study of 3 problems: resume with --limit 3 or more"),
        (
            ["--grid-limit", "1"],
            "--grid-limit: {out} holds a study whose τ grid ran on 2 problems: resume with --grid-limit 2 or more",
        ),
        (["--speed-limit", "0"], "--speed-limit: {out} holds a study that timed 1 problem: resume with --speed-limit 1 or more"),
        (["--speed-repeats", "3"], "--speed-repeats: {out} holds a study timed with --speed-repeats 2: resume with it"),
        (["--k", "2"], "--resume: {out} was run with other settings"),
        (["--method", "mti"], "--method: {out} holds a study of easd against SD: resume with --method easd"),
    ],
)
def test_a_study_resumed_with_another_plan_is_refused_saying_what_it_was(made, capsys, changed, message):
    data, out = made
    argv = study_command(data, out, "--resume")
    value = argv.index(changed[0]) + 1 if changed[0] in argv else None
    if value:
        argv[value] = changed[1]
    else:
        argv[-2:-2] = changed
    assert message.format(out=out) in refused(argv, capsys)


def test_a_study_killed_mid_row_mid_trace_and_mid_run_json_loses_nothing(made, tmp_path, capsys):
    data, made_out = made
    out = tmp_path / "study"
    shutil.copytree(made_out, out)
    before = load_results(out / "results.csv")
    # a kill: the last row cut in its text, a row whose trace was never written
    last = before.iloc[-1]
    whole = (out / "results.csv").read_bytes()
    (out / "results.csv").write_bytes(whole[: whole.rindex(last["text"][:4].encode()) + 4])
    (out / "traces" / trace_name(before.iloc[0])).unlink()
    assert main(study_command(data, out, "--resume")) == 0
    after = load_results(out / "results.csv")
    key = ["problem_id", "method", "sample"]
    assert not after.duplicated(key).any() and len(after) == len(before)
    assert (after.set_index(key).loc[before.set_index(key).index, "text"] == before.set_index(key)["text"]).all()
    assert all((out / "traces" / trace_name(row)).is_file() for _, row in after.iterrows())
    assert "unfinished" not in json.loads((out / "study.json").read_text())["verdict"]
    capsys.readouterr()
    # run.json cut short (or not a study's): one line that names it, for the report and for --resume
    text = (out / "run.json").read_text()
    for written in (text[: len(text) // 2], json.dumps({"study": {}, "settings": {}})):
        (out / "run.json").write_text(written)
        for argv in (["study", "--out", str(out), "--report-only"], study_command(data, out, "--resume")):
            err = refused(argv, capsys)
            assert err.startswith(f"error: {out / 'run.json'}: cut short or not a run.json") and "--resume" in err


def test_the_speed_table_is_the_median_of_repetitions_taken_in_turns(made):
    _, out = made
    speed = pd.read_csv(out / "speed" / "results.csv", dtype=str)
    assert sorted(speed["sample"].unique()) == ["0", "1"] and len(speed) == 2 * 3
    # the one timed problem's methods, repetition by repetition: target-only first, then last (EASD follows SD)
    assert list(speed["method"]) == ["target", "sd", "easd", "sd", "easd", "target"]
    found = json.loads((out / "study.json").read_text())
    for row in found["speed"]:
        rates = [
            sum(int(r["new_tokens"]) for _, r in rows.iterrows()) / sum(float(r["seconds"]) for _, r in rows.iterrows())
            for _, rows in speed[speed["method"] == row["method"]].groupby("sample")
        ]
        assert row["repetitions"] == 2 and row["tokens_per_s"] == pytest.approx(sum(rates) / 2)
        assert row["tokens_per_s_range"] == pytest.approx(sorted(rates))
    assert found["speed_note"] in (out / "study.md").read_text() and "Each method timed 2 times" in found["speed_note"]


def speed_row(method: str, low: float, high: float) -> dict:
    return {"method": method, "repetitions": 3, "spread": (high - low) / ((low + high) / 2)}


def test_the_report_says_when_the_repetitions_show_a_busy_machine():
    quiet = speed_note([speed_row("target", 10, 10.5), speed_row("sd", 20, 21)])
    assert "agree within 10%: the machine was quiet enough" in quiet
    busy = speed_note([speed_row("target", 10, 10.5), speed_row("sd", 20, 30)])
    assert "differ by more than 10% (sd's by 40%): the machine was busy" in busy and "delete speed/" in busy
    once = speed_note([{**speed_row("sd", 20, 20), "repetitions": 1, "spread": 0.0}])
    assert "One repetition has no spread to tell a busy machine by" in once


def test_a_study_stopped_before_its_first_row_reports_that_it_has_none(made, tmp_path, capsys):
    out = tmp_path / "study"
    out.mkdir()
    shutil.copy(made[1] / "run.json", out / "run.json")
    assert main(["study", "--out", str(out), "--report-only"]) == 0  # was KeyError: 'prediction_easd'
    assert "No problem has been decoded by both SD and EASD yet." in capsys.readouterr().out


# --- any method against SD (--method), and how many problems it would take ---------------------------------------

MTI_FLAGS = ["--method", "mti", "--mti-taus", "0.5,2", "--mti-omegas", "1.5", "--speed-repeats", "1"]


@pytest.fixture(scope="module")
def mti_made(tmp_path_factory):
    """A study of MTI against SD that the command line made (3 problems, its τ × ω grid on 2, 1 timed): (data, folder)."""
    folder = tmp_path_factory.mktemp("mti")
    data = problem_file(folder)
    argv = ["study", "--pair", "tiny-random", "--data", str(data), "--limit", "3", "--max-new-tokens", "8"]
    assert main([*argv, "--grid-limit", "2", "--speed-limit", "1", *MTI_FLAGS, "--out", str(folder / "study")]) == 0
    return data, folder / "study"


def test_a_study_compares_mti_with_sd_over_its_own_grid(mti_made):
    _, out = mti_made
    results, speed = load_results(out / "results.csv"), load_results(out / "speed" / "results.csv")
    grid_problems = set(results["problem_id"].unique()[:2])
    # MTI on every problem, its own grid (τ × ω, not τ_H × τ_O) on the grid's problems, SD and target-only as for EASD
    assert set(results["method"]) == {"sd", "mti", "mti@0.5/1.5", "mti@2/1.5"}
    assert set(results[results["method"].str.startswith("mti@")]["problem_id"]) == grid_problems
    assert sorted(set(speed["method"])) == ["mti", "sd", "target"]
    found = json.loads((out / "study.json").read_text())
    assert found["method"]["name"] == "mti" and found["config"]["study"]["method"] == "mti"
    assert found["method"]["label"] == "mti (MTI; MTI τ = 1, MTI ω = 1.5)"
    again = paired_row(results, "mti", "sd")
    assert (found["paired"]["only_a"], found["paired"]["only_b"]) == (again["only_a"], again["only_b"])
    assert found["verdict"].startswith("On 3 problems, MTI vs SD: ")
    grid = found["grid"]
    assert grid["settings"] == ["mti_tau", "mti_omega"] and set(grid["cells"]) == {"0.5/1.5", "2/1.5"}
    for key, cell in grid["cells"].items():  # each point's guided tokens per 1,000, from its own rows
        rows = results[results["method"] == f"mti@{key}"]
        assert cell["runs"] == 2 and cell["interventions_per_1k"] == pytest.approx(
            1000 * rows["interventions"].sum() / rows["new_tokens"].sum()
        )
    # where it intervenes: MTI's guided tokens, read by their origin; MTI's records name no token set aside
    mti = results[results["method"] == "mti"]
    found_here = found["interventions"]
    assert found_here["count"] == int(mti["interventions"].sum()) == sum(found_here["by_kind"].values()) > 0
    assert found_here["set_aside"] == 0 and found_here["kind_of"] == "kind of token written"
    assert all(p["set_aside"] is None for p in found_here["pairs"])
    assert found["calibration"] == {}  # τ_H's calibration is EASD's: MTI's grid has no τ_H
    for d in found["differences"]:
        assert "left=sd" in d["app_link"] and "right=mti" in d["app_link"]
    report, page = (out / "study.md").read_text(), (out / "study.html").read_text()
    assert report.startswith("# Does MTI help?") and "## Where MTI intervenes" in report and "guided tokens" in report
    assert "| MTI τ \\ MTI ω | 1.5 |" in report and "after the fact" not in report and "τ_H = " not in report
    assert "<h2>Where MTI intervenes</h2>" in page and "Sensitivity to MTI τ × MTI ω" in page
    assert page.count('class="figure"') == 2 + 3  # where it intervenes; the grid: two heatmaps and its line


def test_a_study_resumed_with_another_method_is_refused(mti_made, capsys):
    data, out = mti_made
    argv = ["study", "--pair", "tiny-random", "--data", str(data), "--limit", "3", "--max-new-tokens", "8", "--grid-limit", "2"]
    argv += ["--speed-limit", "1", "--speed-repeats", "1", "--resume", "--out", str(out)]
    for method in ([], ["--method", "easd"]):  # the default is EASD: a study of MTI resumes only as one
        message = f"--method: {out} holds a study of mti against SD: resume with --method mti, or choose another --out"
        assert message in refused([*argv, *method], capsys)


def test_a_study_of_specguard_by_confidence_alone_on_llama_cpp_draws_its_one_setting_grid_as_a_line(data, tmp_path, capsys):
    argv = ["study", "--pair", "tiny-random", "--backend", "llama.cpp", "--data", str(data), "--limit", "2"]
    argv += ["--max-new-tokens", "8", "--grid-limit", "1", "--speed-limit", "1", "--speed-repeats", "1"]
    argv += ["--method", "specguard", "--specguard-thresholds", "0.3,0.9"]
    # attention grounding asked for needs the draft's attention, which llama.cpp does not expose: one line, nothing decoded
    assert main([*argv, "--specguard-grounding", "attention", "--out", str(tmp_path / "attention")]) == 2
    err = capsys.readouterr().err
    assert "error: --specguard-grounding: attention needs the draft's attention weights" in err and "Traceback" not in err
    assert not (tmp_path / "attention" / "results.csv").exists()
    out = tmp_path / "confidence"  # by default (auto), confidence alone where there is no attention
    assert main([*argv, "--specguard-grounding", "none", "--out", str(out)]) == 0
    found = json.loads((out / "study.json").read_text())
    assert found["method"]["label"] == "specguard (SpecGuard, confidence only; SpecGuard threshold = 0.7)"
    assert set(found["grid"]["cells"]) == {"0.3", "0.9"} and found["grid"]["labels"] == ["SpecGuard threshold"]
    report = (out / "study.md").read_text()
    assert "| SpecGuard threshold | 0.3 | 0.9 |" in report and "recomputed tokens per 1,000 tokens" in report
    assert (out / "study.html").read_text().count('class="figure"') == 2 + 1  # where it intervenes; the grid's line


def test_a_study_made_before_method_reads_as_easd(made, tmp_path, capsys):
    """run.json of a study made before --method: no study.method, the grid as tau_hs and tau_os."""
    data, made_out = made
    out = tmp_path / "old"
    shutil.copytree(made_out, out)
    config = json.loads((out / "run.json").read_text())
    grid = config["study"].pop("grid")
    del config["study"]["method"]
    config["study"] |= {"tau_hs": grid["tau_h"], "tau_os": grid["tau_o"]}
    (out / "run.json").write_text(json.dumps(config))
    assert main(["study", "--out", str(out), "--report-only"]) == 0
    assert "# Does EASD help?" in capsys.readouterr().out
    old, new = (json.loads((folder / "study.json").read_text()) for folder in (out, made_out))
    assert old["method"] == new["method"] and old["method"]["name"] == "easd"
    assert old["grid"] == new["grid"] and old["interventions"] == new["interventions"]
    resumed = study_command(data, out, "--resume", "--method", "mti")
    assert f"--method: {out} holds a study of easd against SD: resume with --method easd" in refused(resumed, capsys)


def test_the_report_says_how_many_problems_it_would_take(greedy, tmp_path):
    """The smallest difference the study could have detected, and the problems (and days) a gain of --effect needs,
    from its discordant problems: the tiny pair is right nowhere, so the verdicts are set here."""
    _, _, made_out = greedy
    out = tmp_path / "study"
    shutil.copytree(made_out, out)
    results = pd.read_csv(out / "results.csv", dtype=str, keep_default_na=False)
    problems = sorted(results["problem_id"].unique())  # 4: EASD right on three, SD on the other
    results["correct"] = [
        str((row["method"] == "sd") == (row["problem_id"] == problems[0])) if row["method"] in ("sd", "easd") else row["correct"]
        for _, row in results.iterrows()
    ]
    results.to_csv(out / "results.csv", index=False)
    found = analyse(out, effect=10)
    power = found["power"]
    assert (power["pairs"], power["discordant"], power["effect"]) == (4, 1.0, 10)
    assert power["detectable"] == pytest.approx(detectable_difference(1.0, 4)) and 0 < power["detectable"] <= 1
    assert power["needed"] == mcnemar_problems(1.0, 0.10) > 4
    timed = {row["method"]: row["seconds_per_problem"] for row in found["speed"]}
    assert power["seconds_per_problem"] == pytest.approx(timed["sd"] + timed["easd"])
    assert power["days"] == pytest.approx(power["needed"] * power["seconds_per_problem"] / 86400)
    said = f"it could have detected ±{100 * power['detectable']:.1f} points; detecting +10 points would take ~{power['needed']:,} problems (~"
    assert said in found["verdict"] and found["verdict"].endswith(" on this machine).")
    write_report(out, found)
    report, page = (out / "study.md").read_text(), (out / "study.html").read_text()
    assert "## How many problems would it take?" in report and "<h2>How many problems would it take?</h2>" in page
    for text in (f"±{100 * power['detectable']:.1f} points", f"would take ~{power['needed']:,} problems", "Connor 1987"):
        assert text in report and html.escape(text) in page


def test_the_power_section_says_when_a_days_decoding_is_not_enough():
    speed = [{"method": "target", "seconds_per_problem": 10.0}] + [
        {"method": m, "seconds_per_problem": 300.0} for m in ("sd", "x")
    ]
    paired = {"pairs": 100, "only_a": 7, "only_b": 5}
    power = study_power(paired, speed, 3.5)
    assert (power["per_day"], power["needed"]) == (144, mcnemar_problems(0.12, 0.035))
    study = {"power": power, "paired": paired, "method": {"title": "X"}}
    lines = " ".join(power_lines(study))
    assert f"~{power['needed']:,} problems" in lines and "600.0 s a problem, ~144 problems a day" in lines
    assert f"more than this machine decodes in a day: ~{power['days']:.1f} days" in lines and power["days"] > 1
    # no discordant problem: nothing to extrapolate from, and the report says so instead of a number
    alike = study_power({"pairs": 100, "only_a": 0, "only_b": 0}, speed, 3.5)
    assert alike["needed"] is None and alike["detectable"] is None
    assert "must be assumed: this study does not extrapolate" in " ".join(power_lines({**study, "power": alike}))
