"""`python -m easd study`: does EASD help on this pair and these problems, at what speed, and how robust is that?

One folder answers what the paper's reviewers asked, from runs made for it (docs/evaluation.md, "study"):

    results.csv, traces/   SD and EASD on every problem, and EASD over the τ_H × τ_O grid on the first
                           --grid-limit of them, each grid point resuming SD's run at its first penalty
                           (easd.method.prefix): the eval folder the app's Evaluation tab and links open
    speed/results.csv      target-only, SD and EASD on the first --speed-limit problems, one row at a time,
                           problem by problem, so their tokens/s compare like with like on this machine
    study.json             every figure of the report, for scripts
    study.md               the report's tables as markdown (docs/ quotes them)
    study.html             the report as one file that opens offline (easd.render.study)
    differences/           the problems where SD and EASD answer differently, each as the one-file export
                           (easd.render.export) opened at the token where the two runs part

Target-only's accuracy: in greedy decoding, SD's text *is* the target's (tests/test_decoding.py proves it for
every k), so the target is run only on the timed problems, its texts compared with SD's there, and SD's rows read
as the target's elsewhere when every one was equal (`--target-runs all` runs it on every problem instead; sampled
runs always do). Each phase appends rows as problems finish, so a stopped study resumes with `--resume`.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlencode

import pandas as pd

from .._version import __version__
from ..errors import EasdError, SettingsError
from ..files import file_stem, writable_folder
from ..method.compare import first_difference
from ..method.pair import ModelPair
from ..method.settings import DecodeSettings
from ..method.spec_metrics import refused
from ..traces import files as trace_io
from .calibrate import nearest_candidate, top_share_mean
from .evaluate import LocalRunner, Variant, WorkItem, run_evaluation, trace_path
from .problems import Problem
from .report import grader_of, graders_compared, paired_row, summary_table
from .results_table import RESULT_COLUMNS, RESUME_KEYS, check_config, check_folder, load_results, read_config
from .stats import spread, wilson

TAU_HS = (1.0, 1.5, 2.0)  # the paper's sensitivity grid (its Figure 4)
TAU_OS = (0.2, 0.4, 0.6, 0.8, 1.0)
POSITION_BINS = 10  # where in the answer a penalty falls: tenths of the run's tokens
TOP_PAIRS = 15  # refused → chosen pairs listed
SPEED_REPEATS = 3  # as bench's default: a median, and a range that shows a busy machine
# A method's tokens/s over repetitions differing by more than this share of its median says the machine was busy: on
# a quiet one they agree within a few percent (bench's figures, docs/benchmarks.md)
BUSY_SPREAD = 0.10


@dataclass(frozen=True)
class StudyPlan:
    """What a study decodes. The EASD variant runs at `base`'s settings; SD and target-only share all but the rule."""

    problems: list[Problem]
    base: DecodeSettings
    grid_limit: int  # the first this many problems also run the τ_H × τ_O grid
    speed_limit: int  # the first this many problems are timed one row at a time
    tau_hs: tuple[float, ...] = TAU_HS
    tau_os: tuple[float, ...] = TAU_OS
    batch_size: int = 8
    target_everywhere: bool = False  # --target-runs all: target-only on every problem, not only the timed ones
    speed_repeats: int = SPEED_REPEATS  # passes over the timed problems, each method timed once a pass

    def variant(self, method: str) -> Variant:
        return Variant(method, replace(self.base, method=method))

    def grid(self) -> list[Variant]:
        """EASD at every grid point but the study's own (its "easd" rows fill that cell)."""
        return [
            Variant(grid_label(h, o), replace(self.base, method="easd", tau_h=h, tau_o=o))
            for h in self.tau_hs
            for o in self.tau_os
            if (h, o) != (self.base.tau_h, self.base.tau_o)
        ]

    @property
    def greedy(self) -> bool:
        return self.base.temperature == 0


def grid_label(tau_h: float, tau_o: float) -> str:
    return f"easd@{tau_h:g}/{tau_o:g}"  # as `sweep` names its points


