"""A study on more than one machine (easd.lab.shards): `study --shard I/N` and `study merge`, on the tiny pair.

The same study is made once on one machine and once as two shards merged; the two folders must read alike."""

import csv
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_study import problem_file, refused

from easd.cli import main
from easd.lab.grading.problems import load_problems
from easd.lab.runs.results_table import ResultsFile
from easd.lab.shards.recorded import model_files, recorded_files
from easd.lab.shards.split import owner, shard_of
from easd.lab.study.findings import analyse
from easd.lab.study.plan import StudyPlan
from easd.method.settings import DecodeSettings

# 4 problems: the grid on the first 2 (ids 0 and 1, owned by shards 1 and 2), both timed (by shard 1)
FLAGS = [
    "--pair",
    "tiny-random",
    "--backend",
    "transformers",
    "--limit",
    "4",
    "--max-new-tokens",
    "8",
    "--grid-limit",
    "2",
    "--speed-limit",
    "2",
]
FLAGS += ["--speed-repeats", "1", "--tau-hs", "1", "--tau-os", "0.4", "--tau-h", "0.5"]
TIMINGS = ["seconds", "tokens_per_s", "saved_seconds"]  # the only columns that differ between two runs of one row


def study(data: Path, out: Path, *extra: str) -> list[str]:
    return ["study", "--data", str(data), *FLAGS, *extra, "--out", str(out)]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The study on one machine, as two shards, and the two merged: their folders (each named `study`, as a link
    into the app names it)."""
    root = tmp_path_factory.mktemp("shards")
    data = problem_file(root)
    folders = {name: root / name / "study" for name in ("whole", "one", "two", "merged")}
    assert main(study(data, folders["whole"])) == 0
    assert main(study(data, folders["one"], "--shard", "1/2")) == 0
    assert main(study(data, folders["two"], "--shard", "2/2")) == 0
    assert main(["study", "merge", str(folders["one"]), str(folders["two"]), "--out", str(folders["merged"])]) == 0
    return data, folders


def rows(folder: Path) -> list[tuple]:
    """A results.csv's rows but their timings, in one order."""
    found = pd.read_csv(folder / "results.csv", dtype=str, keep_default_na=False).drop(columns=TIMINGS)
    return sorted(map(tuple, found.to_numpy().tolist()))


def untimed(figures: list | dict, clock: set[str]):
    """A report's rows (or row) without the figures read off the clock."""
    if isinstance(figures, list):
        return [untimed(row, clock) for row in figures]
    return {k: v for k, v in figures.items() if k not in clock}


def problems(folder: Path) -> set[str]:
    return {row[0] for row in rows(folder)}


def test_a_problem_is_in_one_shard_by_its_id_whatever_the_order_offset_or_limit(tmp_path):
    data = problem_file(tmp_path)  # ids 0 … 4
    base = DecodeSettings(method="easd")
    for shuffle, offset, limit in ((None, 0, 5), (7, 0, 5), (None, 2, 3), (3, 1, 2)):
        chosen = load_problems(data, "gsm8k", limit, offset, shuffle)
        plan = StudyPlan(chosen, base, grid_limit=2, speed_limit=1)
        config = {"study": {"problems": len(chosen), "grid_problems": [p.id for p in chosen[:2]], "speed_problems": []}}
        for count in (1, 2, 3):
            shares = [shard_of(plan, config, index, count)[0] for index in range(1, count + 1)]
            ids = [p.id for share in shares for p in share.problems]
            assert sorted(ids) == sorted(p.id for p in chosen)  # each problem in exactly one share
            for index, share in enumerate(shares, start=1):
                assert all(owner(p.id, count) == index for p in share.problems)
                # its grid problems are those of the plan's first two it owns, first, in the plan's order
                assert share.problems[: share.grid_limit] == [p for p in chosen[:2] if owner(p.id, count) == index]
                assert share.timed == (chosen[:1] if index == 1 else [])  # shard 1 times every timed problem
    # by a SHA-256 of the id, not Python's hash() (salted per process): the same shares on every machine, every run
    assert [owner(str(i), 2) for i in range(6)] == [1, 2, 1, 2, 1, 2]
    assert [owner(str(i), 3) for i in range(6)] == [1, 2, 2, 2, 2, 3]


