"""An evaluation on more than one machine (easd.lab.shards): `eval --shard I/N` and `eval merge`, on the tiny pair.

The same evaluation is made once whole and once as two shards merged, sampled (SMC-SD has no greedy form), as the
field's table is run; the two folders must read alike, and a merge must account for every row of its shards."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_shards import copied_as, edit_rows, set_field
from test_study import problem_file

from easd.cli import main
from easd.lab.shards.split import owner

FLAGS = ["--pair", "tiny-random", "--backend", "transformers", "--limit", "4", "--max-new-tokens", "8"]
FLAGS += ["--methods", "sd,smc", "--tau-h", "0.5"]
TIMINGS = ["seconds", "tokens_per_s", "saved_seconds"]  # the only columns that differ between two runs of one row


def evaluation(data: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "--data", str(data), *FLAGS, *extra, "--out", str(out)]


def merge(*folders: Path, out: Path) -> list[str]:
    return ["eval", "merge", *map(str, folders), "--out", str(out)]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The evaluation whole, as two shards keeping their traces, and the two merged: their folders."""
    root = tmp_path_factory.mktemp("eval-shards")
    data = problem_file(root)
    folders = {name: root / name for name in ("whole", "one", "two", "merged")}
    assert main(evaluation(data, folders["whole"], "--traces")) == 0
    assert main(evaluation(data, folders["one"], "--traces", "--shard", "1/2")) == 0
    assert main(evaluation(data, folders["two"], "--traces", "--shard", "2/2")) == 0
    assert main(merge(folders["one"], folders["two"], out=folders["merged"])) == 0
    return data, folders


def rows(folder: Path) -> list[tuple]:
    found = pd.read_csv(folder / "results.csv", dtype=str, keep_default_na=False).drop(columns=TIMINGS)
    return sorted(map(tuple, found.to_numpy().tolist()))


def failed(argv: list[str], capsys) -> str:
    """The error line a command ended with (exit 2)."""
    assert main(argv) == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_two_shards_merged_read_as_the_evaluation_one_machine_made(made, capsys):
    _, folders = made
    whole, one, two, merged = (folders[name] for name in ("whole", "one", "two", "merged"))
    assert {r[0] for r in rows(one)} == {"0", "2"} and {r[0] for r in rows(two)} == {"1", "3"}  # by the ids' hashes
    assert all(owner(r[0], 2) == 1 for r in rows(one))
    # sampled, each row is its problem's and seed's whatever else shares the batch: the merge is the whole run
    assert rows(merged) == rows(whole) and len(rows(whole)) == 8
    assert sorted(p.name for p in (merged / "traces").iterdir()) == sorted(p.name for p in (whole / "traces").iterdir())
    for table in ("summary.csv", "paired.csv", "paper.md", "report.html"):
        assert (merged / table).is_file(), table
    summary = pd.read_csv(merged / "summary.csv")
    assert summary.drop(columns=[c for c in summary if "per_s" in c or "second" in c or "speedup" in c]).equals(
        (lambda s: s.drop(columns=[c for c in s if "per_s" in c or "second" in c or "speedup" in c]))(
            pd.read_csv(whole / "summary.csv")
        )
    )
    paired = pd.read_csv(merged / "paired.csv")  # SMC-SD changes no token on purpose, yet is paired against SD
    assert list(zip(paired["a"], paired["b"])) == [("smc", "sd")]
    config = json.loads((merged / "run.json").read_text())
    assert config["plan"] == {"methods": ["sd", "smc"], "traces": True, "problems": 4, "offset": 0, "limit": 4}
    assert config["protocol"]["temperature"] == 0.7  # printed, and recorded: every method sampled alike
    assert [s["shard"] for s in config["shards"]] == ["1/2", "2/2"]


def test_a_shard_resumed_as_another_or_with_other_methods_is_refused(made, capsys):
    data, folders = made
    one, whole = folders["one"], folders["whole"]
    for folder, extra, message in (
        (one, ["--shard", "2/2"], f"--shard: {one} holds shard 1/2 of an evaluation: resume with --shard 1/2"),
        (one, [], f"--shard: {one} holds shard 1/2 of an evaluation: resume with --shard 1/2"),
        (whole, ["--shard", "1/2"], f"--shard: {whole} holds an evaluation run without --shard: resume without it"),
        (one, ["--shard", "1/2", "--methods", "smc"], f"--resume: {one} was run with other plan; choose another --out"),
    ):
        err = failed(evaluation(data, folder, "--traces", "--resume", *extra), capsys)
        assert message in err, err
    assert main(evaluation(data, folders["one"], "--traces", "--resume", "--shard", "1/2")) == 0  # its own: nothing left