def run_study(pair: ModelPair, plan: StudyPlan, out: Path, config: dict, resume: bool, progress: bool = True) -> None:
    """Decode whatever the study still lacks, phase by phase; every phase appends rows as its problems finish."""
    batched = LocalRunner(pair, plan.batch_size)
    sd, easd, target = (plan.variant(m) for m in ("sd", "easd", "target"))
    gridded, rest = plan.problems[: plan.grid_limit], plan.problems[plan.grid_limit :]
    timed = plan.problems[: plan.speed_limit]
    # in this order so that a study stopped early already answers every question, on fewer problems
    _say(f"1/4 SD, EASD and EASD over the τ grid on the first {len(gridded)} problems", progress)
    run_evaluation(batched, gridded, [sd, easd, *plan.grid()], 1, out, config, resume, keep_traces=True, progress=progress)
    repeats = plan.speed_repeats
    _say(f"2/4 speed: target-only, SD and EASD on the first {len(timed)} problems, one row at a time, {repeats} times", progress)
    one_at_a_time = TakingTurns(LocalRunner(pair, 1), timed)
    speed = config | {"samples": repeats}  # a repetition is a sample: seed + r, the same text when greedy
    run_evaluation(one_at_a_time, timed, [target, sd, easd], repeats, out / "speed", speed, resume, progress=progress)
    _say(f"3/4 SD and EASD on the other {len(rest)} problems", progress)
    run_evaluation(batched, rest, [sd, easd], 1, out, config, True, keep_traces=True, progress=progress)
    proof = target_proof(pd.concat([_results(out), _results(out / "speed")]), plan.greedy)
    if plan.target_everywhere or not plan.greedy or not proof["equal"]:
        _say(f"4/4 target-only on all {len(plan.problems)} problems ({proof['why']})", progress)
        run_evaluation(batched, plan.problems, [target], 1, out, config, True, keep_traces=True, progress=progress)
    else:
        _say(f"4/4 target-only: SD's texts ({proof['why']})", progress)


# The speed phase's methods in the two orders it alternates: EASD resumes SD's run, so it always runs right after it
TURNS = (("target", "sd", "easd"), ("sd", "easd", "target"))


@dataclass
class TakingTurns:
    """The speed phase's runner: each repetition a pass over the timed problems, and on each problem target-only first
    and then last, turn by turn, as bench rotates its methods (easd.lab.bench), so that the slow drift of a shared
    machine's speed favours no method and shows in the spread of the repetitions."""

    runner: LocalRunner
    problems: list[Problem]

    def __call__(self, items: list[WorkItem]):
        place = {problem.id: i for i, problem in enumerate(self.problems)}
        turn = lambda item: item.sample * len(self.problems) + place[item.problem.id]  # noqa: E731
        return self.runner([_in_turn(item, turn(item)) for item in sorted(items, key=turn)])


def _in_turn(item: WorkItem, turn: int) -> WorkItem:
    order = TURNS[turn % len(TURNS)]
    return replace(item, variants=tuple(sorted(item.variants, key=lambda v: order.index(v.label))))


def _say(line: str, progress: bool) -> None:
    if progress:
        print(line, file=sys.stderr, flush=True)


# --- the folder -------------------------------------------------------------------------------

# what the report reads from run.json: a study's without any of them is cut short or not a study's
STUDY_NEEDS = (
    *("pair", "data", "format", "command"),
    *(f"study.{key}" for key in ("problems", "tau_hs", "tau_os", "grid_problems", "speed_problems")),
    *(f"settings.{key}" for key in ("tau_h", "tau_o", "top_n", "k", "temperature", "top_p", "seed", "max_new_tokens")),
)


def read_study_config(out: Path) -> dict | None:
    """The run.json of a study's folder; None where the folder holds none, or eval's."""
    config = read_config(out)
    if config is None or "study" not in config:
        return None
    check_config(out, config, STUDY_NEEDS)
    return config