def test_two_shards_merged_read_as_the_study_one_machine_made(made, capsys):
    data, folders = made
    whole, one, two, merged = (folders[name] for name in ("whole", "one", "two", "merged"))
    # each shard decoded its own problems (the grid's first two split between them); shard 1 timed both
    assert problems(one) == {"0", "2"} and problems(two) == {"1", "3"}
    assert {r[0] for r in rows(one / "speed")} == {"0", "1"} and not (two / "speed" / "results.csv").exists()
    # the merged rows are one machine's, but their timings: results, traces and speed
    assert rows(merged) == rows(whole) and rows(merged / "speed") == rows(whole / "speed")
    assert sorted(p.name for p in (merged / "traces").iterdir()) == sorted(p.name for p in (whole / "traces").iterdir())
    # the report's every figure but the clock's, the folder's path, and the commands
    alone, joined = (json.loads((folder / "study.json").read_text()) for folder in (whole, merged))
    assert alone["interventions"]["count"] > 0 and alone["grid"]["cells"]["1/0.4"]["runs"] == 2  # figures with something in
    for key in alone.keys() - {"folder", "config", "speed", "power", "calibration", "assumptions"}:
        assert joined[key] == alone[key], key  # the verdict too: the tiny pair is never right, so it names no clock time
    # the target's entropies, summed in another batch, part in their last float32 bits
    assert joined["calibration"] == alone["calibration"] | {"raw": pytest.approx(alone["calibration"]["raw"], rel=1e-6)}
    clock = {"seconds", "tokens_per_s", "tokens_per_s_range", "speedup", "speedup_range", "spread"}
    clock |= {"seconds_per_problem", "per_day", "days"}  # the problems a gain would take, priced at the timed speed
    for key in ("speed", "power"):
        assert untimed(joined[key], clock) == untimed(alone[key], clock), key
    assert [line for line in joined["assumptions"] if "command" not in line] == [
        line for line in alone["assumptions"] if "command" not in line
    ]
    config = json.loads((merged / "run.json").read_text())
    assert config["study"] == json.loads((whole / "run.json").read_text())["study"]
    assert [s["shard"] for s in config["shards"]] == ["1/2", "2/2"]
    assert [s["command"] for s in config["shards"]] == [json.loads((f / "run.json").read_text())["command"] for f in (one, two)]
    # and it is a study like any other: resumed on one machine with the unsharded command, it has nothing left to do
    capsys.readouterr()
    copy = merged.parent.parent / "resumed" / "study"
    shutil.copytree(merged, copy)
    assert main(study(data, copy, "--resume")) == 0
    assert rows(copy) == rows(merged)


def test_the_report_reads_the_same_whatever_the_order_of_the_problems_rows(made, tmp_path):
    """A merged folder holds its problems shard by shard, not in the order one machine finished them: ties (the
    interventions' most frequent pairs of one count) fall alike whatever the order."""
    whole = made[1]["whole"]
    copy = tmp_path / "study"  # named alike: the report's links name the folder
    shutil.copytree(whole, copy)
    written = ResultsFile(copy).read()
    ResultsFile(copy).rewrite(sorted(written, key=lambda row: row["problem_id"], reverse=True))  # each problem's kept
    assert ResultsFile(copy).read() != written
    alone, again = (analyse(folder) for folder in (whole, copy))
    assert {k: v for k, v in again.items() if k != "folder"} == {k: v for k, v in alone.items() if k != "folder"}


@pytest.mark.parametrize(
    "shard, message",
    [
        ("3/2", "--shard: 3/2 names no shard: I runs from 1 to N"),
        ("0/2", "--shard: 0/2 names no shard"),
        ("1/0", "--shard: 1/0 names no shard"),
        ("x", "--shard: must be I/N, the I-th of N shares of the problems, e.g. 1/4 (got 'x')"),
        ("1/2/3", "--shard: must be I/N"),
    ],
)
def test_a_shard_that_is_none_is_one_line_before_the_model_loads(tmp_path, capsys, shard, message):
    out = tmp_path / "out"
    assert message in refused(study(problem_file(tmp_path), out, "--shard", shard), capsys)
    assert not out.exists()


