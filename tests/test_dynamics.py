"""`python -m easd acceptance`: acceptance by Spec-Bench category and task domain, by position, against entropy, on
the tiny pair with question files of our own."""

import base64
import hashlib
import json
import math
import re
import signal
import subprocess
import sys
import time
from html import unescape
from pathlib import Path

import numpy as np
import pytest
from test_app_browser import CHROMEDRIVER, CHROMIUM
from test_spec_metrics import hand_made

from easd.cli import main
from easd.lab.acceptance.dynamics import DOMAINS, observations, question_file, read_answers, round_robin
from easd.lab.reports.stats import average_ranks, cluster_bootstrap, spearman
from easd.lab.speed.specbench import load_questions
from easd.method.methods import settings_values
from easd.method.settings import DecodeSettings
from easd.method.spec_metrics import SpecMetrics
from tools.offline import open_offline, requests_made

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "<img src=x onerror=alert(1)>|"
# Spec-Bench's shape, our own questions: two turns on one, a category of every domain but logical reasoning, one of no
# domain, and a category named as markup, with an id that holds a slash
QUESTIONS = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku about rain.", "Now make it about snow."]},
    {"question_id": 82, "category": "writing", "turns": ["Describe a cat."]},
    {"question_id": 101, "category": "coding", "turns": ["def add(a, b):"]},
    {"question_id": 102, "category": "coding", "turns": ["Write a loop in Python."]},
    {"question_id": "gsm-1", "category": "math_reasoning", "turns": ["Tom has 3 apples and buys 5 more. How many now?"]},
    {"question_id": 121, "category": "translation", "turns": ["Translate 'good morning' to French."]},
    {"question_id": "mt/131", "category": HOSTILE, "turns": ["Say hello."]},  # a slash in an id
]
TOKENS = "24"