def check_study_folder(out: Path, config: dict, resume: bool) -> None:
    """Before the model loads, one line if --out cannot take this study: a folder this process cannot write, one
    holding other files, eval's, a study made with other settings, or, resumed, one of another plan (`check_plan`)."""
    try:
        writable_folder(out)
    except OSError as err:
        raise SettingsError("--out", f"{out} cannot be the study's folder ({err.strerror}: {err.filename})") from None
    if not (out / "results.csv").exists() and any(out.iterdir()) and not _holds_a_study(out):
        raise SettingsError("--out", f"{out} holds other files: give a new or empty folder, or a study's to --resume")
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
    and --speed-limit may grow; --offset stays, and --speed-repeats once speed/ holds timings."""
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
        before, after = was[key], now[key]
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
    path = folder / "results.csv"
    return load_results(path) if path.exists() else pd.DataFrame(columns=RESULT_COLUMNS)


def analyse(out: Path, app_url: str = "http://127.0.0.1:7860/") -> dict:
    """Every figure of the report, from the folder alone (a resumed or copied folder reads the same)."""
    config = read_study_config(out)
    if config is None:
        raise EasdError(f"--out: {out} holds no study: run `python -m easd study` with this --out first")
    results, speed = _results(out), _results(out / "speed")
    proof = target_proof(pd.concat([results, speed]), float(config["settings"]["temperature"]) == 0)
    runs = {method: _traces(out, results, method) for method in ("sd", "easd")}  # each trace file read once
    accuracy = _accuracy(results, proof, config)
    timed = _speed(speed, results)
    study = {
        "folder": str(out),
        "config": config,
        "accuracy": accuracy,
        "paired": _paired(results),
        "target": proof,
        "speed": timed,
        "speed_note": speed_note(timed),
        "grid": _grid(results, config),
        "fires": where_it_fires(runs["easd"]),
        "differences": differences(out, results, runs, app_url),
        "graders": graders_compared(results[results["method"].isin(("target", "sd", "easd"))], config["format"], grader_of(out)),
        "calibration": _after_the_fact(runs["sd"]),
        "versions": versions(),
    }
    return {**study, "verdict": verdict(study), "assumptions": assumptions(study)}


def _accuracy(results: pd.DataFrame, proof: dict, config: dict) -> list[dict]:
    rows = []
    problems = results[results["method"] == "sd"]["problem_id"].nunique()
    for method in ("target", "sd", "easd"):
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


def _paired(results: pd.DataFrame) -> dict:
    """EASD against SD on the same problems: the discordant counts, exact McNemar, a bootstrap interval, and how
    often the texts and the answers differ at all."""
    row = paired_row(results, "easd", "sd")
    key = ["problem_id", "sample"]
    both = results[results["method"] == "easd"].merge(results[results["method"] == "sd"], on=key, suffixes=("_easd", "_sd"))
    row["texts_differ"] = int((both["text_easd"] != both["text_sd"]).sum())
    row["answers_differ"] = int((both["prediction_easd"].astype(str) != both["prediction_sd"].astype(str)).sum())
    return {
        k: (None if isinstance(v, float) and math.isnan(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()
    }


SPEED_METHODS = ("target", "sd", "easd")


def _speed(speed: pd.DataFrame, results: pd.DataFrame) -> list[dict]:
    """tokens/s timed one row at a time, as the median over repetitions with its range, and the speed-up over
    target-only as the median of each repetition's own (its rows ran in the same minutes); the acceptance figures over
    every problem (they do not depend on the clock)."""
    every = summary_table(results).set_index("method") if len(results) else pd.DataFrame()
    rates = _repetitions(speed)
    rows = []
    for method in SPEED_METHODS:
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
                "tokens_per_s": rate.median,
                "tokens_per_s_range": [rate.low, rate.high],
                "spread": (rate.high - rate.low) / rate.median if rate.median else None,
                "speedup": ratio.median if ratio else None,
                "speedup_range": [ratio.low, ratio.high] if ratio else None,
                "mean_acceptance_length": _number(every, method, "mean_acceptance_length"),
                "draft_acceptance_rate": _number(every, method, "draft_acceptance_rate"),
                "interventions_per_1k": _number(every, method, "interventions_per_1k"),
            }
        )
    return rows


def _repetitions(speed: pd.DataFrame) -> dict[str, list[float]]:
    """Each method's tokens/s in each repetition (a sample of speed/results.csv), over the problems every method ran in
    it, so that like is timed with like in a repetition a stopped study left unfinished."""
    rates = {method: [] for method in SPEED_METHODS}
    for _, rows in speed.groupby("sample"):
        ran = [rows[rows["method"] == method] for method in SPEED_METHODS]
        common = set.intersection(*(set(group["problem_id"]) for group in ran))
        timed = [group[group["problem_id"].isin(common)] for group in ran]
        if common and all(group["seconds"].sum() > 0 for group in timed):
            for method, group in zip(SPEED_METHODS, timed):
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


def _grid(results: pd.DataFrame, config: dict) -> dict:
    """Accuracy and penalties per 1,000 tokens at each grid point, over the problems every point ran."""
    study = config["study"]
    labels = {(h, o): grid_label(h, o) for h in study["tau_hs"] for o in study["tau_os"]}
    labels[(config["settings"]["tau_h"], config["settings"]["tau_o"])] = "easd"
    gridded = set(study["grid_problems"])
    rows = results[results["problem_id"].isin(gridded)]
    cells = {}
    for (h, o), label in labels.items():
        group = rows[rows["method"] == label]
        tokens = group["new_tokens"].sum()
        cells[f"{h:g}/{o:g}"] = {
            "tau_h": h,
            "tau_o": o,
            "runs": len(group),
            "accuracy": float(group["correct"].mean()) if len(group) else None,
            "penalties_per_1k": float(1000 * group["penalized"].sum() / tokens) if tokens else None,
        }
    sd = rows[rows["method"] == "sd"]
    return {
        "problems": len(gridded),
        "tau_hs": study["tau_hs"],
        "tau_os": study["tau_os"],
        "cells": cells,
        "sd_accuracy": float(sd["correct"].mean()) if len(sd) else None,
    }


# --- where the penalty fires --------------------------------------------------------------------

TOKEN_KINDS = ("digit", "operator", "word start", "word piece", "punctuation", "whitespace", "other")
OPERATORS = set("+-*/=×÷^<>%±·√")


def token_kind(text: str) -> str:
    """What kind of token the penalty refused: a digit, an operator, the start of a word (a space, then letters),
    a piece of a word (letters with no space), punctuation, whitespace, or other."""
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


def where_it_fires(traces: dict) -> dict:
    """EASD's penalties by where they fall in the answer (tenths of its tokens), by the kind of token refused, and
    the most frequent refused → chosen pairs."""
    positions, kinds, pairs, total = [0] * POSITION_BINS, Counter(), Counter(), 0
    for trace in traces.values():
        length = len(trace.records)
        for record in trace.records:
            if not refused(record):
                continue
            total += 1
            positions[min(POSITION_BINS - 1, POSITION_BINS * record.position // max(1, length))] += 1
            kinds[token_kind(record.draft_token_text or "")] += 1
            pairs[(record.draft_token_text or "", record.token_text)] += 1
    return {
        "penalties": total,
        "by_tenth": positions,
        "by_kind": {kind: kinds[kind] for kind in TOKEN_KINDS},
        "pairs": [{"refused": a, "chosen": b, "count": n} for (a, b), n in pairs.most_common(TOP_PAIRS)],
    }


def differences(out: Path, results: pd.DataFrame, runs: dict[str, dict], app_url: str) -> list[dict]:
    """Each problem where SD and EASD answer differently: both answers, the gold one, the token where the runs part,
    a link that opens the two runs there in the app (`python app.py --eval-dir FOLDER`), and the one-file export."""
    sd, easd = runs["sd"], runs["easd"]
    rows = results[results["sample"] == 0]
    answers = {m: rows[rows["method"] == m].set_index("problem_id") for m in ("sd", "easd")}
    found = []
    for problem in answers["easd"].index.intersection(answers["sd"].index):
        a, b = answers["sd"].loc[problem], answers["easd"].loc[problem]
        if str(a["prediction"]) == str(b["prediction"]):
            continue
        token = first_difference(sd.get(problem), easd.get(problem))
        query = {"eval": out.resolve().name, "problem": problem, "sample": 0, "left": "sd", "right": "easd", "lane": "right"}
        found.append(
            {
                "problem_id": str(problem),
                "gold": str(a["gold"]),
                "sd": str(a["prediction"]),
                "sd_correct": bool(a["correct"]),
                "easd": str(b["prediction"]),
                "easd_correct": bool(b["correct"]),
                "token": token,
                "app_link": app_url + "?" + urlencode(query | ({"token": token} if token is not None else {})),
                # a file of its own (5 MB, Plotly inlined) only where one method was right and the other wrong
                "file": f"differences/{file_stem(str(problem))}.html" + (f"#right-{token}" if token is not None else "")
                if bool(a["correct"]) != bool(b["correct"])
                else None,
            }
        )
    return sorted(found, key=lambda d: (d["sd_correct"] == d["easd_correct"], d["problem_id"]))  # verdicts that part first


def write_differences(out: Path, found: list[dict]) -> None:
    """The one-file export of SD against EASD for every problem in `found` that names a file (only its two traces
    are read)."""
    from ..render.export import comparison_file

    folder = out / "differences"
    folder.mkdir(exist_ok=True)
    for difference in found:
        problem = difference["problem_id"]
        paths = [trace_path(out / "traces", {"problem_id": problem, "method": m, "sample": 0}) for m in ("sd", "easd")]
        if difference["file"] and all(path.exists() for path in paths):
            sd, easd = (trace_io.read_json(path, capped=False)[0] for path in paths)
            page = comparison_file({"left": sd, "right": easd})
            (folder / f"{file_stem(problem)}.html").write_text(page, encoding="utf-8")


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

    write_differences(out, study["differences"])
    write_text_whole(out / "study.json", json.dumps(study, indent=1, ensure_ascii=False, default=_plain))
    write_text_whole(out / "study.md", markdown(study))
    write_text_whole(out / "study.html", study_file(study), errors="replace")


def _plain(value):
    return value.item() if hasattr(value, "item") else str(value)


def verdict(study: dict) -> str:
    """The study's answer in one sentence: EASD against SD, the difference with its interval and McNemar's p."""
    p = study["paired"]
    if not p.get("pairs"):
        return "No problem has both an SD and an EASD run yet."
    planned = study["config"]["study"].get("problems", p["pairs"])
    unfinished = f" (unfinished: {p['pairs']} of {planned} problems so far; rerun with --resume)" if p["pairs"] < planned else ""
    difference, low, high = p["difference"], p["boot95_low"], p["boot95_high"]
    if low > 0:
        word = "helped"
    elif high < 0:
        word = "hurt"
    else:
        word = "did not differ from SD by more than these problems' noise"
    return (
        f"On {_count(p['pairs'], 'problem')}, EASD {word}: {100 * p['accuracy_a']:.1f}% correct against SD's "
        f"{100 * p['accuracy_b']:.1f}%, a difference of {100 * difference:+.1f} points (paired bootstrap 95%: "
        f"{100 * low:+.1f} to {100 * high:+.1f}; exact McNemar p = {p['mcnemar_p']:.3g}: only EASD was right on "
        f"{_count(p['only_a'], 'problem')}, only SD on {p['only_b']}){unfinished}."
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def markdown(study: dict) -> str:
    """The report's tables as markdown."""
    from ..render.study import ranged

    config, settings = study["config"], study["config"]["settings"]
    lines = [f"# Does EASD help? {config['pair']} on {Path(config['data']).name}", "", study["verdict"], ""]
    lines += ["## Accuracy", "", "| method | problems | correct | accuracy (95% Wilson) | from |", "|---|---:|---:|---|---|"]
    for row in study["accuracy"]:
        low, high = row["ci95"]
        label = (
            f"easd (k = {settings['k']}, τ_H = {settings['tau_h']:g}, τ_O = {settings['tau_o']:g})"
            if row["method"] == "easd"
            else row["method"]
        )
        lines.append(
            f"| {label} | {row['problems']} | {row['correct']} | {100 * row['accuracy']:.1f}% ({100 * low:.1f}–{100 * high:.1f}) | {row['source']} |"
        )
    p, target = study["paired"], study["target"]
    lines += [
        "",
        f"EASD's text differs from SD's on {p.get('texts_differ', 0)} problems, its answer on {p.get('answers_differ', 0)}. "
        f"Target-only: {target['why']}.",
        "",
        "## Speed",
        "",
        study["speed_note"] + " EASD's time up to its first penalty is SD's (it resumes SD's run: the same passes); "
        "acceptance over every problem.",
        "",
        "| method | problems timed | tokens | tokens/s | speed-up over target-only | mean acceptance length | draft acceptance rate | penalties / 1k tokens |",
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
            _figure(row["interventions_per_1k"], "{:.1f}") if row["method"] == "easd" else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    grid = study["grid"]
    lines += ["", f"## Sensitivity: accuracy (penalties per 1,000 tokens) on {grid['problems']} problems", ""]
    lines += ["| τ_H \\ τ_O | " + " | ".join(f"{o:g}" for o in grid["tau_os"]) + " |", "|---|" + "---:|" * len(grid["tau_os"])]
    for h in grid["tau_hs"]:
        cells = [grid["cells"][f"{h:g}/{o:g}"] for o in grid["tau_os"]]
        lines.append(f"| {h:g} | " + " | ".join(_cell(c) for c in cells) + " |")
    lines += ["", f"SD on the same problems: {_figure(grid['sd_accuracy'], '{:.0%}')}.", ""]
    fires = study["fires"]
    lines += ["## Where the penalty fires", "", f"{fires['penalties']} penalties in EASD's runs.", ""]
    lines += [
        "| tenth of the answer | " + " | ".join(str(i + 1) for i in range(POSITION_BINS)) + " |",
        "|---|" + "---:|" * POSITION_BINS,
    ]
    lines += ["| penalties | " + " | ".join(str(n) for n in fires["by_tenth"]) + " |", ""]
    lines += ["| kind of token refused | " + " | ".join(fires["by_kind"]) + " |", "|---|" + "---:|" * len(fires["by_kind"])]
    lines += ["| penalties | " + " | ".join(str(n) for n in fires["by_kind"].values()) + " |", ""]
    if fires["pairs"]:
        lines += ["| refused | chosen | times |", "|---|---|---:|"]
        lines += [f"| `{_code(a['refused'])}` | `{_code(a['chosen'])}` | {a['count']} |" for a in fires["pairs"]]
        lines.append("")
    lines += ["## Where SD and EASD answer differently", ""]
    if study["differences"]:
        lines += ["| problem | gold | SD | EASD | parts at token |", "|---|---|---|---|---:|"]
        for d in study["differences"]:
            mark = lambda ok: "✓" if ok else "✗"  # noqa: E731
            lines.append(
                f"| {_code(d['problem_id'])} | {_code(d['gold'])} | {_code(d['sd'])} {mark(d['sd_correct'])} | "
                f"{_code(d['easd'])} {mark(d['easd_correct'])} | {d['token'] if d['token'] is not None else '—'} |"
            )
    else:
        lines.append("None.")
    lines += ["", "## Graders", "", *graders_markdown(study["graders"])]
    lines += ["", "## What was assumed", ""] + [f"- {line}" for line in study["assumptions"]]
    return "\n".join(lines) + "\n"


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
    calibration = study.get("calibration") or {}
    found = [
        f"pair: {config['pair']}",
        f"data: {config['data']} ({config['format']}), prompt style {config['prompt_style']}, "
        f"{'shuffled with seed ' + str(config['shuffle']) if config.get('shuffle') is not None else 'in file order'}",
        f"τ_H = {settings['tau_h']:g} ({config.get('tau_h_source') or plan.get('tau_h_source', 'not recorded')}), τ_O = {settings['tau_o']:g}, n = {settings['top_n']}, "
        f"k = {settings['k']}, rule {settings.get('rule', 'full')}",
        f"temperature {settings['temperature']:g}, top-p {settings['top_p']:g}, seed {settings['seed']}, "
        f"at most {settings['max_new_tokens']:,} new tokens a problem, signals {settings.get('signals', 'float32')}, "
        f"H of {'the sampling distribution' if settings.get('entropy') == 'sampling' else 'the models at temperature 1'}",
        f"grader: {config.get('grader', 'math-verify')} (easd.lab.problems.is_correct; the option formats compare the letter)",
        f"grid: τ_H ∈ {{{', '.join(f'{h:g}' for h in plan['tau_hs'])}}} × τ_O ∈ {{{', '.join(f'{o:g}' for o in plan['tau_os'])}}} "
        f"on the first {len(plan['grid_problems'])} problems; speed on the first {len(plan['speed_problems'])}, one row at a time; "
        f"the rest decoded {plan['batch_size']} rows at a time",
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


def _cell(cell: dict) -> str:
    if cell["accuracy"] is None:
        return "—"
    return f"{100 * cell['accuracy']:.0f}% ({_figure(cell['penalties_per_1k'], '{:.1f}')})"


def _code(text: str) -> str:
    """Model output in a markdown table cell: visible whitespace, no pipe or backtick that breaks the table."""
    return text.replace("\n", "↵").replace("|", "\\|").replace("`", "ˋ")