def test_a_shard_resumed_as_another_or_as_a_whole_study_is_refused(made, capsys):
    data, folders = made
    for folder, shard, message in (
        (folders["one"], ["--shard", "2/2"], "--shard: {out} holds shard 1/2 of a study: resume with --shard 1/2"),
        (folders["one"], [], "--shard: {out} holds shard 1/2 of a study: resume with --shard 1/2"),
        (folders["whole"], ["--shard", "1/2"], "--shard: {out} holds a study run without --shard: resume without it"),
    ):
        assert message.format(out=folder) in refused(study(data, folder, "--resume", *shard), capsys)


def merge(*folders: Path, out: Path) -> list[str]:
    return ["study", "merge", *map(str, folders), "--out", str(out)]


def test_merge_refuses_what_is_not_every_shard_of_one_study_once(made, tmp_path, capsys):
    data, folders = made
    one, two = folders["one"], folders["two"]
    twin = tmp_path / "twin"
    shutil.copytree(one, twin)
    out = tmp_path / "out"
    for given, message in (
        ([one, twin, two], f"study merge: {one} and {twin} are both shard 1/2; give each once"),
        ([one], "study merge: shard 2/2 is missing; give the folders of all 2 shards"),
        ([folders["whole"], two], f"study merge: {folders['whole']} is a whole study, made without --shard"),
        ([one, tmp_path / "nowhere"], f"study merge: {tmp_path / 'nowhere'} is not a folder"),
        ([one, data.parent], f"study merge: {data.parent} holds no study"),
    ):
        assert message in refused(merge(*given, out=out), capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--grader", "qwen25-math"], "other grader ('qwen25-math', not 'math-verify')"),
        (["--k", "2"], "other settings (k: 2, not 4)"),
        (
            ["--backend", "llama.cpp"],
            "other pair ('…target (llama.cpp, GGUF qwen2 ?B Q5…, not '…target (transformers, float32, cpu)'",
        ),
        (["--grid-limit", "1"], "other plan (grid_problems: ['0'], not ['0', '1'])"),
        (["--shard", "2/3"], "is shard 2/3 but"),
    ],
)
def test_merge_refuses_a_shard_run_otherwise_naming_what_differs(made, tmp_path, capsys, flags, message):
    """Each a real shard 2/2 of one problem (it owns none: nothing to decode), run with one thing changed; the last of
    a flag given twice counts."""
    data, folders = made
    other = tmp_path / "other"
    assert main(study(data, other, "--limit", "1", "--shard", "2/2", *flags)) == 0
    capsys.readouterr()
    err = refused(merge(folders["one"], other, out=tmp_path / "out"), capsys)
    assert message in err and "merge the shards of one study" in err


def test_merge_refuses_another_data_file_and_other_versions_by_what_the_shards_recorded(made, tmp_path, capsys):
    data, folders = made
    edited = tmp_path / "problems.jsonl"  # the same ids, one answer changed
    edited.write_text(data.read_text().replace('"#### 2"', '"#### 3"', 1))
    other = tmp_path / "other"
    assert main(study(edited, other, "--limit", "1", "--shard", "2/2")) == 0
    capsys.readouterr()
    assert "other files (data and models, by hash) (data: 'sha256:" in refused(
        merge(folders["one"], other, out=tmp_path / "o"), capsys
    )
    # another machine's torch: its run.json says so (a shard made elsewhere; here its record is edited)
    shutil.rmtree(other)
    shutil.copytree(folders["two"], other)
    config = json.loads((other / "run.json").read_text())
    config["versions"] |= {"torch": "0.0.1", "machine": "another machine", "python": "3.0"}
    (other / "run.json").write_text(json.dumps(config))
    assert "other versions (torch: '0.0.1', not" in refused(merge(folders["one"], other, out=tmp_path / "o"), capsys)
    config["versions"] = json.loads((folders["one"] / "run.json").read_text())["versions"] | {"machine": "another machine"}
    (other / "run.json").write_text(json.dumps(config))
    assert main(merge(folders["one"], other, out=tmp_path / "o")) == 0  # its machine and python are each machine's own