def write_questions(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def command(data: Path, out: Path, *extra: str, backend: str = "auto") -> list[str]:
    return ["acceptance", "--pair", "tiny-random", "--backend", backend, "--data", str(data), "--out", str(out), *extra]


@pytest.fixture(scope="module")
def folder(tiny_pair, tmp_path_factory):
    """One run of the command per backend, which the tests that only read it share: its folder."""
    tmp = tmp_path_factory.mktemp("acceptance")
    data = write_questions(tmp / "question.jsonl", QUESTIONS)
    out = tmp / "out"
    assert main(command(data, out, "--max-new-tokens", TOKENS, "--tau-h", "0.5", backend=tiny_pair.backend)) == 0
    return out


def test_the_folder_holds_a_file_per_question_the_figures_and_both_reports(folder, capsys):
    assert sorted(p.name for p in (folder / "questions").iterdir()) == sorted(
        question_file(folder, q["question_id"]).name
        for q in QUESTIONS  # "mt/131" too: one plain file name an id
    )
    assert {"run.json", "figures.json", "report.md", "report.html"} <= {p.name for p in folder.iterdir()}
    config = json.loads((folder / "run.json").read_text())
    assert config["settings"]["temperature"] == 0 and config["settings"]["k"] == 4  # greedy, the project's k
    answers = read_answers(folder)
    assert [a.question_id for a in answers] == [q["question_id"] for q in QUESTIONS]  # the file's order
    assert [len(a.traces) for a in answers] == [2, 1, 1, 1, 1, 1, 1]  # a run per turn
    assert all(t.settings.method == "sd" and t.settings.tau_h == 0.5 for a in answers for t in a.traces)
    found = json.loads((folder / "figures.json").read_text())
    assert found["overall"]["questions"] == len(QUESTIONS)


def test_the_counts_are_spec_metrics_counts_of_the_same_traces(folder):
    # the figures the command wrote (analyse's, of this folder): analysing again would redo its 2,000-resample intervals
    found, answers = json.loads((folder / "figures.json").read_text()), read_answers(folder)
    for row in [*found["categories"], *found["domains"], found["overall"]]:
        members = DOMAINS.get(row["name"], (row["name"],)) if row["name"] != "overall" else {a.category for a in answers}
        traces = [t for a in answers if a.category in members for t in a.traces]
        metrics = SpecMetrics.of(traces)
        assert row["num_drafts"] == metrics.num_drafts > 0
        assert row["num_accepted_tokens"] == metrics.num_accepted_tokens
        assert row["mean_acceptance_length"] == metrics.mean_acceptance_length
        assert row["draft_acceptance_rate"] == metrics.draft_acceptance_rate
        assert row["conditional_acceptance"] == metrics.conditional_acceptance
        # every examined position is one observation: those the drafts reached, position by position
        seen = observations(traces)
        assert row["examined"] == len(seen) == sum(metrics.reached_per_position)
        assert seen.groupby("position").size().tolist() == metrics.reached_per_position
        assert seen.groupby("position")["accepted"].sum().tolist() == metrics.accepted_per_position
        assert row["examined_acceptance"] == pytest.approx(metrics.num_accepted_tokens / len(seen))
        # a penalty would end the draft: counted once a draft, at its first kept position where the rule fired
        fired = {(i, r.block) for i, t in enumerate(traces) for r in t.records if r.origin == "draft_accepted" and r.triggered}
        assert row["penalties"] == len(fired)
        assert row["tokens"] == sum(len(t.records) for t in traces)


def test_a_position_behind_a_rejection_is_never_an_observation():
    """The hand-made trace of test_spec_metrics: drafts of k = 3 whose ends are 3 accepted (then a bonus), a rejection at
    position 2, a penalty at 1, a penalty at 3: positions 3, 2 and 3 of the second and third drafts were never judged."""
    seen = observations([hand_made()])
    assert seen["position"].tolist() == [1, 2, 3, 1, 2, 1, 1, 2, 3]
    assert seen["accepted"].tolist() == [True, True, True, True, False, False, True, True, False]
    assert seen["triggered"].sum() == 2  # the hand-made trace's two penalties, where the rule fired
    assert seen[["h_draft", "h_target"]].notna().all().all()


def test_categories_map_to_the_seed_studys_domains_as_documented(folder):
    found = json.loads((folder / "figures.json").read_text())
    domain_of = {row["name"]: row["domain"] for row in found["categories"]}
    assert domain_of == {
        "writing": "open-ended chat",
        "coding": "code",
        "math_reasoning": "mathematical reasoning",
        "translation": None,
        HOSTILE: None,
    }
    assert [d["name"] for d in found["domains"]] == ["code", "mathematical reasoning", "open-ended chat"]  # none for logic
    assert [d["categories"] for d in found["domains"]] == [["coding"], ["math_reasoning"], ["writing"]]
    assert found["overall"]["questions"] == sum(c["questions"] for c in found["categories"])
    assert DOMAINS == {
        "code": ("coding",),
        "mathematical reasoning": ("math", "math_reasoning"),
        "logical reasoning": ("reasoning",),
        "open-ended chat": ("writing", "roleplay"),
    }


def test_spearman_is_scipys_and_a_hand_computed_case():
    # ranks of (0, 0, 1, 1) are 1.5, 1.5, 3.5, 3.5: their correlation with 1..4 is 4 / √(4 · 5) = 2 / √5
    assert spearman([0, 0, 1, 1], [1, 2, 3, 4]) == pytest.approx(2 / math.sqrt(5))
    assert spearman([1, 0, 0, 1], [4, 3, 2, 1]) == pytest.approx(0.0, abs=1e-12)  # the ends accepted, the middle not
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3])) and math.isnan(spearman([1], [2]))  # constant, or one pair
    stats = pytest.importorskip("scipy.stats", reason="scipy comes with requirements-research.txt (scikit-learn)")
    rng = np.random.default_rng(7)
    accepted = rng.integers(0, 2, 400)
    entropy = np.round(rng.gamma(1.0, 1.0, 400), 1)  # rounded: many ties, as entropies of a greedy run have
    assert spearman(accepted, entropy) == pytest.approx(stats.spearmanr(accepted, entropy).statistic, abs=1e-12)
    assert np.allclose(average_ranks(entropy), stats.rankdata(entropy))


def test_the_bootstrap_resamples_whole_questions():
    """Two questions, 1,000 accepted positions and 1 rejected: resampling questions gives means of 0, 1 or their
    pooled 1000/1001, never what drawing positions one by one would give (about 0.999 ± 0.002)."""
    clusters = [(np.ones(1000),), (np.zeros(1),)]
    low, high = cluster_bootstrap(lambda a: float(a.mean()), clusters, samples=400)
    assert low == 0.0 and high == 1.0
    assert math.isnan(cluster_bootstrap(spearman, [(np.ones(3), np.arange(3.0))] * 3)[0])  # always constant: no interval


