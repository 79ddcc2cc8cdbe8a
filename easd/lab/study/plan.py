"""A study's plan and its run: what it decodes (`StudyPlan`, or a `Shard` of one), phase by phase into its folder
(`run_study`), and the folder's checks before any model loads (`check_study_folder`, `check_plan`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ...errors import EasdError, SettingsError
from ...files import claim_folder
from ...method.methods import METHODS, Method, settings_values
from ...method.methods.easd import EASD
from ...method.pair import ModelPair
from ...method.references import REFERENCE, SPEED_REFERENCE
from ...method.settings import DecodeSettings
from ..grading.problems import Problem
from ..runs.evaluate import LocalRunner, Runner, Variant, WorkItem, grid_variants, run_evaluation
from ..runs.results_table import RESULT_COLUMNS, RESUME_KEYS, check_config, check_folder, load_results, read_config, unreadable

SPEED_REPEATS = 3  # as bench's default: a median, and a range that shows a busy machine


def studied() -> dict[str, Method]:
    """The methods a study compares with SD: every method of the shared batch but SD and target-only themselves."""
    return {name: method for name, method in METHODS.items() if name not in (REFERENCE, SPEED_REFERENCE)}


@dataclass(frozen=True)
class Shard:
    """The index-th of `count` shares of a study's problems (easd.lab.shards says which), and the problems it times."""

    index: int  # 1 … count
    count: int
    timed: tuple[Problem, ...] = ()  # shard 1: the whole plan's first --speed-limit problems; the others: none

    @property
    def name(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class StudyPlan:
    """What a study decodes. The method (`base.method`) runs at `base`'s settings; SD and target-only share them."""

    problems: list[Problem]
    base: DecodeSettings
    grid_limit: int  # the first this many problems also run the method's grid
    speed_limit: int  # the first this many problems are timed one row at a time
    grid: dict[str, tuple[float, ...]] = field(default_factory=dict)  # the values of each setting the method's grid sweeps
    batch_size: int = 8
    target_everywhere: bool = False  # --target-runs all: target-only on every problem, not only the timed ones
    speed_repeats: int = SPEED_REPEATS  # passes over the timed problems, each method timed once a pass
    shard: Shard | None = None  # one machine's share of a larger study (easd.lab.shards); None: the whole study

    @property
    def method(self) -> Method:
        return METHODS[self.base.method]

    def variant(self, method: str) -> Variant:
        return Variant(method, replace(self.base, method=method))

    def grid_points(self) -> list[Variant]:
        """The method at every point of its grid but the study's own (its own rows fill that cell)."""
        if not self.method.grid:
            return []
        own = settings_values(self.base)
        points = grid_variants(self.base, self.base.method, self.grid)[1:]  # the first is its reference run: SD's here
        return [point for point in points if settings_values(point.settings) != own]

    @property
    def greedy(self) -> bool:
        return self.base.temperature == 0

    @property
    def timed(self) -> list[Problem]:
        """The problems timed one row at a time: the first speed_limit, or those a shard times (`Shard.timed`)."""
        return self.problems[: self.speed_limit] if self.shard is None else list(self.shard.timed)


def run_study(decoder: ModelPair | Runner, plan: StudyPlan, out: Path, config: dict, resume: bool, progress: bool = True) -> None:
    """Decode whatever the study still lacks, phase by phase; every phase appends rows as its problems finish.
    `decoder`: a pair, decoded in this process, or a runner whose `alone()` times the speed phase (`RayRunner`'s: Ray
    actors, easd.lab.runs.cluster)."""
    batched = LocalRunner(decoder, plan.batch_size) if isinstance(decoder, ModelPair) else decoder
    name, title = plan.method.name, plan.method.title
    sd, it, target = (plan.variant(m) for m in (REFERENCE, name, SPEED_REFERENCE))
    gridded, rest = plan.problems[: plan.grid_limit], plan.problems[plan.grid_limit :]
    timed = plan.timed
    # in this order so that a study stopped early already answers every question, on fewer problems
    _say(f"1/4 SD, {title} and {title} over its grid on the first {len(gridded)} problems", progress)
    run_evaluation(batched, gridded, [sd, it, *plan.grid_points()], 1, out, config, resume, keep_traces=True, progress=progress)
    repeats = plan.speed_repeats
    _say(
        f"2/4 speed: target-only, SD and {title} on the first {len(timed)} problems, one row at a time, {repeats} times", progress
    )
    one_at_a_time = TakingTurns(batched.alone(), timed)
    speed = config | {"samples": repeats}  # a repetition is a sample: seed + r, the same text when greedy
    run_evaluation(one_at_a_time, timed, [target, sd, it], repeats, out / "speed", speed, resume, progress=progress)
    _say(f"3/4 SD and {title} on the other {len(rest)} problems", progress)
    run_evaluation(batched, rest, [sd, it], 1, out, config, True, keep_traces=True, progress=progress)
    proof = target_proof(pd.concat([results_of(out), results_of(out / "speed")]), plan.greedy)
    if plan.shard is not None and plan.greedy and not plan.target_everywhere and not proof["checked"]:
        _say("4/4 target-only: left to `study merge` (this shard timed no problem to compare SD's texts with)", progress)
    elif plan.target_everywhere or not plan.greedy or not proof["equal"]:
        _say(f"4/4 target-only on all {len(plan.problems)} problems ({proof['why']})", progress)
        run_evaluation(batched, plan.problems, [target], 1, out, config, True, keep_traces=True, progress=progress)
    else:
        _say(f"4/4 target-only: SD's texts ({proof['why']})", progress)


# The speed phase's methods in the two orders it alternates ("method": the one compared with SD): EASD resumes SD's
# run, so the method always runs right after it
TURNS = ((SPEED_REFERENCE, REFERENCE, "method"), (REFERENCE, "method", SPEED_REFERENCE))


@dataclass
class TakingTurns:
    """The speed phase's runner: each repetition a pass over the timed problems, and on each problem target-only first
    and then last, turn by turn, as bench rotates its methods (easd.lab.speed.bench), so that the slow drift of a shared
    machine's speed favours no method and shows in the spread of the repetitions."""

    runner: Runner
    problems: list[Problem]

    def __call__(self, items: list[WorkItem]):
        place = {problem.id: i for i, problem in enumerate(self.problems)}
        turn = lambda item: item.sample * len(self.problems) + place[item.problem.id]  # noqa: E731
        return self.runner([_in_turn(item, turn(item)) for item in sorted(items, key=turn)])


def _in_turn(item: WorkItem, turn: int) -> WorkItem:
    order = TURNS[turn % len(TURNS)]
    place = lambda v: order.index(v.label if v.label in order else "method")  # noqa: E731
    return replace(item, variants=tuple(sorted(item.variants, key=place)))


def _say(line: str, progress: bool) -> None:
    if progress:
        print(line, file=sys.stderr, flush=True)


# what the report reads from run.json: a study's without any of them is cut short or not a study's
STUDY_NEEDS = (
    *("pair", "data", "format", "command"),
    *(f"study.{key}" for key in ("problems", "method", "grid", "grid_problems", "speed_problems")),
    *(f"settings.{key}" for key in ("tau_h", "tau_o", "top_n", "k", "temperature", "top_p", "seed", "max_new_tokens")),
)


def read_study_config(out: Path, flag: str = "--out") -> dict | None:
    """The run.json of a study's folder; None where the folder holds none, or eval's. A study made before --method
    compared EASD with SD over τ_H × τ_O (`tau_hs`, `tau_os`): it reads as such. `flag`: how the user named the folder
    (easd.lab.runs.results_table.unreadable)."""
    config = read_config(out, flag)
    if config is None or "study" not in config:
        return None
    study = config["study"]
    if isinstance(study, dict) and "method" not in study and {"tau_hs", "tau_os"} <= set(study):
        study["method"], study["grid"] = EASD.name, {"tau_h": study.pop("tau_hs"), "tau_o": study.pop("tau_os")}
    check_config(out, config, STUDY_NEEDS, flag)
    if not isinstance(study["method"], str) or study["method"] not in METHODS:
        raise unreadable(out, f"its study.method {str(study['method'])[:40]!r} is not a method this program has", flag)
    if not isinstance(study["grid"], dict) or not all(_numbers(values) for values in study["grid"].values()):
        raise unreadable(out, "its study.grid is not the values of each setting its grid sweeps", flag)
    return config


def _numbers(values) -> bool:
    return isinstance(values, list) and all(type(v) in (int, float) for v in values)


def check_study_folder(out: Path, config: dict, resume: bool) -> None:
    """Before the model loads, one line if --out cannot take this study: a folder this process cannot write, one
    holding other files, eval's, a study made with other settings, or, resumed, one of another plan (`check_plan`)."""
    claim_folder(out, "--out", "study", lambda folder: (folder / "results.csv").exists() or _holds_a_study(folder))
    was = read_study_config(out)  # first: a study's run.json cut short is named as such
    check_folder(out, config, resume, keys=tuple(k for k in RESUME_KEYS if k != "pair"))  # the pair: once loaded
    if resume and was is not None:
        check_plan(out, was["study"], config["study"])


def _holds_a_study(out: Path) -> bool:
    try:
        return read_study_config(out) is not None
    except EasdError:  # a run.json not ours: the folder is someone else's
        return False


# the plan's problems, by the flag that counts them: a resumed study may have more of each, never fewer
PLANNED = {
    "problems": ("--limit", "of {}"),
    "grid_problems": ("--grid-limit", "whose τ grid ran on {}"),
    "speed_problems": ("--speed-limit", "that timed {}"),
}


def check_plan(out: Path, was: dict, now: dict) -> None:
    """A resumed study decodes the problems it began with, so that its rows answer one plan: --limit, --grid-limit
    and --speed-limit may grow; --method, --offset and --shard stay, and --speed-repeats once speed/ holds timings."""
    if was.get("shard") != now.get("shard"):
        raise SettingsError(
            "--shard",
            f"{out} holds shard {was['shard']} of a study: resume with --shard {was['shard']}, or choose another --out"
            if was.get("shard")
            else f"{out} holds a study run without --shard: resume without it, or choose another --out",
        )
    if was["method"] != now["method"]:
        raise SettingsError(
            "--method",
            f"{out} holds a study of {was['method']} against SD: resume with --method {was['method']}, or choose another --out",
        )
    if was.get("offset", 0) != now["offset"]:
        raise SettingsError(
            "--offset", f"{out} holds a study run with --offset {was.get('offset', 0)}: resume with it, or choose another --out"
        )
    repeats = was.get("speed_repeats", 1)  # a study made before repetitions timed once
    if repeats != now["speed_repeats"] and (out / "speed" / "results.csv").exists():
        raise SettingsError(
            "--speed-repeats",
            f"{out} holds a study timed with --speed-repeats {repeats}: resume with it, or delete {out / 'speed'} to time again",
        )
    for key, (flag, holding) in PLANNED.items():
        before, after = was.get("whole", was)[key], now.get("whole", now)[key]  # a shard's: the whole plan's
        count = before if isinstance(before, int) else len(before)
        if (after if isinstance(after, int) else len(after)) < count:
            raise SettingsError(
                flag,
                f"{out} holds a study {holding.format(counted(count, 'problem'))}: resume with {flag} {count} or more, or choose another --out",
            )
        if not isinstance(before, int) and after[:count] != before:  # same flags, another file's problems
            raise SettingsError(
                "--data", f"its first problems are not those of the study in {out}: resume with its file, or choose another --out"
            )


def target_proof(rows: pd.DataFrame, greedy: bool) -> dict:
    """Whether target-only's texts equal SD's on every problem both ran (`rows`: the folder's and its speed/ results),
    greedy: then SD's rows are the target's."""
    texts = {
        m: rows[rows["method"] == m].drop_duplicates("problem_id").set_index("problem_id")["text"]
        for m in (SPEED_REFERENCE, REFERENCE)
    }
    both = texts[SPEED_REFERENCE].index.intersection(texts[REFERENCE].index)
    equal = int((texts[SPEED_REFERENCE][both] == texts[REFERENCE][both]).sum())
    if not greedy:
        why = "sampled: the target's text is not SD's"
    else:
        why = f"greedy target-only equal to SD token for token on {equal} of {len(both)} problems"
    return {
        "greedy": greedy,
        "checked": len(both),
        "equal_count": equal,
        "equal": greedy and len(both) > 0 and equal == len(both),
        "why": why,
    }


def results_of(folder: Path) -> pd.DataFrame:
    """A folder's rows by problem, each problem's in the order written: the report's ties (the refused → chosen pairs
    of one count, the graders' list) fall alike whatever order the problems finished in, as in a merged study's
    folder (easd.lab.shards), whose problems come shard by shard."""
    path = folder / "results.csv"
    if not path.exists():
        return pd.DataFrame(columns=RESULT_COLUMNS)
    return load_results(path).sort_values(["problem_id", "sample"], kind="stable", ignore_index=True)


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
