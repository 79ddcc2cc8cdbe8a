"""What a study found, from its folder alone (`analyse`): accuracy with Wilson intervals, the paired test against SD,
speed with its spread, the grid, the verdict in one sentence, and what was assumed."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pandas as pd

from ...errors import EasdError
from ...method.methods import METHODS, Method, knobs, lookup, make_settings, own_knobs
from ...method.references import REFERENCE, SPEED_REFERENCE
from ..reports.report import grader_of, graders_compared, paired_row, summary_table
from ..reports.stats import EFFECT_POINTS, spread, wilson
from ..runs.evaluate import grid_label
from ..runs.protocol import Protocol
from ..runs.results_table import versions
from .plan import counted, read_study_config, results_of, target_proof
from .power import power, power_lines, power_words
from .where import after_the_fact, differences, traces_of, where_it_intervenes

# A method's tokens/s over repetitions differing by more than this share of its median says the machine was busy: on
# a quiet one they agree within a few percent (bench's figures, docs/benchmarks.md)
BUSY_SPREAD = 0.10


def analyse(out: Path, app_url: str = "http://127.0.0.1:7860/", effect: float = EFFECT_POINTS) -> dict:
    """Every figure of the report, from the folder alone (a resumed or copied folder reads the same); `effect`: the
    gain in points the report says how many problems it would take to detect."""
    config = read_study_config(out)
    if config is None:
        raise EasdError(f"--out: {out} holds no study: run `python -m easd study` with this --out first")
    method = METHODS[config["study"]["method"]]
    name = method.name
    results, speed = results_of(out), results_of(out / "speed")
    proof = target_proof(pd.concat([results, speed]), float(config["settings"]["temperature"]) == 0)
    runs = {m: traces_of(out, results, m) for m in (REFERENCE, name)}  # each trace file read once
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
        "graders": graders_compared(
            results[results["method"].isin((SPEED_REFERENCE, REFERENCE, name))], config["format"], grader_of(out)
        ),
        # the paper's τ_H calibration, where the method's grid sweeps τ_H (EASD's): it would pick one of them
        "calibration": after_the_fact(runs[REFERENCE]) if "tau_h" in method.grid else {},
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
    problems = results[results["method"] == REFERENCE]["problem_id"].nunique()
    for method in (SPEED_REFERENCE, REFERENCE, name):
        group = results[results["method"] == method]
        source = "run"
        if method == SPEED_REFERENCE and group["problem_id"].nunique() < problems:
            if not proof["equal"]:
                continue  # still to run (the study's phase 3)
            group, source = results[results["method"] == REFERENCE], "SD's texts"
        correct, runs = int(group["correct"].sum()), len(group)
        accuracy, low, high = wilson(correct, runs)
        rows.append(
            {"method": method, "problems": runs, "correct": correct, "accuracy": accuracy, "ci95": [low, high], "source": source}
        )
    return rows


def _paired(results: pd.DataFrame, name: str) -> dict:
    """The method against SD on the same problems: the discordant counts, exact McNemar, a bootstrap interval, and
    how often the texts and the answers differ at all."""
    row = paired_row(results, name, REFERENCE)
    key = ["problem_id", "sample"]
    both = results[results["method"] == name].merge(results[results["method"] == REFERENCE], on=key, suffixes=("_a", "_sd"))
    row["texts_differ"] = int((both["text_a"] != both["text_sd"]).sum())
    row["answers_differ"] = int((both["prediction_a"].astype(str) != both["prediction_sd"].astype(str)).sum())
    return {
        k: (None if isinstance(v, float) and math.isnan(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()
    }


def _speed(speed: pd.DataFrame, results: pd.DataFrame, name: str) -> list[dict]:
    """tokens/s timed one row at a time, as the median over repetitions with its range, and the speed-up over
    target-only as the median of each repetition's own (its rows ran in the same minutes); the acceptance figures over
    every problem (they do not depend on the clock)."""
    every = summary_table(results).set_index("method") if len(results) else pd.DataFrame()
    methods = (SPEED_REFERENCE, REFERENCE, name)
    rates = _repetitions(speed, methods)
    rows = []
    for method in methods:
        if not rates[method]:
            continue
        timed = speed[speed["method"] == method]
        rate = spread(rates[method])
        speedups = [a / b for a, b in zip(rates[method], rates[SPEED_REFERENCE])]
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
        f"Each method timed {counted(repeats, 'time')} over the same problems, one row at a time in one process, "
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
    sd = rows[rows["method"] == REFERENCE]
    known = knobs()
    return {
        "problems": len(gridded),
        "settings": names,
        "labels": [known[name].label or name if name in known else name for name in names],
        "values": {name: study["grid"][name] for name in names},
        "cells": cells,
        "sd_accuracy": float(sd["correct"].mean()) if len(sd) else None,
    }


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
        f"On {counted(p['pairs'], 'problem')}, {title} vs SD: {word}: {100 * p['accuracy_a']:.1f}% correct against SD's "
        f"{100 * p['accuracy_b']:.1f}%, a difference of {100 * difference:+.1f} points (paired bootstrap 95%: "
        f"{100 * low:+.1f} to {100 * high:+.1f}; exact McNemar p = {p['mcnemar_p']:.3g}: only {title} was right on "
        f"{counted(p['only_a'], 'problem')}, only SD on {p['only_b']}){unfinished}"
        + "".join(f"; {words}" for words in power_words(study))
        + "."
    )


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
        f"grader: {config.get('grader', 'math-verify')} (easd.lab.grading.answers.is_correct; the option formats compare the letter)",
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