# --- a merge accounts for every row (round 7) -------------------------------------------------------------------------
# Shard 2/2's results.csv holds, in this order: problem 1's sd, easd and easd@1/0.4 (its grid problem), then problem
# 3's sd and easd; shard 1/2's speed/results.csv times problems 0 and 1.


def spoiled(made, tmp_path, name: str) -> Path:
    """A copy of shard `name` ("one" or "two") to spoil, without its report (the module's shards are shared)."""
    copy = tmp_path / name
    shutil.copytree(made[1][name], copy, ignore=shutil.ignore_patterns("study.*", "differences"), symlinks=True)
    return copy


def edit_rows(path: Path, change) -> None:
    """Rewrite a results.csv's records (the header first) as `change` leaves them, quoted as the study quotes them."""
    with path.open(newline="", encoding="utf-8") as handle:
        records = list(csv.reader(handle))
    change(records)
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\r\n").writerows(records)


def copied_as(row: int, column: int, value: str):
    """A change that appends a copy of record `row` with one field changed."""
    return lambda records: records.append([*records[row][:column], value, *records[row][column + 1 :]])


def set_field(row: int, column: int, value: str):
    return lambda records: records[row].__setitem__(column, value)


def rows_of(path: str, change):
    return lambda folder: edit_rows(folder / path, change)


def unlink(path: str):
    return lambda folder: (folder / path).unlink()


def write(path: str, text: str):
    return lambda folder: (folder / path).write_text(text)


TRACE = "traces/1-6b86b273ff34fce1-easd-s0.json"  # problem 1's easd run, row 3


def refused_merge(made, tmp_path, capsys, spoil, shard: str = "two") -> tuple[str, Path]:
    """Shard `shard` spoiled, merged with the other: the one line it is refused with (after `error: study merge: `
    or `error: `), and its folder. Nothing is written to --out, and the spoiled shard is left as it was."""
    folder = spoiled(made, tmp_path, shard)
    spoil(folder)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}
    one, two = (folder, made[1]["two"]) if shard == "one" else (made[1]["one"], folder)
    out = tmp_path / "out"
    err = refused(merge(one, two, out=out), capsys)
    assert not out.exists() and not list(tmp_path.glob(".out*"))  # no --out, not even half of one
    assert {p: p.read_bytes() for p in before} == before
    assert "/tmp/tmp" not in err  # never a temporary copy
    return err.removeprefix("error: ").removeprefix("study merge: ").strip(), folder


ROWS = "results.csv"
MISMATCHED = "fields where a row of results.csv has 28: fix or remove that row"
UNFINISHED = "the shard is unfinished: rerun its command with --resume, then merge again"