def test_rho_has_an_interval_over_questions_and_none_from_one_question(folder):
    found = json.loads((folder / "figures.json").read_text())
    chat = next(d for d in found["domains"] if d["name"] == "open-ended chat")
    overall = found["overall"]
    for row in (chat, overall):
        for side in ("rho_draft", "rho_target"):
            rho = row[side]
            assert -1 <= rho["low"] <= rho["rho"] <= rho["high"] <= 1
    math_row = next(d for d in found["domains"] if d["name"] == "mathematical reasoning")  # one question
    assert math_row["rho_draft"]["low"] is None and math_row["rho_draft"]["rho"] is not None


def test_the_report_opens_offline_and_escapes_the_files_text(folder):
    page = (folder / "report.html").read_text(encoding="utf-8")
    policy = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1))
    assert policy.startswith("default-src 'none'") and "connect-src" not in policy  # nothing may be fetched
    ran = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    allowed = set(re.findall(r"'sha256-([^']+)'", policy))
    assert len(ran) == 2 and allowed == {base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() for s in ran}
    outside = re.sub(r"<script>.*?</script>", "", page, flags=re.S)  # Plotly and the figures' script
    assert re.findall(r"<(?:link|iframe|object|embed|img)\b", outside) == []
    assert re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", outside) == []  # no address outside the file
    assert "<img src=x" not in outside and "&lt;img src=x onerror=alert(1)&gt;|" in outside
    data = re.findall(r'<script type="application/json" data-figure>(.*?)</script>', page, flags=re.S)
    assert len(data) == 4 and all("<" not in d for d in data)  # a figure's JSON cannot end its element early
    assert "&lt;img src=x" in "".join(data) and "\\u003cimg" not in "".join(data)  # Plotly reads tags in its text
    table = (folder / "report.md").read_text(encoding="utf-8")
    assert "| <img src=x onerror=alert(1)>\\| |" in table  # the pipe cannot split a markdown row


def test_the_report_is_drawn_again_from_the_folder_alone(folder, tmp_path, capsys):
    copy = tmp_path / "copy"
    (copy / "questions").mkdir(parents=True)
    for path in [folder / "run.json", *(folder / "questions").iterdir()]:
        (copy / path.relative_to(folder)).write_bytes(path.read_bytes())
    assert main(["acceptance", "--out", str(copy), "--report-only"]) == 0
    assert "# Where SD accepts" in capsys.readouterr().out
    assert (copy / "report.md").read_text() == (folder / "report.md").read_text()
    assert (copy / "report.html").read_text().count("data-figure>") == 4


