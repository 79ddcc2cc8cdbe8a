"""A study or an evaluation on more than one machine: `study --shard I/N` and `study merge`, `eval --shard I/N` and
`eval merge`, and what the two compare.

A shard is a study folder of its own, made by the same command with `--shard I/N`: it decodes the problems whose id
hashes to I (`owner`), so every problem of the plan is in exactly one of the N shards, whatever their order, --offset
or --limit, and on every machine. What the unsharded plan calls "the first --grid-limit problems" stays that plan's:
each shard runs the method's grid on those of them it owns. The timed problems are the exception: shard 1 times all of them,
so that the speed table is one process's, like with like, as one machine's study is; the other shards time none.

Greedy target-only is read from SD's texts where SD's equal the target's on the timed problems (easd.lab.study). A
shard that timed nothing cannot tell, so it leaves target-only to the merge, which reads the timings from shard 1; if
they differ, one line says to run target-only on every problem (`--target-runs all --resume` on each shard).

`study merge` checks that the shards are those of one study (`check_shards`: each of 1..N once, one pair, one data
file and model files by their hashes, one set of settings, grader and versions), accounts for every row of each against
the plan (`accounted`: each row one the plan runs on that shard, once, and every one it runs there, with its trace), and
writes one folder as one machine would have: results.csv, traces/, speed/, a run.json of the whole plan, and its
report. It reads the shards as a user's files (easd.files.read_bytes: never a pipe or a device, never a copy) and
changes nothing in them.

An evaluation's shard (`eval --shard I/N`) is the same idea without a grid or timed problems: its run.json's `plan`
holds what `study` holds for a study (its methods, its own problems and the whole plan's), and `eval merge` accounts
for every row as `study merge` does: each of the plan's methods on each of the shard's problems, each sample once, with
its trace where the shard kept traces.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import EasdError, SettingsError, shown
from ..files import temporary_path, writable_folder, write_text_whole
from ..method.methods import METHODS
from ..method.references import REFERENCE, SPEED_REFERENCE
from .runs.evaluate import trace_name, trace_path
from .runs.results_table import ResultsFile, _as_run, check_config, read_config, read_rows, unreadable
from .study.findings import grid_cells
from .study.plan import Shard, StudyPlan, read_study_config


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard I/N` → (I, N), or one line naming the flag."""
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not found:
        raise SettingsError("--shard", f"must be I/N, the I-th of N shares of the problems, e.g. 1/4 (got {shown(text)})")
    index, count = int(found[1]), int(found[2])
    if not 1 <= index <= count:
        raise SettingsError("--shard", f"{index}/{count} names no shard: I runs from 1 to N, e.g. 1/{max(count, 2)}")
    return index, count


