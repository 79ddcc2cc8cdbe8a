"""`python -m easd study`: does a method (EASD by default, `--method`) help over SD on this pair and these problems, at
what speed, how robust is that, and how many problems would it take to tell?

One folder answers what the paper's reviewers asked, from runs made for it (docs/evaluation.md, "study"). "The
method" below is the one the study compares with SD; its table entry (easd.method.methods) says everything the
study reads of it: its grid, its interventions, whether it resumes SD's run.

    results.csv, traces/   SD and the method on every problem, and the method over its grid (EASD's τ_H × τ_O) on
                           the first --grid-limit of them (a method that follows SD resumes SD's run at its first
                           intervention, easd.method.prefix): the eval folder the app's Evaluation tab and links open
    speed/results.csv      target-only, SD and the method on the first --speed-limit problems, one row at a time,
                           problem by problem, so their tokens/s compare like with like on this machine
    study.json             every figure of the report, for scripts
    study.md               the report's tables as markdown (docs/ quotes them)
    study.html             the report as one file that opens offline (easd.render.study)
    differences/           the problems where SD and the method answer differently, each as the one-file export
                           (easd.render.export) opened at the token where the two runs part

Target-only's accuracy: in greedy decoding, SD's text *is* the target's (tests/test_decoding.py proves it for
every k), so the target is run only on the timed problems, its texts compared with SD's there, and SD's rows read
as the target's elsewhere when every one was equal (`--target-runs all` runs it on every problem instead; sampled
runs always do). Each phase appends rows as problems finish, so a stopped study resumes with `--resume`.
"""

from __future__ import annotations

import itertools
import json
import math
import platform
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlencode

import pandas as pd

from .._version import __version__
from ..errors import EasdError, SettingsError
from ..files import claim_folder, file_stem, write_text_whole
from ..method.compare import first_difference
from ..method.methods import METHODS, Method, knobs, lookup, make_settings, own_knobs, settings_values
from ..method.pair import ModelPair
from ..method.settings import DecodeSettings
from ..traces import files as trace_io
from .calibrate import nearest_candidate, top_share_mean
from .evaluate import LocalRunner, Runner, Variant, WorkItem, grid_label, grid_variants, run_evaluation, trace_path
from .problems import Problem
from .protocol import Protocol
from .report import grader_of, graders_compared, paired_row, summary_table
from .results_table import RESULT_COLUMNS, RESUME_KEYS, check_config, check_folder, load_results, read_config, unreadable
from .stats import detectable_difference, mcnemar_problems, spread, wilson

POSITION_BINS = 10  # where in the answer an intervention falls: tenths of the run's tokens
TOP_PAIRS = 15  # set aside → chosen pairs listed
# The gain `--effect` asks about by default, in points: the EASD paper's average gain over the target alone with its
# Qwen2.5 7B → 32B pair (its Table 1); greedy SD equals the target, so it is a gain over SD too
EFFECT_POINTS = 3.5
DAY = 24 * 3600
SPEED_REPEATS = 3  # as bench's default: a median, and a range that shows a busy machine
# A method's tokens/s over repetitions differing by more than this share of its median says the machine was busy: on
# a quiet one they agree within a few percent (bench's figures, docs/benchmarks.md)
BUSY_SPREAD = 0.10


def studied() -> dict[str, Method]:
    """The methods a study compares with SD: every method of the shared batch but SD and target-only themselves."""
    return {name: method for name, method in METHODS.items() if name not in ("sd", "target")}


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
    actors, easd.lab.cluster)."""
    batched = LocalRunner(decoder, plan.batch_size) if isinstance(decoder, ModelPair) else decoder
    name, title = plan.method.name, plan.method.title
    sd, it, target = (plan.variant(m) for m in ("sd", name, "target"))
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
    proof = target_proof(pd.concat([_results(out), _results(out / "speed")]), plan.greedy)
    if plan.shard is not None and plan.greedy and not plan.target_everywhere and not proof["checked"]:
        _say("4/4 target-only: left to `study merge` (this shard timed no problem to compare SD's texts with)", progress)
    elif plan.target_everywhere or not plan.greedy or not proof["equal"]:
        _say(f"4/4 target-only on all {len(plan.problems)} problems ({proof['why']})", progress)
        run_evaluation(batched, plan.problems, [target], 1, out, config, True, keep_traces=True, progress=progress)
    else:
        _say(f"4/4 target-only: SD's texts ({proof['why']})", progress)


# The speed phase's methods in the two orders it alternates ("method": the one compared with SD): EASD resumes SD's
# run, so the method always runs right after it
TURNS = (("target", "sd", "method"), ("sd", "method", "target"))


@dataclass
class TakingTurns:
    """The speed phase's runner: each repetition a pass over the timed problems, and on each problem target-only first
    and then last, turn by turn, as bench rotates its methods (easd.lab.bench), so that the slow drift of a shared
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


# --- the folder -------------------------------------------------------------------------------

# what the report reads from run.json: a study's without any of them is cut short or not a study's
STUDY_NEEDS = (
    *("pair", "data", "format", "command"),
    *(f"study.{key}" for key in ("problems", "method", "grid", "grid_problems", "speed_problems")),
    *(f"settings.{key}" for key in ("tau_h", "tau_o", "top_n", "k", "temperature", "top_p", "seed", "max_new_tokens")),
)


