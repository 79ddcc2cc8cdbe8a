"""Which shard decodes a problem (`owner`), and a shard's plan and run.json from the whole plan's (`shard_of`)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

from ...errors import SettingsError, shown
from ..study.plan import Shard, StudyPlan


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