def owner(problem_id: str, count: int) -> int:
    """The shard (1 … count) that decodes a problem: by a SHA-256 of its id, the same on every machine and in every
    process (Python's hash() of a str is salted per process), and for a problem whatever the others are."""
    digest = hashlib.sha256(str(problem_id).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def shard_of(plan: StudyPlan, config: dict, index: int, count: int) -> tuple[StudyPlan, dict]:
    """A shard's plan and run.json from the whole study's: its own problems, in the plan's order (so its grid problems
    come first, as the whole plan's do), and in run.json its own lists beside the whole plan's (`whole`), which the
    merge puts back."""
    mine = [p for p in plan.problems if owner(p.id, count) == index]
    gridded = [p for p in plan.problems[: plan.grid_limit] if owner(p.id, count) == index]
    timed = plan.problems[: plan.speed_limit] if index == 1 else []
    shard = Shard(index, count, tuple(timed))
    study = config["study"]
    whole = {key: study[key] for key in WHOLE}
    own = {"problems": len(mine), "grid_problems": [p.id for p in gridded], "speed_problems": [p.id for p in timed]}
    shard_plan = replace(plan, problems=mine, grid_limit=len(gridded), speed_limit=len(timed), shard=shard)
    return shard_plan, config | {"study": study | own | {"shard": shard.name, "whole": whole}}


WHOLE = ("problems", "grid_problems", "speed_problems")  # what a shard's run.json holds of its own, and of the whole plan


# --- what the shards record, for the merge to compare ---------------------------------------------------------------


def recorded_files(data: Path, pair: str | None, draft: str | None, target: str | None) -> dict[str, str]:
    """The data file's and each model's identity (`model_files`), for run.json."""
    return {"data": "sha256:" + _file_sha(data), **model_files(pair, draft, target)}


# named pairs whose files this program fixes: the embedded pair's GGUFs are pinned by their sha256 (checked when their
# parts are joined), and the tiny pair is built from a seed by easd.pairs.tiny
PINNED = {"qwen-coder": "the embedded pair", "tiny-random": "the tiny pair"}


def model_files(pair: str | None, draft: str | None, target: str | None) -> dict[str, str]:
    """What the weights each model ran are: a file's or a folder's sha256 (a folder: its files' names and contents),
    a hub model's revision in this machine's hub cache, or a named pair's pinned files. Reading a model's files takes
    about a second a GB, once a run."""
    from ..pairs.registry import PAIRS, default_pair_name

    if draft is None:
        name = pair or default_pair_name()
        if name == "qwen-coder":
            from ..pairs.packaged import DRAFT, TARGET

            return {"draft": "sha256:" + DRAFT.sha256, "target": "sha256:" + TARGET.sha256}
        if name in PINNED:
            return {"draft": f"{PINNED[name]}'s, built by easd", "target": f"{PINNED[name]}'s, built by easd"}
        draft, target = PAIRS[name].draft, PAIRS[name].target
    return {"draft": _model_identity(draft), "target": _model_identity(target)}


def _model_identity(reference: str) -> str:
    path = Path(reference).expanduser()
    if path.is_file():
        return "sha256:" + _file_sha(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.relative_to(path).as_posix().startswith(".")):
            digest.update(f"{file.relative_to(path).as_posix()}\0{_file_sha(file)}\n".encode())
        return "sha256:" + digest.hexdigest()
    return f"hub {reference}@{_cached_revision(reference) or 'not in the hub cache of the machine that ran it'}"


def _file_sha(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _cached_revision(repo_id: str) -> str | None:
    """The commit of the hub cache's snapshot of `repo_id`, which names its files' contents."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # not a repository id the hub library accepts: nothing cached under it
        return None
    return Path(found).parent.name if isinstance(found, str) else None


# --- the merge ------------------------------------------------------------------------------------------------------

# What every shard of one study shares, named as a line says it (the versions compared, a key a later version added
# reads as missing). Not compared: the data file's path and the machine (each machine has its own), the command (each
# names its own --shard and --out), and each shard's own problems.
SAME_KEYS = {
    "pair": "pair",
    "files": "files (data and models, by hash)",
    "format": "format",
    "shuffle": "--shuffle",
    "prompt_style": "prompt style",
    "grader": "grader",
    "samples": "samples",
    "settings": "settings",
    "tau_h_source": "τ_H's source",
    "protocol": "sampling protocol",
    "versions": "versions",
}
NOT_VERSIONS = ("machine", "python")  # of run.json's versions: each machine's own


# the key of run.json that holds a shard's plan, by the command that made it
PLAN_KEY = {"study": "study", "eval": "plan"}
WHAT = {"study": "study", "eval": "evaluation"}


@dataclass(frozen=True)
class ShardFolder:
    """A shard's folder and its run.json, and the command that made it (`study` or `eval`)."""

    folder: Path
    config: dict
    index: int
    count: int
    command: str

    @property
    def name(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def merge(self) -> str:
        """How the merge's lines begin: with the command, as a flag's begin with the flag."""
        return f"{self.command} merge"

    @property
    def plan(self) -> dict:
        return self.config[PLAN_KEY[self.command]]


def read_shard(folder: Path, command: str = "study") -> ShardFolder:
    """A shard's folder and its run.json, which holds every figure the merge counts on (`SHAPES`); else one line."""
    merge, what, key = f"{command} merge", WHAT[command], PLAN_KEY[command]
    if not folder.is_dir():
        raise EasdError(f"{merge}: {folder} is not a folder; give the folders of `{command} --shard I/N`")
    config = read_study_config(folder, merge) if command == "study" else read_config(folder, merge)
    if config is None or not isinstance(config.get(key), dict):
        raise EasdError(f"{merge}: {folder} holds no {what} of shards; give the folders of `{command} --shard I/N`")
    if "shard" not in config[key]:
        raise EasdError(f"{merge}: {folder} is a whole {what}, made without --shard; merge the folders of its shards")
    check_config(folder, config, tuple(SHAPES[command]), merge)
    for name, (fits, said) in SHAPES[command].items():
        if not fits(_at(config, name)):
            raise unreadable(folder, f"its {name} is not {said}", merge)
    try:
        index, count = parse_shard(str(config[key]["shard"]))
    except SettingsError as err:
        raise EasdError(f"{merge}: {folder / 'run.json'} names no shard ({err.message})") from None
    return ShardFolder(folder, config, index, count, command)


def _is_count(value, least: int = 0) -> bool:
    return type(value) is int and value >= least


def _is_ids(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_labels(value) -> bool:
    return isinstance(value, list) and len(value) > 0 and all(isinstance(item, str) for item in value)


# what the merge reads of a shard's run.json to account for its rows (`planned`), and what each must be: every shard
# since `--shard` began records them
SHAPES = {
    "study": {
        "samples": (lambda v: _is_count(v, 1), "a count of samples, 1 or more"),
        "study.problems": (_is_count, "a count of problems"),
        "study.speed_repeats": (lambda v: _is_count(v, 1), "a count of repetitions, 1 or more"),
        "study.whole.problems": (_is_count, "a count of problems"),
        "study.whole.grid_problems": (_is_ids, "a list of problem ids"),
        "study.whole.speed_problems": (_is_ids, "a list of problem ids"),
    },
    "eval": {
        "samples": (lambda v: _is_count(v, 1), "a count of samples, 1 or more"),
        "plan.methods": (_is_labels, "a list of the methods' labels"),
        "plan.traces": (lambda v: type(v) is bool, "true or false"),
        "plan.problems": (_is_count, "a count of problems"),
        "plan.whole.problems": (_is_count, "a count of problems"),
    },
}


def _at(config: dict, key: str):
    """run.json's value at a dotted key (check_config found it there)."""
    for part in key.split("."):
        config = config[part]
    return config


def check_shards(shards: list[ShardFolder]) -> None:
    """One line, naming the folders, unless the shards are every shard of one study, once each, their own problems
    (run.json's study.problems, which `accounted` counts on) adding up to the plan's."""
    first, merge = shards[0], shards[0].merge
    seen: dict[int, ShardFolder] = {}
    for shard in shards:
        if shard.count != first.count:
            raise EasdError(
                f"{merge}: {shard.folder} is shard {shard.name} but {first.folder} shard {first.name}: "
                f"merge the shards of one {WHAT[first.command]}"
            )
        if shard.index in seen:
            raise EasdError(f"{merge}: {seen[shard.index].folder} and {shard.folder} are both shard {shard.name}; give each once")
        seen[shard.index] = shard
        differs = what_differs(first, shard)
        if differs:
            raise EasdError(
                f"{merge}: {shard.folder} was run with other {differs} than {first.folder}; "
                f"merge the shards of one {WHAT[first.command]}"
            )
    missing = [f"{i}/{first.count}" for i in range(1, first.count + 1) if i not in seen]
    if missing:
        raise EasdError(f"{merge}: shard {missing[0]} is missing; give the folders of all {first.count} shards")
    owned, whole = [s.plan["problems"] for s in shards], first.plan["whole"]["problems"]
    if sum(owned) != whole:  # each problem of the plan falls to one shard: a run.json was changed since its shard ran
        raise EasdError(
            f"{merge}: the shards' run.json give them {_listed(owned)} problems, {sum(owned)} in all, but the plan has "
            f"{whole}; rerun each shard's command with --resume, which writes its run.json again"
        )


def what_differs(a: ShardFolder, b: ShardFolder) -> str | None:
    """What two shards' run.json disagree on, as the line names it with the first differing values, or None."""
    for key, said in SAME_KEYS.items():
        first, second = _compared(a.config, key), _compared(b.config, key)
        if first != second:
            return f"{said} ({_first_difference(second, first)})"
    plan, other = (whole_plan(shard.plan) for shard in (a, b))
    if plan != other:
        return f"plan ({_first_difference(other, plan)})"
    return None


def _listed(numbers: list[int]) -> str:
    """1, 2 and 3."""
    words = [str(n) for n in numbers]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]


def whole_plan(study: dict) -> dict:
    """A shard's run.json study as the whole study's: its own problems replaced by the whole plan's."""
    return {k: v for k, v in study.items() if k not in ("shard", "whole")} | study["whole"]


def _compared(config: dict, key: str):
    """A run.json's value for `key` as the merge compares it: versions without each machine's own; settings as the run
    had them, a setting added since its shard ran reading as its default then (`_as_run`), so that a shard committed
    sessions ago still merges with one run after a new method's settings were added."""
    if key == "settings":
        return _as_run(config, key)
    value = config.get(key)
    return {k: v for k, v in value.items() if k not in NOT_VERSIONS} if key == "versions" and value else value


def _first_difference(value, than) -> str:
    """`value` against `than` where they first part: "k: 2, not 4"."""
    if isinstance(value, dict) and isinstance(than, dict):
        key = next(k for k in sorted({*value, *than}, key=str) if value.get(k) != than.get(k))
        return f"{key}: {_first_difference(value.get(key), than.get(key))}"
    if isinstance(value, str) and isinstance(than, str):  # from a little before where they part, so that it shows
        cut = max(0, len(os.path.commonprefix([value, than])) - 8)
        value, than = (("…" if cut else "") + text[cut:] for text in (value, than))
    return f"{shown(value)}, not {shown(than)}"


def merge_shards(folders: list[Path], out: Path, command: str, kind: str = "study") -> None:
    """Check the shards (`check_shards`) and account for every row of theirs (`accounted`), then write them into `out`
    as one folder, as if one machine had run it all: built aside and renamed into place, so that a merge refused or
    failing leaves no --out. `kind`: the command that made the shards, study or eval. The shards are only read. The
    report is the caller's to draw."""
    shards = sorted((read_shard(folder, kind) for folder in folders), key=lambda s: s.index)
    check_out(out, [s.folder for s in shards], WHAT[kind])
    check_shards(shards)
    rows = {shard.folder: _results(shard) for shard in shards}
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


# --- accounting for every row ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """The rows a results file of a shard holds by the plan, once it is finished."""

    on: dict[str, frozenset[str] | None]  # each method the plan runs → the problems it runs on (None: the shard's)
    needed: frozenset[str]  # the methods each of those problems has a row of; the others' rows may be missing
    samples: tuple[str, ...]  # each problem's samples, as results.csv writes them
    problems: int | None  # how many problems the file holds; None: those `on` names


def planned(shard: ShardFolder) -> Planned:
    """results.csv's rows. An evaluation's: each of its methods on every problem of the shard. A study's: SD and the method on every problem of the shard (those whose id falls to it: `owner`), the
    method's grid on the plan's grid problems that fall to it, and target-only on any of them: on every one where the
    plan runs it everywhere (--target-runs all, or sampled), else where the shard found SD's texts unproven
    (easd.lab.study's phase 4)."""
    config = shard.config
    if shard.command == "eval":
        labels = dict.fromkeys(shard.plan["methods"], None)
        return Planned(labels, frozenset(labels), tuple(map(str, range(config["samples"]))), shard.plan["problems"])
    study, method = config["study"], METHODS[config["study"]["method"]]
    gridded = frozenset(p for p in study["whole"]["grid_problems"] if owner(p, shard.count) == shard.index)
    on: dict[str, frozenset[str] | None] = {REFERENCE: None, method.name: None, SPEED_REFERENCE: None}
    on |= {label: gridded for _, label in grid_cells(config, method) if label != method.name}
    everywhere = study["target_runs"] == "all" or config["settings"]["temperature"] != 0
    needed = frozenset(on) - (set() if everywhere else {SPEED_REFERENCE})
    return Planned(on, needed, tuple(map(str, range(config["samples"]))), study["problems"])


def timed(shard: ShardFolder) -> Planned:
    """speed/results.csv's rows: shard 1 times target-only, SD and the method on every timed problem of the plan, each
    --speed-repeats times (a repetition is a sample); the other shards time nothing, as do an evaluation's."""
    if shard.command == "eval":
        return Planned({}, frozenset(), (), None)
    study = shard.config["study"]
    problems = frozenset(study["whole"]["speed_problems"] if shard.index == 1 else ())
    on = {method: problems for method in (SPEED_REFERENCE, REFERENCE, study["method"])}
    return Planned(on, frozenset(on), tuple(map(str, range(study["speed_repeats"]))), None)


def _results(shard: ShardFolder) -> list[dict]:
    """results.csv's rows (`accounted`), each with its trace where the shard keeps them (a study's always), which the
    report reads and the merge links."""
    path = shard.folder / "results.csv"
    rows = accounted(shard, path, planned(shard))
    if shard.command == "eval" and not shard.plan["traces"]:
        return rows
    for number, row in enumerate(rows, start=2):
        trace = trace_path(shard.folder / "traces", row)
        if not trace.is_file():  # a pipe, a device or a folder is none either: nothing of the kind is opened
            raise _unfinished(shard, f"{trace} (the trace of row {number} of {path}) is missing or not a file")
    return rows


def accounted(shard: ShardFolder, path: Path, plan: Planned) -> list[dict]:
    """The rows of one of the shard's results files, read as they are (never a copy, never repaired: the shard may be
    running), each of a problem, method and sample the plan runs on this shard, once, and every one it runs there;
    else one line naming the file and the row, and what to do."""
    rows, cut = read_rows(path, shard.merge) if path.exists() else ([], False)
    seen: dict[tuple[str, str, str], int] = {}
    for number, row in enumerate(rows, start=2):
        key = (row["problem_id"], row["method"], row["sample"])
        why = _not_planned(shard, plan, *key)
        if why:
            raise EasdError(f"{shard.merge}: {path}: row {number}: {why}; remove that row")
        if key in seen:
            raise EasdError(
                f"{shard.merge}: {path}: row {number} repeats row {seen[key]} (problem {shown(key[0])}, {key[1]}, sample "
                f"{key[2]}); remove one of the two"
            )
        seen[key] = number
    if cut:
        raise _unfinished(shard, f"{path}: its last row is cut short")
    problems = list(dict.fromkeys(problem for problem, _, _ in seen))
    if plan.problems is not None and len(problems) > plan.problems:
        raise EasdError(
            f"{shard.merge}: {path} holds {len(problems)} problems where the plan gives shard {shard.name} {plan.problems}: "
            "rows of a problem outside the plan; remove them"
        )
    if not rows and (plan.problems or any(plan.on[method] for method in plan.needed)):
        raise _unfinished(shard, f"{path} {'holds no rows' if path.exists() else 'is missing'}")
    for method in sorted(plan.needed):
        for problem in problems if plan.on[method] is None else sorted(plan.on[method]):
            for sample in plan.samples:
                if (problem, method, sample) not in seen:
                    sampled = f" (sample {sample})" if len(plan.samples) > 1 else ""
                    raise _unfinished(shard, f"{path} has no {method} row of problem {shown(problem)}{sampled}")
    if plan.problems is not None and len(problems) < plan.problems:
        raise _unfinished(shard, f"{path} holds {len(problems)} of the {plan.problems} problems of shard {shard.name}")
    return rows


def _not_planned(shard: ShardFolder, plan: Planned, problem: str, method: str, sample: str) -> str | None:
    """Why the plan runs no such row on this shard, or None."""
    if method not in plan.on:
        return f"method {shown(method)} is not one this {WHAT[shard.command]} runs ({', '.join(sorted(plan.on))})"
    if sample not in plan.samples:
        return f"sample {shown(sample)} is not one this {WHAT[shard.command]} runs ({', '.join(plan.samples)})"
    problems = plan.on[method]
    if problems is None and owner(problem, shard.count) != shard.index:
        return f"problem {shown(problem)} is not one of shard {shard.name}'s"
    if problems is not None and problem not in problems:
        many = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
        return f"the plan runs {method} on {many} of shard {shard.name}, not on {shown(problem)}"
    return None


def _unfinished(shard: ShardFolder, what: str) -> EasdError:
    return EasdError(f"{shard.merge}: {what}: the shard is unfinished: rerun its command with --resume, then merge again")


# --- writing the merged folder ---------------------------------------------------------------------------------------


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
    and renames), else a copy; `source` is a file (`_results` checked)."""
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