def read_study_config(out: Path, flag: str = "--out") -> dict | None:
    """The run.json of a study's folder; None where the folder holds none, or eval's. A study made before --method
    compared EASD with SD over τ_H × τ_O (`tau_hs`, `tau_os`): it reads as such. `flag`: how the user named the folder
    (easd.lab.results_table.unreadable)."""
    config = read_config(out, flag)
    if config is None or "study" not in config:
        return None
    study = config["study"]
    if isinstance(study, dict) and "method" not in study and {"tau_hs", "tau_os"} <= set(study):
        study["method"], study["grid"] = "easd", {"tau_h": study.pop("tau_hs"), "tau_o": study.pop("tau_os")}
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
                f"{out} holds a study {holding.format(_count(count, 'problem'))}: resume with {flag} {count} or more, or choose another --out",
            )
        if not isinstance(before, int) and after[:count] != before:  # same flags, another file's problems
            raise SettingsError(
                "--data", f"its first problems are not those of the study in {out}: resume with its file, or choose another --out"
            )


# --- reading the folder -------------------------------------------------------------------------


def target_proof(rows: pd.DataFrame, greedy: bool) -> dict:
    """Whether target-only's texts equal SD's on every problem both ran (`rows`: the folder's and its speed/ results),
    greedy: then SD's rows are the target's."""
    texts = {m: rows[rows["method"] == m].drop_duplicates("problem_id").set_index("problem_id")["text"] for m in ("target", "sd")}
    both = texts["target"].index.intersection(texts["sd"].index)
    equal = int((texts["target"][both] == texts["sd"][both]).sum())
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


def _results(folder: Path) -> pd.DataFrame:
    """A folder's rows by problem, each problem's in the order written: the report's ties (the refused → chosen pairs
    of one count, the graders' list) fall alike whatever order the problems finished in, as in a merged study's
    folder (easd.lab.shards), whose problems come shard by shard."""
    path = folder / "results.csv"
    if not path.exists():
        return pd.DataFrame(columns=RESULT_COLUMNS)
    return load_results(path).sort_values(["problem_id", "sample"], kind="stable", ignore_index=True)


def analyse(out: Path, app_url: str = "http://127.0.0.1:7860/", effect: float = EFFECT_POINTS) -> dict:
    """Every figure of the report, from the folder alone (a resumed or copied folder reads the same); `effect`: the
    gain in points the report says how many problems it would take to detect."""
    config = read_study_config(out)
    if config is None:
        raise EasdError(f"--out: {out} holds no study: run `python -m easd study` with this --out first")
    method = METHODS[config["study"]["method"]]
    name = method.name
    results, speed = _results(out), _results(out / "speed")
    proof = target_proof(pd.concat([results, speed]), float(config["settings"]["temperature"]) == 0)
    runs = {m: _traces(out, results, m) for m in ("sd", name)}  # each trace file read once
    timed = _speed(speed, results, name)
    paired = _paired(results, name)
    study = {
        "folder": str(out),
        "config": config,
        "method": described(method) | {"label": run_label(method, config["settings"])},
        "accuracy": _accuracy(results, proof, name),
        "paired": paired,
        "power": power(paired, timed, effect),
        "target": proof,
        "speed": timed,
        "speed_note": " ".join(filter(None, [speed_note(timed), resumes_note(method)])),
        "grid": _grid(results, config, method),
        "interventions": where_it_intervenes(runs[name], method) if method.intervenes else None,
        "differences": differences(out, results, runs, app_url, name),
        "graders": graders_compared(results[results["method"].isin(("target", "sd", name))], config["format"], grader_of(out)),
        # the paper's τ_H calibration, where the method's grid sweeps τ_H (EASD's): it would pick one of them
        "calibration": _after_the_fact(runs["sd"]) if "tau_h" in method.grid else {},
        "versions": versions(),
    }
    return {**study, "verdict": verdict(study), "power_lines": power_lines(study), "assumptions": assumptions(study)}


def described(method: Method) -> dict:
    """What the report says of the method compared with SD, from its table entry (the report's HTML is drawn from
    this alone)."""
    return {
        "name": method.name,
        "title": method.title,
        "follows": method.follows,
        "intervention": list(method.intervention),  # one and several, in words: "penalty", "penalties"
        "intervention_origins": list(method.intervention_origins),  # what "where it intervenes" counts
    }


def _accuracy(results: pd.DataFrame, proof: dict, name: str) -> list[dict]:
    rows = []
    problems = results[results["method"] == "sd"]["problem_id"].nunique()
    for method in ("target", "sd", name):
        group = results[results["method"] == method]
        source = "run"
        if method == "target" and group["problem_id"].nunique() < problems:
            if not proof["equal"]:
                continue  # still to run (the study's phase 3)
            group, source = results[results["method"] == "sd"], "SD's texts"
        correct, runs = int(group["correct"].sum()), len(group)
        accuracy, low, high = wilson(correct, runs)
        rows.append(
            {"method": method, "problems": runs, "correct": correct, "accuracy": accuracy, "ci95": [low, high], "source": source}
        )
    return rows