@pytest.mark.parametrize(
    "spoil, message",
    [
        pytest.param(rows_of(ROWS, lambda r: r[2].pop(5)), "{path}: row 3 has 27 " + MISMATCHED, id="a field missing"),
        pytest.param(rows_of(ROWS, lambda r: r[2].append("x")), "{path}: row 3 has 29 " + MISMATCHED, id="a field extra"),
        # a problem outside the plan: '4' falls to shard 1 by its hash, '5' to shard 2 (with all its rows)
        pytest.param(
            rows_of(ROWS, copied_as(4, 0, "4")),
            "{path}: row 7: problem '4' is not one of shard 2/2's; remove that row",
            id="a problem outside the plan",
        ),
        pytest.param(
            rows_of(ROWS, lambda r: r.extend([["5", *r[4][1:]], ["5", *r[5][1:]]])),
            "{path} holds 3 problems where the plan gives shard 2/2 2: rows of a problem outside the plan",
            id="a whole problem outside the plan",
        ),
        pytest.param(
            rows_of(ROWS, copied_as(1, 0, "0")), "{path}: row 7: problem '0' is not one of shard 2/2's", id="shard 1's problem"
        ),
        pytest.param(
            rows_of(ROWS, set_field(2, 1, "beam")),
            "{path}: row 3: method 'beam' is not one this study runs (easd, easd@1/0.4, sd, target); remove that row",
            id="a method never run",
        ),
        pytest.param(
            rows_of(ROWS, set_field(1, 1, "s\x00d")),
            "{path}: row 2: method 's\\x00d' is not one this study runs",
            id="a NUL in a method",
        ),
        pytest.param(
            rows_of(ROWS, set_field(2, 2, "7")),
            "{path}: row 3: sample '7' is not one this study runs (0); remove that row",
            id="sample 7",
        ),
        pytest.param(
            rows_of(ROWS, copied_as(3, 0, "3")),
            "{path}: row 7: the plan runs easd@1/0.4 on 1 problem of shard 2/2, not on '3'",
            id="a grid point off the grid",
        ),
        pytest.param(
            rows_of(ROWS, set_field(1, 7, "maybe")),
            "{path}: row 2, column correct: 'maybe' is not one of False, True",
            id="neither True nor False",
        ),
        pytest.param(
            rows_of(ROWS, lambda r: r.pop(2)), "{path} has no easd row of problem '1': " + UNFINISHED, id="a row missing"
        ),
        pytest.param(unlink(ROWS), "{path} is missing: " + UNFINISHED, id="no results"),
        pytest.param(write(ROWS, ""), "{path} holds no rows: " + UNFINISHED, id="empty results"),
        pytest.param(
            rows_of(ROWS, lambda r: r.__delitem__(slice(1, None))), "{path} holds no rows: " + UNFINISHED, id="a header alone"
        ),
        pytest.param(
            lambda f: (f / ROWS).write_bytes((f / ROWS).read_bytes()[:-20]),
            "{path}: its last row is cut short: " + UNFINISHED,
            id="a last row cut",
        ),
        pytest.param(
            unlink(TRACE),
            "{path.parent}/" + TRACE + " (the trace of row 3 of {path}) is missing or not a file: " + UNFINISHED,
            id="a trace missing",
        ),
    ],
)
def test_merge_accounts_for_every_row_against_the_plan(made, tmp_path, capsys, spoil, message):
    """Round 7: a malformed row was dropped and the merge went on (13 of 14 rows, "unfinished"); rows of no problem,
    method or sample of the plan were taken; a shard without its rows or traces merged."""
    err, folder = refused_merge(made, tmp_path, capsys, spoil)
    assert message.format(path=folder / ROWS) in err, err


def fifo(path: str):
    return lambda folder: ((folder / path).unlink(missing_ok=True), os.mkfifo(folder / path))


def link_to(path: str, target: str):
    return lambda folder: ((folder / path).unlink(), (folder / path).symlink_to(target))


def a_folder(path: str):
    return lambda folder: ((folder / path).unlink(), (folder / path).mkdir())


def run_json(change):
    def spoil(folder: Path) -> None:
        config = json.loads((folder / "run.json").read_text())
        change(config["study"])
        (folder / "run.json").write_text(json.dumps(config))

    return spoil