def test_bad_input_is_one_line_naming_the_flag_before_any_model_loads(tmp_path, capsys):
    data = write_questions(tmp_path / "q.jsonl", QUESTIONS[:2])
    twice = write_questions(tmp_path / "twice.jsonl", [QUESTIONS[0], {**QUESTIONS[1], "question_id": "81"}])
    bad = write_questions(tmp_path / "bad.jsonl", [QUESTIONS[0], "{oops"])
    made = made_run(tmp_path / "made", data)
    (tmp_path / "file").write_text("")
    out = str(tmp_path / "out")
    cases = [
        ([], "--data: is needed to decode"),
        (["--data", str(tmp_path / "missing.jsonl")], "--data: no such file"),
        (["--data", str(bad)], "--data: line 2 of .* is not a Spec-Bench question"),
        (["--data", str(twice)], "--data: question id '81' appears twice"),
        (["--data", str(data), "--per-category", "0"], "--per-category: must be ≥ 1"),
        (["--data", str(data), "--tau-o", "7"], r"--tau-o: must be a number in \[0, 1\]"),
        (["--data", str(data), "--k", "0"], "--k: must be"),
        (["--data", str(data), "--temperature", "-1"], "--temperature: must be"),
        (["--data", str(data), "--tau-h", "1", "--calibration", str(data)], "--tau-h: and --calibration both set"),
        (["--data", str(data), "--draft", "x"], "--target: is needed too"),
        (["--data", str(data), "--out", str(tmp_path / "file")], "--out: .* cannot be the acceptance run's folder \\(a file"),
        (["--data", str(data), "--out", str(made)], "--out: .* already holds a run; add --resume"),
        (["--data", str(data), "--out", str(made), "--resume"], "--resume: .* was run with other models, .*settings"),
        (["--out", str(tmp_path), "--report-only"], "--out: .* holds no acceptance run"),
    ]
    for extra, message in cases:
        started = time.monotonic()
        assert main(["acceptance", "--pair", "tiny-random", "--out", out, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert re.match(f"error: {message}", err) and err.count("\n") == 1 and "models:" not in err, (extra, err)
        assert time.monotonic() - started < 5, extra
    assert not Path(out).exists()  # nothing was written for a refused run


def made_run(out: Path, data: Path) -> Path:
    """A folder as a run the model never reached leaves it: run.json (another pair, k = 2) and an empty questions/."""
    (out / "questions").mkdir(parents=True)
    settings = {k: v for k, v in settings_values(DecodeSettings(method="sd", k=2)).items() if k != "method"}
    config = {"models": {"pair": "other"}, "data": str(data), "settings": settings, "per_category": 10, "command": "…"}
    (out / "run.json").write_text(json.dumps(config))
    return out


def refused(argv: list[str], capsys) -> str:
    """The one line a command refused `argv` with, before any model loaded."""
    started = time.monotonic()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "models:" not in err and time.monotonic() - started < 5, err
    return err


def test_an_out_that_cannot_be_written_or_is_a_users_is_refused_before_the_model_loads(tmp_path, capsys):
    """Each was written into (the current folder, a user's files, report.md replaced) or a traceback after the model
    loaded; now the study's own check (easd.files.claim_folder)."""
    data = write_questions(tmp_path / "q.jsonl", QUESTIONS[:2])
    file = tmp_path / "file.txt"
    file.write_text("mine")
    for out, why in (
        (file, "a file, not a folder"),
        (file / "under", "Not a directory"),
        ("/dev/null", "a file, not a folder"),
        ("/proc/easd-acceptance", "No such file or directory"),
        ("/sys/easd-acceptance", "not permitted"),
    ):
        err = refused(command(data, out), capsys)
        assert err.startswith(f"error: --out: {out} cannot be the acceptance run's folder (") and why in err, err
    with pytest.raises(SystemExit, match="2"):  # argparse's one line: not the current folder
        main(command(data, ""))
    assert "argument --out: is empty" in capsys.readouterr().err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    (mine / "run.json").write_text("my own run.json")
    for argv in (command(data, mine), command(data, mine, "--resume")):
        assert f"--out: {mine} holds other files: give a new or empty folder" in refused(argv, capsys)
    assert (mine / "report.md").read_text() == "my notes" and (mine / "run.json").read_text() == "my own run.json"
    assert file.read_text() == "mine" and sorted(p.name for p in mine.iterdir()) == ["report.md", "run.json"]


def test_a_run_json_cut_short_binary_or_a_list_is_one_line_on_resume_and_report_only(tmp_path, capsys):
    data = write_questions(tmp_path / "q.jsonl", QUESTIONS[:2])
    out = made_run(tmp_path / "out", data)
    whole = (out / "run.json").read_bytes()
    for written in (whole[: len(whole) // 2], b"\x89PNG\r\n\x1a\n\xff", b"[1, 2]", b"[" * 100_000):
        (out / "run.json").write_bytes(written)
        for argv in (["acceptance", "--out", str(out), "--report-only"], command(data, out, "--resume")):
            err = refused(argv, capsys)
            if written.startswith(b"[" * 1000):  # the one reader every run.json goes through says what is wrong with it
                assert (
                    err
                    == f"error: --out: {out / 'run.json'} nests its JSON too deeply to read; nothing EASD reads nests so deep\n"
                )
                continue
            assert err.startswith(f"error: {out / 'run.json'}: cut short or not a run.json") and "--resume" in err, err
        assert (out / "run.json").read_bytes() == written


def test_questions_that_is_a_file_or_a_question_file_that_is_a_folder_is_one_line(tmp_path, capsys):
    data = write_questions(tmp_path / "q.jsonl", QUESTIONS[:2])
    out = made_run(tmp_path / "out", data)
    inside = question_file(out, 81)
    inside.mkdir()  # a folder where a question's file would be
    for argv in (["acceptance", "--out", str(out), "--report-only"], command(data, out, "--resume")):
        assert f"--out: {inside} is not a question's file" in refused(argv, capsys)
    inside.rmdir()
    (out / "questions").rmdir()
    (out / "questions").write_text("mine")  # a file where the folder would be
    for argv in (["acceptance", "--out", str(out), "--report-only"], command(data, out, "--resume"), command(data, out)):
        assert f"--out: {out / 'questions'} is not a folder of question files" in refused(argv, capsys)
    assert (out / "questions").read_text() == "mine"


def test_resume_with_more_questions_per_category_decodes_only_those_it_lacks(tmp_path):
    data = write_questions(tmp_path / "q.jsonl", QUESTIONS[:4])  # writing 81, 82; coding 101, 102
    out = tmp_path / "out"
    assert main(command(data, out, "--max-new-tokens", "12", "--per-category", "1")) == 0
    first = {p.name: p.read_bytes() for p in (out / "questions").iterdir()}
    assert sorted(first) == sorted(question_file(out, i).name for i in (101, 81))
    assert main(command(data, out, "--max-new-tokens", "12", "--per-category", "2", "--resume")) == 0
    after = {p.name: p.read_bytes() for p in (out / "questions").iterdir()}
    assert sorted(after) == sorted(question_file(out, i).name for i in (101, 102, 81, 82))
    assert all(after[name] == content for name, content in first.items())  # what was done is kept as it was
    assert json.loads((out / "figures.json").read_text())["overall"]["questions"] == 4


def test_sampled_runs_are_allowed_and_recorded(tmp_path):
    data = write_questions(tmp_path / "q.jsonl", QUESTIONS[2:4])
    out = tmp_path / "out"
    assert main(command(data, out, "--max-new-tokens", "12", "--temperature", "0.7", "--seed", "3")) == 0
    traces = [t for a in read_answers(out) for t in a.traces]
    assert {(t.settings.temperature, t.settings.seed) for t in traces} == {(0.7, 3)}
    assert "temperature 0.7, top-p 1, seed 3" in (out / "report.md").read_text()


@pytest.mark.slow  # a killed process, then --resume: no finished question is lost or decoded again
def test_questions_are_decoded_a_category_at_a_time_in_turn(tmp_path):
    """A run stopped early holds some of every category, each category's questions in file order."""
    questions = load_questions(write_questions(tmp_path / "q.jsonl", QUESTIONS), 10)
    order = [(q.category, q.question_id) for q in round_robin(questions)]
    assert order == [
        ("writing", 81),
        ("coding", 101),
        ("math_reasoning", "gsm-1"),
        ("translation", 121),
        (HOSTILE, "mt/131"),
        ("writing", 82),
        ("coding", 102),
    ]


@pytest.mark.slow  # a command killed and resumed in processes of its own, 14 s: the full suite's, not the quick tier's
def test_resume_after_a_kill_loses_nothing(tmp_path):
    rows = [{"question_id": i, "category": ("writing", "coding", "qa")[i % 3], "turns": [f"Count to {i}."]} for i in range(8)]
    data = write_questions(tmp_path / "q.jsonl", rows)
    out = tmp_path / "out"
    argv = command(data, out, "--max-new-tokens", "48")  # a question at a time, each long enough for the kill to land
    process = subprocess.Popen(
        [sys.executable, "-m", "easd", *argv], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    folder = out / "questions"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(folder.glob("*.json")) if folder.exists() else []) < 2:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = {p.name: p.read_bytes() for p in folder.glob("*.json")}
    assert 2 <= len(before) < len(rows)
    leftover = folder / ".7.json.tmp-0badc0de"  # a file the kill cut short, as easd.files leaves it
    leftover.write_text('{"format": "easd-trace", "runs": [')

    assert main([*argv, "--resume"]) == 0
    after = {p.name: p.read_bytes() for p in folder.glob("*.json")}
    assert sorted(after) == sorted(question_file(out, i).name for i in range(len(rows)))
    assert all(after[name] == content for name, content in before.items())  # kept as written before the kill
    assert not leftover.exists()
    assert json.loads((out / "figures.json").read_text())["overall"]["questions"] == len(rows)


@pytest.mark.slow  # Chromium with the network off, on the report
@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
def test_the_report_draws_its_figures_in_a_browser_with_the_network_off(folder):

    driver, _ = open_offline(folder / "report.html", "1280,720")
    try:
        assert driver.execute_script("return document.querySelectorAll('.figure.js-plotly-plot').length") == 4
        errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []  # nothing the policy refused
        assert {url.split(":")[0] for url in requests_made(driver)} <= {"file", "data"}  # no network request
    finally:
        driver.quit()
