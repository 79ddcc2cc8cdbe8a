"""Every row of a shard's results accounted for against the plan: each one the plan runs on that shard, once, and every
one it runs there, with its trace where the shard keeps traces."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import EasdError, shown
from ...method.methods import METHODS
from ...method.references import REFERENCE, SPEED_REFERENCE
from ..runs.evaluate import trace_path
from ..runs.results_table import read_rows
from ..study.findings import grid_cells
from .folder import WHAT, ShardFolder
from .split import owner


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


def traced_rows(shard: ShardFolder) -> list[dict]:
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