@pytest.mark.parametrize(
    "spoil, shard, message",
    [
        pytest.param(
            link_to(ROWS, "/dev/zero"),
            "two",
            "{folder}/results.csv is not a regular file (a pipe, device or socket)",
            id="a link to /dev/zero",
        ),
        pytest.param(link_to(ROWS, "/dev/null"), "two", "{folder}/results.csv is not a regular file", id="a link to /dev/null"),
        pytest.param(fifo(ROWS), "two", "{folder}/results.csv is not a regular file", id="a pipe"),
        pytest.param(a_folder(ROWS), "two", "{folder}/results.csv is a folder", id="a folder"),
        pytest.param(
            rows_of(ROWS, lambda r: r.append(r[1])),
            "two",
            "{folder}/results.csv: row 7 repeats row 2 (problem '1', sd, sample 0); remove one of the two",
            id="a row twice",
        ),
        pytest.param(
            fifo("speed/results.csv"), "one", "{folder}/speed/results.csv is not a regular file", id="a pipe of timings"
        ),
        pytest.param(fifo("run.json"), "two", "{folder}/run.json is not a regular file", id="run.json a pipe"),
        pytest.param(fifo(TRACE), "two", "{folder}/" + TRACE + " (the trace of row 3 of", id="a trace a pipe"),
        pytest.param(
            run_json(lambda study: study.pop("whole")),
            "two",
            "{folder}/run.json: cut short or not a run.json of this program (it has no study.whole",
            id="no whole plan",
        ),
        pytest.param(
            run_json(lambda study: study.update(whole=[])),
            "two",
            "{folder}/run.json: cut short or not a run.json of this program (it has no study.whole",
            id="a list for the whole plan",
        ),
        pytest.param(
            run_json(lambda study: study["whole"].update(problems="4")),
            "two",
            "its study.whole.problems is not a count of problems",
            id="a count as text",
        ),
        pytest.param(
            run_json(lambda study: study["whole"].update(grid_problems=[0])),
            "two",
            "its study.whole.grid_problems is not a list of problem ids",
            id="an id as a number",
        ),
        pytest.param(
            run_json(lambda study: study["grid"].update(tau_h=["1"])),
            "two",
            "its study.grid is not the values of each setting its grid sweeps",
            id="a grid of text",
        ),
        pytest.param(
            run_json(lambda study: study.update(problems=1)),
            "one",
            "the shards' run.json give them 1 and 2 problems, 3 in all, but the plan has 4",
            id="a count changed",
        ),
    ],
)
def test_merge_reads_each_file_of_a_shard_as_it_is_never_a_copy(made, tmp_path, capsys, spoil, shard, message):
    """Round 7: results.csv as a link to /dev/zero was copied until the disk was full; a pipe, a folder, run.json
    without its whole plan were tracebacks; the messages named a temporary copy of the shard's file."""
    err, folder = refused_merge(made, tmp_path, capsys, spoil, shard)
    assert message.format(folder=folder) in err, err


def test_merge_writes_only_to_a_folder_of_its_own(made, tmp_path, capsys):
    _, folders = made
    one, two = folders["one"], folders["two"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.md").write_text("mine")
    for out, message in (
        (one, f"--out: {one} is the shard {one}"),
        (one / "merged", f"--out: {one / 'merged'} is inside the shard {one}"),
        (one.parent, f"--out: {one.parent} holds the shard {one}"),
        (mine, f"--out: {mine} holds files already: give a new or empty folder"),
        (folders["merged"], "holds files already"),  # an earlier merge, which may have been resumed since: kept
        (mine / "notes.md", "is a file, not a folder"),
    ):
        assert message in refused(merge(one, two, out=out), capsys)
    assert (mine / "notes.md").read_text() == "mine" and not (one / "merged").exists()


def test_a_merged_greedy_study_without_a_timed_problem_says_the_target_is_to_run(tmp_path, capsys):
    """With --speed-limit 0 no shard can compare SD's texts with the target's: one machine would then run target-only
    on every problem; the merge says how to."""
    data = problem_file(tmp_path)
    none_timed = ["--limit", "1", "--speed-limit", "0", "--grid-limit", "0"]
    for index in (1, 2):
        assert main(study(data, tmp_path / f"s{index}", *none_timed, "--shard", f"{index}/2")) == 0
    capsys.readouterr()
    assert main(merge(tmp_path / "s1", tmp_path / "s2", out=tmp_path / "merged")) == 0
    err = capsys.readouterr().err
    assert "note: no target-only accuracy" in err and "rerun each shard with --target-runs all --resume" in err


def test_the_files_are_named_by_their_hashes(tmp_path):
    draft, target = tmp_path / "draft.gguf", tmp_path / "target"
    draft.write_bytes(b"GGUF draft")
    target.mkdir()
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"weights")
    before = model_files(None, str(draft), str(target))
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", before["draft"]) and before["draft"] != before["target"]
    (target / "model.safetensors").write_bytes(b"weights, retrained")  # a folder's: every file's name and contents
    after = model_files(None, str(draft), str(target))
    assert after["draft"] == before["draft"] and after["target"] != before["target"]
    assert model_files("qwen-coder", None, None)["target"].startswith("sha256:cc324af0")  # pinned, never read
    assert model_files(None, "no-such/model-x", str(target))["draft"].startswith("hub no-such/model-x@not in the hub cache")
    data = problem_file(tmp_path)
    assert recorded_files(data, "tiny-random", None, None)["data"] == "sha256:" + hashlib.sha256(data.read_bytes()).hexdigest()
