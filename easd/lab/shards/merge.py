"""The shards written as one folder, as if one machine had run it all (`merge_shards`), built aside and renamed into
place so that a merge refused or failing leaves no --out."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ...errors import SettingsError
from ...files import temporary_path, writable_folder, write_text_whole
from ...method.references import SPEED_REFERENCE
from ..runs.evaluate import trace_name, trace_path
from ..runs.results_table import ResultsFile
from .accounting import accounted, timed, traced_rows
from .folder import PLAN_KEY, WHAT, ShardFolder, check_shards, read_shard, whole_plan


def merge_shards(folders: list[Path], out: Path, command: str, kind: str = "study") -> None:
    """Check the shards (`check_shards`) and account for every row of theirs (`accounted`), then write them into `out`
    as one folder, as if one machine had run it all: built aside and renamed into place, so that a merge refused or
    failing leaves no --out. `kind`: the command that made the shards, study or eval. The shards are only read. The
    report is the caller's to draw."""
    shards = sorted((read_shard(folder, kind) for folder in folders), key=lambda s: s.index)
    check_out(out, [s.folder for s in shards], WHAT[kind])
    check_shards(shards)
    rows = {shard.folder: traced_rows(shard) for shard in shards}
    timings = [row for shard in shards for row in accounted(shard, shard.folder / "speed" / "results.csv", timed(shard))]
    build = temporary_path(out)
    try:
        writable_folder(build)
    except OSError as err:
        raise SettingsError("--out", f"{out} cannot be written ({err.strerror}: {err.filename})") from None
    try:
        _write_merged(shards, rows, timings, build, out, command)
        _into_place(build, out)
    except OSError as err:  # a full disk: nothing is left, not even half
        raise SettingsError("--out", f"{out} could not be written ({err.strerror}); nothing was written there") from None
    finally:
        shutil.rmtree(build, ignore_errors=True)


def check_out(out: Path, shards: list[Path], what: str = "study") -> None:
    """--out: a new or empty folder, never a shard nor in or around one. Not an earlier merge's either: it may have been
    resumed as one study since, and what it holds would be lost."""
    where = out.resolve()
    for shard in shards:
        here = shard.resolve()
        if where == here or here in where.parents or where in here.parents:
            relation = "is" if where == here else "is inside" if here in where.parents else "holds"
            raise SettingsError("--out", f"{out} {relation} the shard {shard}: write the merged {what} to a folder of its own")
    if out.exists() and not out.is_dir():
        raise SettingsError("--out", f"{out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        raise SettingsError("--out", f"{out} holds files already: give a new or empty folder")


def _write_merged(
    shards: list[ShardFolder], rows: dict[Path, list[dict]], timings: list[dict], build: Path, out: Path, command: str
) -> None:
    (build / "traces").mkdir()
    merged = []
    for shard in shards:
        for row in rows[shard.folder]:
            if shard.command == "study" or shard.plan["traces"]:
                _link_or_copy(trace_path(shard.folder / "traces", row), build / "traces" / trace_name(row), out)
            merged.append(row)
    if merged:  # a results.csv holds rows, or is not there yet
        ResultsFile(build).rewrite(merged)
    config = whole_config(shards, command)
    write_text_whole(build / "run.json", json.dumps(config, indent=1, ensure_ascii=False))
    if timings:  # shard 1's: it times every timed problem
        (build / "speed").mkdir()
        ResultsFile(build / "speed").rewrite(timings)
        repeats = config["study"]["speed_repeats"]  # a repetition is a sample (easd.lab.study.plan.run_study)
        write_text_whole(build / "speed" / "run.json", json.dumps(config | {"samples": repeats}, indent=1, ensure_ascii=False))


def whole_config(shards: list[ShardFolder], command: str) -> dict:
    """The run.json of the whole: shard 1's, with the whole plan's problems, and where each shard came from."""
    first, key = shards[0].config, PLAN_KEY[shards[0].command]
    made = [{"shard": s.name, "folder": str(s.folder.resolve()), "command": s.config["command"]} for s in shards]
    return first | {key: whole_plan(first[key]), "command": command, "shards": made}


def _link_or_copy(source: Path, target: Path, out: Path) -> None:
    """A hard link where the two share a file system (a trace is never written again in place: easd.files writes aside
    and renames), else a copy; `source` is a file (`traced_rows` checked)."""
    try:
        os.link(source, target)  # of the file a link names, not of the link
        return
    except OSError:
        pass
    try:
        shutil.copyfile(source, target)
    except OSError as err:
        raise SettingsError(
            "--out", f"{source} could not be copied into {out} ({err.strerror}); nothing was written there"
        ) from None


def _into_place(build: Path, out: Path) -> None:
    """Rename the built folder to `out`: a rename replaces an empty folder there, never one that holds files (one put
    there meanwhile stops it, and is kept)."""
    try:
        os.rename(build, out)
    except OSError as err:
        raise SettingsError("--out", f"{out} cannot take the merged study ({err.strerror}): give a new or empty folder") from None


def target_note(study: dict) -> str | None:
    """What a merged greedy study lacks where SD's texts cannot stand for the target's (easd.lab.study's phase 4): the
    shards that timed nothing left target-only to the merge, which found it unproven."""
    if any(row["method"] == SPEED_REFERENCE for row in study["accuracy"]):
        return None
    return (
        f"note: no target-only accuracy ({study['target']['why']}), so target-only must run on every problem: rerun "
        "each shard with --target-runs all --resume, then merge again"
    )