def _paired(results: pd.DataFrame, name: str) -> dict:
    """The method against SD on the same problems: the discordant counts, exact McNemar, a bootstrap interval, and
    how often the texts and the answers differ at all."""
    row = paired_row(results, name, "sd")
    key = ["problem_id", "sample"]
    both = results[results["method"] == name].merge(results[results["method"] == "sd"], on=key, suffixes=("_a", "_sd"))
    row["texts_differ"] = int((both["text_a"] != both["text_sd"]).sum())
    row["answers_differ"] = int((both["prediction_a"].astype(str) != both["prediction_sd"].astype(str)).sum())
    return {
        k: (None if isinstance(v, float) and math.isnan(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()
    }


# --- how many problems would it take ------------------------------------------------------------


def power(paired: dict, speed: list[dict], effect: float) -> dict:
    """How many problems it would take: the smallest difference this study's problems could have detected, and the
    problems needed to detect a gain of `effect` points, at 80% power and α = 0.05, two-sided, paired, from the share
    of problems where the two methods disagreed (easd.lab.stats: McNemar's test, Connor's normal approximation); and
    what those problems cost on this machine, at the speed the study timed (SD and the method, one row at a time)."""
    pairs = paired.get("pairs") or 0
    discordant = (paired["only_a"] + paired["only_b"]) / pairs if pairs else 0.0
    seconds = [row["seconds_per_problem"] for row in speed if row["method"] != "target"]
    per_problem = sum(seconds) if len(seconds) == 2 and all(seconds) else None  # SD and the method both timed
    needed = mcnemar_problems(discordant, effect / 100)
    return {
        "alpha": 0.05,
        "power": 0.8,
        "how": "paired power calculation from the discordant proportion",
        "pairs": pairs,
        "discordant": discordant,
        "detectable": detectable_difference(discordant, pairs),
        "effect": effect,
        "needed": needed,
        "seconds_per_problem": per_problem,
        "per_day": int(DAY / per_problem) if per_problem else None,
        "days": needed * per_problem / DAY if needed and per_problem else None,
    }


def power_words(study: dict) -> list[str]:
    """What `power` found, in the sentences the verdict ends with: what this study could detect, and what detecting
    `--effect` would take."""
    power, title = study["power"], study["method"]["title"]
    if not power["pairs"]:
        return []
    if not power["discordant"]:
        return [
            f"SD and {title} were right on the same problems, so what a difference would take rests on how often they "
            "would part, which must be assumed: this study does not extrapolate"
        ]
    said = []
    if power["detectable"] is None:
        said.append("it had too few problems to detect even a difference on every problem where they parted")
    else:
        said.append(f"it could have detected ±{100 * power['detectable']:.1f} points")
    effect = power["effect"]
    if power["needed"] is None:
        said.append(
            f"a gain of {effect:g} points is more than the {100 * power['discordant']:.1f}% of problems where they parted allows"
        )
    else:
        cost = ""
        if power["days"] is not None:
            hours = power["days"] * 24
            cost = (
                f" (~{power['days']:.1f} days on this machine)" if power["days"] > 1 else f" (~{hours:.1f} hours on this machine)"
            )
        said.append(f"detecting {effect:+g} points would take ~{power['needed']:,} problems{cost}")
    return said


def power_lines(study: dict) -> list[str]:
    """The report's section on how many problems it would take, in lines (markdown and HTML alike)."""
    power, title = study["power"], study["method"]["title"]
    p = study["paired"]
    if not power["pairs"]:
        return ["No problem has been decoded by both SD and the method yet."]
    lines = [
        f"Of the {_count(power['pairs'], 'problem')} both ran, one of the two was right and the other wrong on "
        f"{100 * power['discordant']:.1f}% (only {title} right on {p['only_a']}, only SD on {p['only_b']}): the "
        "discordant share ψ."
    ]
    if not power["discordant"]:
        lines.append(
            "They were right on the same problems, so no difference could show, and the problems a difference would "
            "need rest on a discordance that must be assumed: this study does not extrapolate."
        )
        return lines
    detectable, at = power["detectable"], "At 80% power and α = 0.05 (two-sided, paired)"
    lines.append(
        f"{at}, the smallest difference this study could have detected is ±{100 * detectable:.1f} points."
        if detectable is not None
        else f"{at}, it could detect no difference: too few problems even for one where every discordant problem goes one way."
    )
    effect = power["effect"]
    if power["needed"] is None:
        lines.append(
            f"A gain of {effect:g} points (--effect) needs a discordant share of at least {effect:g}%: at the share seen "
            "there is no such gain to detect."
        )
    else:
        lines.append(f"Detecting a gain of {effect:g} points (--effect) would take ~{power['needed']:,} problems.")
        if power["per_day"]:
            when = (
                f"more than this machine decodes in a day: ~{power['days']:.1f} days"
                if power["needed"] > power["per_day"]
                else f"~{24 * power['days']:.1f} hours"
            )
            lines.append(
                f"At the speed timed here (SD and {title}, one row at a time: {power['seconds_per_problem']:.1f} s a "
                f"problem, ~{power['per_day']:,} problems a day), that is {when}; decoding in batches is faster."
            )
    lines.append(
        "How: a paired power calculation from the discordant proportion (McNemar's test, normal approximation; "
        "Connor 1987): n = [z₀.₉₇₅ √ψ + z₀.₈ √(ψ − δ²)]² / δ², ψ the discordant share, δ the difference in "
        "accuracy; the smallest detectable difference solves it for δ at this study's n. It assumes the discordant "
        "share seen here holds on more problems."
    )
    return lines


# --- speed --------------------------------------------------------------------------------------


def _speed(speed: pd.DataFrame, results: pd.DataFrame, name: str) -> list[dict]:
    """tokens/s timed one row at a time, as the median over repetitions with its range, and the speed-up over
    target-only as the median of each repetition's own (its rows ran in the same minutes); the acceptance figures over
    every problem (they do not depend on the clock)."""
    every = summary_table(results).set_index("method") if len(results) else pd.DataFrame()
    methods = ("target", "sd", name)
    rates = _repetitions(speed, methods)
    rows = []
    for method in methods:
        if not rates[method]:
            continue
        timed = speed[speed["method"] == method]
        rate = spread(rates[method])
        speedups = [a / b for a, b in zip(rates[method], rates["target"])]
        ratio = spread(speedups) if speedups else None
        rows.append(
            {
                "method": method,
                "problems": int(timed["problem_id"].nunique()),
                "repetitions": rate.n,
                "tokens": int(timed["new_tokens"].sum()),
                "seconds": float(timed["seconds"].sum()),
                "seconds_per_problem": float(timed["seconds"].mean()),  # a run of one problem, one row at a time
                "tokens_per_s": rate.median,
                "tokens_per_s_range": [rate.low, rate.high],
                "spread": (rate.high - rate.low) / rate.median if rate.median else None,
                "speedup": ratio.median if ratio else None,
                "speedup_range": [ratio.low, ratio.high] if ratio else None,
                "mean_acceptance_length": _number(every, method, "mean_acceptance_length"),
                "draft_acceptance_rate": _number(every, method, "draft_acceptance_rate"),
                "interventions_per_1k": _number(every, method, "interventions_per_1k") if method == name else None,
            }
        )
    return rows


def _repetitions(speed: pd.DataFrame, methods: tuple[str, ...]) -> dict[str, list[float]]:
    """Each method's tokens/s in each repetition (a sample of speed/results.csv), over the problems every method ran in
    it, so that like is timed with like in a repetition a stopped study left unfinished."""
    rates = {method: [] for method in methods}
    for _, rows in speed.groupby("sample"):
        ran = [rows[rows["method"] == method] for method in methods]
        common = set.intersection(*(set(group["problem_id"]) for group in ran))
        timed = [group[group["problem_id"].isin(common)] for group in ran]
        if common and all(group["seconds"].sum() > 0 for group in timed):
            for method, group in zip(methods, timed):
                rates[method].append(float(group["new_tokens"].sum() / group["seconds"].sum()))
    return rates


def speed_note(rows: list[dict]) -> str:
    """How the speeds were timed, and what their spread says: whether the machine was busy while they ran."""
    if not rows:
        return "Nothing timed yet."
    repeats = rows[0]["repetitions"]
    how = (
        f"Each method timed {_count(repeats, 'time')} over the same problems, one row at a time in one process, "
        "target-only first on one problem and last on the next; the median over repetitions, with their range."
    )
    again = "to time again, delete speed/ and rerun the study with --resume."
    if repeats < 2:
        return f"{how} One repetition has no spread to tell a busy machine by: these speeds may be a busy machine's; {again}"
    busy = [row for row in rows if row["spread"] is not None and row["spread"] > BUSY_SPREAD]
    if not busy:
        return f"{how} Every method's repetitions agree within {BUSY_SPREAD:.0%}: the machine was quiet enough."
    differ = ", ".join(f"{row['method']}'s by {row['spread']:.0%}" for row in busy)
    return (
        f"{how} The repetitions differ by more than {BUSY_SPREAD:.0%} ({differ}): the machine was busy while they ran, "
        f"so these speeds are rough; {again}"
    )


def _number(table: pd.DataFrame, method: str, column: str) -> float | None:
    if method not in table.index or column not in table.columns or pd.isna(table.at[method, column]):
        return None
    return float(table.at[method, column])


def grid_names(study: dict, method: Method) -> list[str]:
    """The settings the method's grid swept in this study (run.json's study.grid), in its table entry's order."""
    return [name for name in method.grid if name in study["grid"]]


def grid_cells(config: dict, method: Method) -> list[tuple[tuple, str]]:
    """Each point of the method's grid in run.json, and the method its rows name: the method's own at the study's own
    settings (its plain rows fill that cell), else the point's label (easd@1/0.4), as `StudyPlan.grid_points` runs them."""
    names, settings = grid_names(config["study"], method), config["settings"]
    points = itertools.product(*(config["study"]["grid"][name] for name in names)) if names else ()
    return [
        (point, method.name if all(settings.get(n) == v for n, v in zip(names, point)) else grid_label(method.name, point))
        for point in points
    ]


def _grid(results: pd.DataFrame, config: dict, method: Method) -> dict:
    """Accuracy and interventions per 1,000 tokens at each point of the method's grid, over the problems every point
    ran; the study's own point is its plain rows (labelled by the method's name)."""
    study = config["study"]
    names = grid_names(study, method)
    gridded = set(study["grid_problems"])
    rows = results[results["problem_id"].isin(gridded)]
    cells = {}
    for point, label in grid_cells(config, method):
        group = rows[rows["method"] == label]
        tokens = group["new_tokens"].sum()
        known = tokens and group["interventions"].notna().all()
        cells["/".join(f"{value:g}" for value in point)] = {
            "values": dict(zip(names, point)),
            "runs": len(group),
            "accuracy": float(group["correct"].mean()) if len(group) else None,
            "interventions_per_1k": float(1000 * group["interventions"].sum() / tokens) if known else None,
        }
    sd = rows[rows["method"] == "sd"]
    known = knobs()
    return {
        "problems": len(gridded),
        "settings": names,
        "labels": [known[name].label or name if name in known else name for name in names],
        "values": {name: study["grid"][name] for name in names},
        "cells": cells,
        "sd_accuracy": float(sd["correct"].mean()) if len(sd) else None,
    }


# --- where it intervenes ------------------------------------------------------------------------

TOKEN_KINDS = ("digit", "operator", "word start", "word piece", "punctuation", "whitespace", "other")
OPERATORS = set("+-*/=×÷^<>%±·√")


def token_kind(text: str) -> str:
    """What kind of token an intervention set aside (EASD's refused draft): a digit, an operator, the start of a word
    (a space, then letters), a piece of a word (letters with no space), punctuation, whitespace, or other."""
    bare = text.strip()
    if not bare:
        return "whitespace"
    if bare[0].isdigit():
        return "digit"
    if all(c in OPERATORS for c in bare):
        return "operator"
    if all(unicodedata.category(c).startswith("P") for c in bare):
        return "punctuation"
    if bare[0].isalpha():
        return "word start" if text[0].isspace() else "word piece"
    return "other"


def _traces(out: Path, results: pd.DataFrame, method: str) -> dict[str, object]:
    """problem id → the trace of `method`'s run (sample 0), from the folder's traces/."""
    found = {}
    for _, row in results[(results["method"] == method) & (results["sample"] == 0)].iterrows():
        path = trace_path(out / "traces", row)
        if path.exists():
            found[row["problem_id"]] = trace_io.read_json(path, capped=False)[0]
    return found


def where_it_intervenes(traces: dict, method: Method) -> dict:
    """The method's interventions (the tokens whose origin its table entry names as its own: EASD's penalties) by
    where they fall in the answer (tenths of its tokens), by the kind of token they set aside (the draft's, where a
    record names one: EASD's refused draft; else the token written instead), and the most frequent set aside →
    chosen pairs (set aside: None where the record names none)."""
    positions, kinds, pairs, total, set_aside = [0] * POSITION_BINS, Counter(), Counter(), 0, 0
    for trace in traces.values():
        length = len(trace.records)
        for record in trace.records:
            if not method.intervened(record.origin):
                continue
            total += 1
            aside = record.draft_token_text if record.draft_token_id is not None else None
            set_aside += aside is not None
            positions[min(POSITION_BINS - 1, POSITION_BINS * record.position // max(1, length))] += 1
            kinds[token_kind(record.token_text if aside is None else aside)] += 1
            pairs[(aside, record.token_text)] += 1
    return {
        "count": total,
        "set_aside": set_aside,  # of them, those whose record names the token set aside
        "kind_of": kind_of(total, set_aside),
        "by_tenth": positions,
        "by_kind": {kind: kinds[kind] for kind in TOKEN_KINDS},
        "pairs": [{"set_aside": a, "chosen": b, "count": n} for (a, b), n in pairs.most_common(TOP_PAIRS)],
    }


def kind_of(count: int, set_aside: int) -> str:
    """What `where_it_intervenes` sorted by kind: the tokens set aside, the tokens written instead, or both."""
    if set_aside == count:
        return "kind of token set aside"
    return "kind of token written" if not set_aside else "kind of token set aside (else written)"


def differences(out: Path, results: pd.DataFrame, runs: dict[str, dict], app_url: str, name: str) -> list[dict]:
    """Each problem where SD (left) and the method (right) answer differently: both answers, the gold one, the token
    where the runs part, a link that opens the two runs there in the app (`python app.py --eval-dir FOLDER`), and the
    one-file export."""
    rows = results[results["sample"] == 0]
    answers = {m: rows[rows["method"] == m].set_index("problem_id") for m in ("sd", name)}
    found = []
    for problem in answers[name].index.intersection(answers["sd"].index):
        a, b = answers["sd"].loc[problem], answers[name].loc[problem]
        if str(a["prediction"]) == str(b["prediction"]):
            continue
        token = first_difference(runs["sd"].get(problem), runs[name].get(problem))
        query = {"eval": out.resolve().name, "problem": problem, "sample": 0, "left": "sd", "right": name, "lane": "right"}
        found.append(
            {
                "problem_id": str(problem),
                "gold": str(a["gold"]),
                "left": str(a["prediction"]),
                "left_correct": bool(a["correct"]),
                "right": str(b["prediction"]),
                "right_correct": bool(b["correct"]),
                "token": token,
                "app_link": app_url + "?" + urlencode(query | ({"token": token} if token is not None else {})),
                # a file of its own (5 MB, Plotly inlined) only where one method was right and the other wrong
                "file": f"differences/{file_stem(str(problem))}.html" + (f"#right-{token}" if token is not None else "")
                if bool(a["correct"]) != bool(b["correct"])
                else None,
            }
        )
    return sorted(found, key=lambda d: (d["left_correct"] == d["right_correct"], d["problem_id"]))  # verdicts that part first


def write_differences(out: Path, found: list[dict], name: str) -> None:
    """The one-file export of SD (left) against the method (right) for every problem in `found` that names a file
    (only its two traces are read)."""
    from ..render.export import comparison_file

    folder = out / "differences"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.html"):  # an earlier report's: its problems may part no more
        old.unlink()
    for difference in found:
        problem = difference["problem_id"]
        paths = [trace_path(out / "traces", {"problem_id": problem, "method": m, "sample": 0}) for m in ("sd", name)]
        if difference["file"] and all(path.exists() for path in paths):
            left, right = (trace_io.read_json(path, capped=False)[0] for path in paths)
            page = comparison_file({"left": left, "right": right})
            write_text_whole(folder / f"{file_stem(problem)}.html", page)


def _after_the_fact(traces: dict) -> dict:
    """The τ_H the paper's calibration would pick from these problems' own greedy SD runs (the target's entropy at
    every token): informative only, since it is read off the test problems after the fact."""
    entropies = [r.h_target for trace in traces.values() for r in trace.records if r.h_target is not None]
    if not entropies:
        return {}
    raw = top_share_mean(entropies)
    return {"tokens": len(entropies), "raw": raw, "tau_h": nearest_candidate(raw)}


def versions() -> dict:
    """What a reader needs to rerun the study: our version and the libraries that decode."""
    found = {"easd-lab": __version__, "python": platform.python_version(), "machine": platform.platform()}
    for module in ("torch", "transformers", "llama_cpp"):
        try:
            found[module] = __import__(module).__version__
        except Exception:  # not installed: the study ran without it
            pass
    return found


# --- the report ---------------------------------------------------------------------------------


def write_report(out: Path, study: dict) -> None:
    """study.json, study.md, study.html and differences/, from `analyse`'s figures."""
    from ..files import write_text_whole
    from ..render.study import study_file

    write_differences(out, study["differences"], study["method"]["name"])
    write_text_whole(out / "study.json", json.dumps(study, indent=1, ensure_ascii=False, default=_plain))
    write_text_whole(out / "study.md", markdown(study))
    write_text_whole(out / "study.html", study_file(study), errors="replace")


def _plain(value):
    return value.item() if hasattr(value, "item") else str(value)


def verdict(study: dict) -> str:
    """The study's answer in one sentence: the method against SD, the difference with its interval and McNemar's p,
    and how many problems it would take to tell (`power_words`)."""
    p, title = study["paired"], study["method"]["title"]
    if not p.get("pairs"):
        return f"No problem has been decoded by both SD and {title} yet."
    planned = study["config"]["study"].get("problems", p["pairs"])
    unfinished = f" (unfinished: {p['pairs']} of {planned} problems so far; rerun with --resume)" if p["pairs"] < planned else ""
    difference, low, high = p["difference"], p["boot95_low"], p["boot95_high"]
    if low > 0:
        word = "helped"
    elif high < 0:
        word = "hurt"
    else:
        word = "not told from noise"
    return (
        f"On {_count(p['pairs'], 'problem')}, {title} vs SD: {word}: {100 * p['accuracy_a']:.1f}% correct against SD's "
        f"{100 * p['accuracy_b']:.1f}%, a difference of {100 * difference:+.1f} points (paired bootstrap 95%: "
        f"{100 * low:+.1f} to {100 * high:+.1f}; exact McNemar p = {p['mcnemar_p']:.3g}: only {title} was right on "
        f"{_count(p['only_a'], 'problem')}, only SD on {p['only_b']}){unfinished}"
        + "".join(f"; {words}" for words in power_words(study))
        + "."
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def run_label(method: Method, settings: dict) -> str:
    """The method's row as the report names it: its name, its lane's title under the study's settings, and the
    values of the settings its grid sweeps (and SD's k where it verifies drafts): easd (EASD, rule full; k = 4, …)."""
    known = knobs()
    values = [("k", settings["k"])] if method.verifies else []
    values += [(known[name].label or name, settings[name]) for name in method.grid if name in settings]
    lane = method.lane_title(make_settings({k: v for k, v in settings.items() if k in known}, method=method.name))
    inside = [lane, *([", ".join(f"{label} = {value:g}" for label, value in values)] if values else [])]
    return f"{method.name} ({'; '.join(inside)})"


def resumes_note(method: Method) -> str:
    """Why the method's time up to its first intervention is another's, where it resumes that one's run (EASD: SD's);
    "" where it does not."""
    if not method.follows:
        return ""
    leader = lookup(method.follows).title
    return (
        f"{method.title} resumes {leader}'s run at its first {method.intervention[0] or 'intervention'}, so its time up "
        f"to there is {leader}'s (the same passes); a run where it never intervenes times as {leader}'s."
    )


def markdown(study: dict) -> str:
    """The report's tables as markdown."""
    from ..render.study import ranged

    config, method = study["config"], study["method"]
    title = method["title"]
    lines = [f"# Does {title} help? {config['pair']} on {Path(config['data']).name}", "", study["verdict"], ""]
    lines += ["## Accuracy", "", "| method | problems | correct | accuracy (95% Wilson) | from |", "|---|---:|---:|---|---|"]
    for row in study["accuracy"]:
        low, high = row["ci95"]
        label = method["label"] if row["method"] == method["name"] else row["method"]
        lines.append(
            f"| {label} | {row['problems']} | {row['correct']} | {100 * row['accuracy']:.1f}% ({100 * low:.1f}–{100 * high:.1f}) | {row['source']} |"
        )
    p, target = study["paired"], study["target"]
    lines += [
        "",
        f"{title}'s text differs from SD's on {p.get('texts_differ', 0)} problems, its answer on {p.get('answers_differ', 0)}. "
        f"Target-only: {target['why']}.",
        "",
        "## How many problems would it take?",
        "",
        *study["power_lines"],
        "",
        "## Speed",
        "",
        study["speed_note"] + " Acceptance over every problem.",
        "",
        "| method | problems timed | tokens | tokens/s | speed-up over target-only | mean acceptance length | draft acceptance rate "
        f"| {method['intervention'][1] or 'interventions'} / 1k tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in study["speed"]:
        cells = [
            row["method"],
            str(row["problems"]),
            f"{row['tokens']:,}",
            ranged(row["tokens_per_s"], row["tokens_per_s_range"], "{:.2f}"),
            ranged(row["speedup"], row["speedup_range"], "{:.2f}×"),
            _figure(row["mean_acceptance_length"], "{:.2f}"),
            _figure(row["draft_acceptance_rate"], "{:.3f}"),
            _figure(row["interventions_per_1k"], "{:.1f}"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *grid_markdown(study), *interventions_markdown(study)]
    lines += [f"## Where SD and {title} answer differently", ""]
    if study["differences"]:
        lines += [f"| problem | gold | SD | {title} | parts at token |", "|---|---|---|---|---:|"]
        for d in study["differences"]:
            mark = lambda ok: "✓" if ok else "✗"  # noqa: E731
            lines.append(
                f"| {_code(d['problem_id'])} | {_code(d['gold'])} | {_code(d['left'])} {mark(d['left_correct'])} | "
                f"{_code(d['right'])} {mark(d['right_correct'])} | {d['token'] if d['token'] is not None else '—'} |"
            )
    else:
        lines.append("None.")
    lines += ["", "## Graders", "", *graders_markdown(study["graders"])]
    lines += ["", "## What was assumed", ""] + [f"- {line}" for line in study["assumptions"]]
    return "\n".join(lines) + "\n"


def grid_markdown(study: dict) -> list[str]:
    """The grid's cells as a table: over two settings, a row per value of the first; over one, a row."""
    grid, title = study["grid"], study["method"]["title"]
    if not grid["settings"]:
        return ["## Sensitivity", "", f"{title} declares no grid: no setting was varied.", ""]
    many = study["method"]["intervention"][1]  # "" for a method that never intervenes: its cells give accuracy alone
    cell = lambda key: _cell(grid["cells"][key], many)  # noqa: E731
    lines = [f"## Sensitivity: accuracy{f' ({many} per 1,000 tokens)' if many else ''} on {grid['problems']} problems", ""]
    if len(grid["settings"]) == 2:
        (first, second), (rows, across) = grid["labels"], grid["values"].values()
        lines += [f"| {first} \\ {second} | " + " | ".join(f"{o:g}" for o in across) + " |", "|---|" + "---:|" * len(across)]
        lines += [f"| {h:g} | " + " | ".join(cell(f"{h:g}/{o:g}") for o in across) + " |" for h in rows]
    else:
        (label,), (values,) = grid["labels"], grid["values"].values()
        lines += [f"| {label} | " + " | ".join(f"{v:g}" for v in values) + " |", "|---|" + "---:|" * len(values)]
        lines.append("| accuracy | " + " | ".join(cell(f"{v:g}") for v in values) + " |")
    return [*lines, "", f"SD on the same problems: {_figure(grid['sd_accuracy'], '{:.0%}')}.", ""]


def interventions_markdown(study: dict) -> list[str]:
    """Where the method intervenes: by tenth of the answer, by the kind of token, the most frequent pairs."""
    method, found = study["method"], study["interventions"]
    title, many = method["title"], method["intervention"][1]
    if found is None:
        return [f"## Where {title} intervenes", "", f"{title} declares no interventions: every token is its own choice.", ""]
    lines = [f"## Where {title} intervenes", "", f"{found['count']} {many} in {title}'s runs.", ""]
    lines += [
        "| tenth of the answer | " + " | ".join(str(i + 1) for i in range(POSITION_BINS)) + " |",
        "|---|" + "---:|" * POSITION_BINS,
    ]
    lines += [f"| {many} | " + " | ".join(str(n) for n in found["by_tenth"]) + " |", ""]
    lines += [f"| {found['kind_of']} | " + " | ".join(found["by_kind"]) + " |", "|---|" + "---:|" * len(found["by_kind"])]
    lines += [f"| {many} | " + " | ".join(str(n) for n in found["by_kind"].values()) + " |", ""]
    if found["pairs"]:
        lines += ["| set aside | chosen | times |", "|---|---|---:|"]
        lines += [
            f"| {'—' if a['set_aside'] is None else '`' + _code(a['set_aside']) + '`'} | `{_code(a['chosen'])}` | {a['count']} |"
            for a in found["pairs"]
        ]
        lines.append("")
    return lines


def graders_markdown(compared: dict) -> list[str]:
    """Each method's accuracy by the study's grader and by the other, and the answers where the two part."""
    grader, other = compared["grader"], compared["other"]
    lines = [f"| method | {grader} (the study's) | {other} |", "|---|---:|---:|"]
    lines += [f"| {m} | {100 * a:.1f}% | {100 * b:.1f}% |" for m, (a, b) in compared["accuracy"].items()]
    lines += [
        "",
        f"The two graders part on {_count(len(compared['disagree']), 'answer')}" + (":" if compared["disagree"] else "."),
    ]
    if compared["disagree"]:
        lines += ["", f"| problem | method | answer | gold | {grader} | {other} |", "|---|---|---|---|---|---|"]
        for row in compared["disagree"]:
            ours, theirs = ("right", "wrong") if row["correct"] else ("wrong", "right")
            lines.append(
                f"| {_code(str(row['problem_id']))} | {row['method']} | {_code(row['prediction'])} | {_code(row['gold'])} | {ours} | {theirs} |"
            )
    return lines


def assumptions(study: dict) -> list[str]:
    """Everything a reader needs to rerun the study from the report alone."""
    config, settings, plan = study["config"], study["config"]["settings"], study["config"]["study"]
    method = METHODS[study["method"]["name"]]
    calibration = study.get("calibration") or {}
    grid = study["grid"]
    varied = " × ".join(
        f"{label} ∈ {{{', '.join(f'{v:g}' for v in values)}}}" for label, values in zip(grid["labels"], grid["values"].values())
    )
    own = [(knobs()[name].label or name, settings[name]) for name in own_knobs(method) if name in settings]
    found = [
        f"pair: {config['pair']}",
        f"data: {config['data']} ({config['format']}), prompt style {config['prompt_style']}, "
        f"{'shuffled with seed ' + str(config['shuffle']) if config.get('shuffle') is not None else 'in file order'}",
        f"compared with SD: {study['method']['label']}",
    ]
    if own:
        found.append(f"{method.title}'s own settings: " + ", ".join(f"{label} = {value}" for label, value in own))
    if method.refuses:  # EASD's rule reads τ_H, τ_O and n
        found.append(
            f"τ_H = {settings['tau_h']:g} ({config.get('tau_h_source') or plan.get('tau_h_source', 'not recorded')}), "
            f"τ_O = {settings['tau_o']:g}, n = {settings['top_n']}, k = {settings['k']}, rule {settings.get('rule', 'full')}"
        )
    else:
        found.append(f"k = {settings['k']} (SD's drafts)")
    found += [
        Protocol.of_config(config).line(),
        f"temperature {settings['temperature']:g}, top-p {settings['top_p']:g}, seed {settings['seed']}, "
        f"at most {settings['max_new_tokens']:,} new tokens a problem, signals {settings.get('signals', 'float32')}, "
        f"H of {'the sampling distribution' if settings.get('entropy') == 'sampling' else 'the models at temperature 1'}",
        f"grader: {config.get('grader', 'math-verify')} (easd.lab.problems.is_correct; the option formats compare the letter)",
        f"grid: {varied or 'none'} on the first {len(plan['grid_problems'])} problems; speed on the first "
        f"{len(plan['speed_problems'])}, one row at a time; the rest decoded {plan['batch_size']} rows at a time",
        f"command: {config['command']}",
    ]
    if calibration:
        found.append(
            f"after the fact: the paper's calibration on these problems' own SD runs would pick τ_H = {calibration['tau_h']:g} "
            f"(mean top-5% target entropy {calibration['raw']:.3f} over {calibration['tokens']:,} tokens); "
            "read off the test problems, so not used"
        )
    found.append("versions: " + ", ".join(f"{k} {v}" for k, v in study.get("versions", {}).items()))
    return found


def _figure(value, form: str) -> str:
    return "—" if value is None else form.format(value)


def _cell(cell: dict, interventions: str) -> str:
    """A grid point's accuracy, and its interventions per 1,000 tokens where the method has any (`interventions`: their
    name, "" for none)."""
    if cell["accuracy"] is None:
        return "—"
    rate = f" ({_figure(cell['interventions_per_1k'], '{:.1f}')})" if interventions else ""
    return f"{100 * cell['accuracy']:.0f}%{rate}"


def _code(text: str) -> str:
    """Model output in a markdown table cell: visible whitespace, no pipe or backtick that breaks the table."""
    return text.replace("\n", "↵").replace("|", "\\|").replace("`", "ˋ")
