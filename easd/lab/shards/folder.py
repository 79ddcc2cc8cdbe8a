"""A shard's folder read (`read_shard`: its run.json holds what the merge counts on), and the shards checked as the
shards of one plan (`check_shards`: each once, one pair, files, settings and versions)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import EasdError, SettingsError, shown
from ..runs.results_table import _as_run, check_config, read_config, unreadable
from ..study.plan import read_study_config
from .split import parse_shard

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