def spoiled(made, tmp_path, change) -> Path:
    copy = tmp_path / "two"
    shutil.copytree(made[1]["two"], copy)
    change(copy)
    return copy


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda f: edit_rows(f / "results.csv", set_field(2, 1, "easd")),
            "row 3: method 'easd' is not one this evaluation runs (sd, smc)",
        ),
        (lambda f: edit_rows(f / "results.csv", copied_as(1, 0, "0")), "row 6: problem '0' is not one of shard 2/2's"),
        (lambda f: edit_rows(f / "results.csv", set_field(1, 2, "3")), "row 2: sample '3' is not one this evaluation runs (0)"),
        (lambda f: edit_rows(f / "results.csv", lambda r: r.pop(2)), "has no smc row of problem '1': the shard is unfinished"),
        (lambda f: (f / "results.csv").unlink(), "results.csv is missing: the shard is unfinished"),
        (lambda f: next((f / "traces").iterdir()).unlink(), "is missing or not a file: the shard is unfinished"),
        (lambda f: edit_rows(f / "results.csv", lambda r: r.append(r[1])), "row 6 repeats row 2 (problem '1', sd, sample 0)"),
    ],
    ids=["a method never run", "shard 1's problem", "sample 3", "a row missing", "no rows", "a trace missing", "a row twice"],
)
def test_merge_accounts_for_every_row_against_the_plan(made, tmp_path, capsys, change, message):
    two = spoiled(made, tmp_path, change)
    out = tmp_path / "out"
    err = failed(merge(made[1]["one"], two, out=out), capsys)
    assert err.startswith("error: eval merge: ") and message in err, err
    assert not out.exists()


def test_merge_refuses_what_is_not_every_shard_of_one_evaluation(made, tmp_path, capsys):
    data, folders = made
    out = tmp_path / "out"
    study = tmp_path / "study"
    assert main(["study", "--data", str(data), *FLAGS[:6], "--limit", "1", "--shard", "2/2", "--out", str(study)]) == 0
    capsys.readouterr()
    for given, message in (
        ([folders["one"]], "eval merge: shard 2/2 is missing; give the folders of all 2 shards"),
        ([folders["whole"], folders["two"]], f"eval merge: {folders['whole']} holds no evaluation of shards"),
        ([folders["one"], study], f"eval merge: {study} holds no evaluation of shards"),
        ([folders["one"], folders["one"]], "are both shard 1/2; give each once"),
    ):
        assert message in failed(merge(*given, out=out), capsys)
    other = tmp_path / "other"  # shard 2/2 of another sampling: SMC-SD left out, so the run is greedy
    assert main(evaluation(data, other, "--traces", "--shard", "2/2", "--methods", "sd")) == 0
    capsys.readouterr()
    err = failed(merge(folders["one"], other, out=out), capsys)
    assert "was run with other settings (temperature: 0.0, not 0.7)" in err, err
    assert not out.exists()


def test_a_shard_from_before_a_setting_existed_merges_with_one_run_after(made, tmp_path, capsys):
    """Shards outlive sessions: one whose run.json predates a setting (here its record of typical's α is gone, as if
    typical acceptance had been added since) ran at that setting's default, and merges; one run at another value is
    still refused."""
    _, folders = made
    older = tmp_path / "older"
    shutil.copytree(folders["two"], older)
    config = json.loads((older / "run.json").read_text())
    del config["settings"]["typical_alpha"]
    (older / "run.json").write_text(json.dumps(config))
    assert main(merge(folders["one"], older, out=tmp_path / "merged")) == 0
    config["settings"]["typical_alpha"] = 0.9
    (older / "run.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert "other settings (typical_alpha: 0.9, not 0.3)" in failed(merge(folders["one"], older, out=tmp_path / "o"), capsys)


def test_shards_without_traces_merge_without_them(tmp_path, capsys):
    """The field's table keeps no traces in its shards (a run's trace is about 600 kB): their rows merge alone."""
    data = problem_file(tmp_path)
    one, two, out = tmp_path / "one", tmp_path / "two", tmp_path / "merged"
    for folder, shard in ((one, "1/2"), (two, "2/2")):
        assert main(evaluation(data, folder, "--limit", "2", "--methods", "sd", "--shard", shard)) == 0
    assert main(merge(one, two, out=out)) == 0
    assert {r[0] for r in rows(out)} == {"0", "1"} and not any((out / "traces").iterdir())
    assert "sd" in (out / "paper.md").read_text()
    capsys.readouterr()


def test_eval_names_what_it_needs(tmp_path, capsys):
    assert "--data: is needed" in failed(["eval", "--out", str(tmp_path / "o")], capsys)
    assert "--out: is needed" in failed(["eval", "--data", str(problem_file(tmp_path))], capsys)
    assert "--shard: 3/2 names no shard" in failed(evaluation(problem_file(tmp_path), tmp_path / "o", "--shard", "3/2"), capsys)
