"""From results.csv to summary.csv, paired.csv and report.html (and the sweep's tables)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import EasdError
from ...method.methods import METHODS
from ...method.references import PROPOSED, REFERENCE, SPEED_REFERENCE
from ...render.grid import grid_figures
from ..grading.answers import GRADERS, is_correct, same_answer
from ..runs.evaluate import GRIDS
from ..runs.protocol import Protocol
from ..runs.results_table import load_results, read_config
from .figures import accuracy_figure, fragility_figure, paired_figure, speed_figure, write_html
from .paper import benchmark_name, paper_table
from .stats import EFFECT_POINTS, detectable_difference, majority, mcnemar_exact, mcnemar_problems, paired_bootstrap, wilson

# --- per method -------------------------------------------------------------------------------

SUMMARY_COLUMNS = [
    "method",
    "runs",
    "problems",
    "correct",
    "accuracy",
    "ci95_low",
    "ci95_high",
    "mean_tokens",
    "tokens_per_s",
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "penalized_token_rate",
    "interventions_per_1k",
    "penalties",
    "fragile_share",
    "robust_runs",
    "robust_accuracy",
    "target_calls_per_token",
    "cut_off",
    "saved_seconds",
]


def summary_table(results: pd.DataFrame, format: str = "gsm8k", grader: str = "math-verify") -> pd.DataFrame:
    """One row per method; with several samples, also their mean, std and majority-vote accuracy (`grader` marks the
    voted answer, as it marked results.csv's `correct`)."""
    rows = [_summary_row(method, group, format, grader) for method, group in results.groupby("method", sort=False)]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=SUMMARY_COLUMNS)


def _summary_row(method: str, group: pd.DataFrame, format: str, grader: str) -> dict:
    correct = int(group["correct"].sum())
    accuracy, low, high = wilson(correct, len(group))
    tokens, seconds = group["new_tokens"].sum(), group["seconds"].sum()
    drafts, draft_tokens, accepted = (group[c].sum(min_count=1) for c in ("num_drafts", "num_draft_tokens", "accepted"))
    row = {
        "method": method,
        "runs": len(group),
        "problems": group["problem_id"].nunique(),
        "correct": correct,
        "accuracy": accuracy,
        "ci95_low": low,
        "ci95_high": high,
        "mean_tokens": group["new_tokens"].mean(),
        "tokens_per_s": tokens / seconds if seconds else np.nan,
        # vLLM's figures (easd.method.spec_metrics), over every draft of the method's runs; unknown (NaN) for results
        # written before they were counted. The counts let the paper's table pool several benchmarks' drafts.
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "mean_acceptance_length": 1 + accepted / drafts if drafts > 0 else np.nan,
        "draft_acceptance_rate": accepted / draft_tokens if draft_tokens > 0 else np.nan,
        "penalized_token_rate": group["penalized"].sum() / tokens if tokens else np.nan,
        # EASD's penalties or MTI's guided tokens per 1,000 new tokens (unknown for results written without the column)
        "interventions_per_1k": 1000 * group["interventions"].sum() / tokens
        if tokens and group["interventions"].notna().all()
        else np.nan,
        **_fragility(group),
        "target_calls_per_token": group["target_calls"].sum() / tokens if tokens else np.nan,
        "cut_off": float((group["stop_reason"] != "eos").mean()),
        "saved_seconds": group["saved_seconds"].sum(),
    }
    if group["sample"].nunique() > 1:
        per_sample = group.groupby("sample")["correct"].mean()
        row.update(
            sample_accuracy_mean=per_sample.mean(),
            sample_accuracy_std=per_sample.std(ddof=1),
            vote_accuracy=_vote_accuracy(group, format, grader),
        )
    return row


def _fragility(group: pd.DataFrame) -> dict:
    """Penalties, the share of them a rounding step could have flipped, and accuracy over the runs whose
    every penalty was robust (docs/method.md, "Fragile decisions"). Unknown (NaN) for results written without it."""
    penalties = int(group["penalized"].sum())
    known = group["fragile_penalties"].notna()
    if not known.all():
        return {"penalties": penalties, "fragile_share": np.nan, "robust_runs": np.nan, "robust_accuracy": np.nan}
    robust = group[group["fragile_penalties"] == 0]
    return {
        "penalties": penalties,
        "fragile_share": group["fragile_penalties"].sum() / penalties if penalties else np.nan,
        "robust_runs": len(robust),
        "robust_accuracy": robust["correct"].mean() if len(robust) else np.nan,
    }


def _vote_accuracy(group: pd.DataFrame, format: str, grader: str) -> float:
    """Majority vote over each problem's samples, answers that the grader takes for one counted together, in every
    format (`same_answer`)."""
    votes = []
    for _, problem in group.groupby("problem_id"):
        answers = [a if isinstance(a, str) and a.strip() else None for a in problem["prediction"]]
        winner = majority(answers, lambda a, b: same_answer(a, b, format, grader))
        votes.append(is_correct(winner, problem["gold"].iloc[0], format, grader))
    return float(np.mean(votes))


# --- paired comparisons -------------------------------------------------------------------------


def _method_of(label: str):
    """The method of a results row's label (easd, easd:no_overlap, easd@1.5/0.6, beam:4, mti@1/1.5), None for none."""
    return METHODS.get(str(label).split(":")[0].split("@")[0])


def paired_table(results: pd.DataFrame) -> pd.DataFrame:
    """Every method of the run but the references (SD's and target-only's variants themselves), each variant against
    SD and against target-only, on the (problem, sample) pairs both ran: EASD, MTI and RSD, and the siblings that
    change no token on purpose (SMC-SD, SpecGuard, draft-only, beam search), whose accuracy is compared all the same."""
    methods = list(dict.fromkeys(results["method"]))
    references = [m for m in (REFERENCE, SPEED_REFERENCE) if m in methods]
    rows = []
    for a in [m for m in methods if _method_of(m) is not None and m not in (REFERENCE, SPEED_REFERENCE)]:
        for b in references:
            rows.append(paired_row(results, a, b))
    return pd.DataFrame(
        rows,
        columns=[
            "a",
            "b",
            "pairs",
            "both_right",
            "only_a",
            "only_b",
            "both_wrong",
            "accuracy_a",
            "accuracy_b",
            "difference",
            "mcnemar_p",
            "boot95_low",
            "boot95_high",
            "detectable",
            "problems_for_effect",
        ],
    )


def paired_row(results: pd.DataFrame, a: str, b: str) -> dict:
    """`a` against `b` on the (problem, sample) pairs both ran: the discordant counts, exact McNemar, a bootstrap, and
    McNemar's power at the share ψ where they parted (80%, α = 0.05, two-sided): `detectable`, the smallest difference
    (a share) these pairs could detect, and `problems_for_effect`, the pairs a gain of EFFECT_POINTS would need; each
    empty where none can (no disagreement seen, or too few pairs even for one where every disagreement goes one way)."""
    key = ["problem_id", "sample"]
    both = results[results["method"] == a][key + ["correct"]].merge(
        results[results["method"] == b][key + ["correct"]], on=key, suffixes=("_a", "_b")
    )
    right_a, right_b = both["correct_a"].to_numpy(), both["correct_b"].to_numpy()
    only_a, only_b = int((right_a & ~right_b).sum()), int((~right_a & right_b).sum())
    low, high = paired_bootstrap(right_a, right_b)
    discordant = (only_a + only_b) / len(both) if len(both) else 0.0
    return {
        "a": a,
        "b": b,
        "pairs": len(both),
        "both_right": int((right_a & right_b).sum()),
        "only_a": only_a,
        "only_b": only_b,
        "both_wrong": int((~right_a & ~right_b).sum()),
        "accuracy_a": right_a.mean() if len(both) else np.nan,
        "accuracy_b": right_b.mean() if len(both) else np.nan,
        "difference": (right_a.mean() - right_b.mean()) if len(both) else np.nan,
        "mcnemar_p": mcnemar_exact(only_a, only_b),
        "boot95_low": low,
        "boot95_high": high,
        "detectable": _or_nan(detectable_difference(discordant, len(both))),
        "problems_for_effect": _or_nan(mcnemar_problems(discordant, EFFECT_POINTS / 100)),
    }


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else value


# --- writing ------------------------------------------------------------------------------------


def write_reports(out: Path, format: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    results = load_results(out / "results.csv")
    summary, paired = summary_table(results, format, grader_of(out)), paired_table(results)
    summary.to_csv(out / "summary.csv", index=False, float_format="%.4f")
    name = benchmark_name(out)
    protocol = protocol_of(out)
    said = f"\n\n{protocol.line()}" if protocol is not None else ""
    (out / "paper.md").write_text(paper_table({name: summary}, {name: paired}) + said + "\n", encoding="utf-8")
    paired.to_csv(out / "paired.csv", index=False, float_format="%.4f")
    figures = [accuracy_figure(summary), speed_figure(summary), fragility_figure(summary), paired_figure(paired)]
    write_html(out / "report.html", "EASD evaluation", figures)
    return summary, paired


def protocol_of(out: Path) -> Protocol | None:
    """The sampling protocol an eval folder's run.json records, or its settings say; None where it holds neither."""
    try:
        config = read_config(out)
    except EasdError:
        return None
    return Protocol.of_config(config) if config else None


def grader_of(out: Path) -> str:
    """The grader whose verdicts a folder's `correct` column holds (run.json; a folder made before `--grader`: ours)."""
    config = out / "run.json"
    return json.loads(config.read_text(encoding="utf-8")).get("grader", GRADERS[0]) if config.exists() else GRADERS[0]


def graders_compared(results: pd.DataFrame, format: str, grader: str) -> dict:
    """The other grader's verdict on every row beside `grader`'s (results.csv's `correct`): each method's accuracy by
    both, and the rows where they part."""
    other = next(g for g in GRADERS if g != grader)
    theirs = [
        is_correct(p if p.strip() else None, gold, format, other) for p, gold in zip(results["prediction"], results["gold"])
    ]
    both = results.assign(other=theirs)
    accuracy = {m: (float(g["correct"].mean()), float(g["other"].mean())) for m, g in both.groupby("method", sort=False)}
    parted = both[both["correct"] != both["other"]]
    columns = ["problem_id", "method", "sample", "prediction", "gold", "correct"]
    return {"grader": grader, "other": other, "accuracy": accuracy, "disagree": parted[columns].to_dict("records")}


def grader_lines(compared: dict, shown: int = 10) -> list[str]:
    """The comparison as the command line prints it: each method's accuracy by both graders, then where they part."""
    grader, other, parted = compared["grader"], compared["other"], compared["disagree"]
    lines = [
        f"graded by {grader}; by {other} instead: "
        + ", ".join(f"{m} {a:.1%} → {b:.1%}" for m, (a, b) in compared["accuracy"].items())
    ]
    lines.append(f"the two graders part on {len(parted)} of the answers" + (":" if parted else ""))
    for row in parted[:shown]:
        verdicts = f"{grader} {'right' if row['correct'] else 'wrong'}, {other} {'wrong' if row['correct'] else 'right'}"
        lines.append(
            f"  {row['problem_id']} {row['method']} s{row['sample']}: {row['prediction'][:40]!r} vs gold {row['gold'][:40]!r}: {verdicts}"
        )
    if len(parted) > shown:
        lines.append(f"  … and {len(parted) - shown} more")
    return lines


# --- the sweep ----------------------------------------------------------------------------------


def write_sweep(out: Path, format: str) -> pd.DataFrame:
    """sweep.csv (one row per point of the grid: its settings' values, accuracy, interventions, speed) and sweep.html:
    accuracy over the grid's first setting, a line per value of its second, with the reference runs (SD,
    target-only) as lines; over a grid of two settings (EASD's τ_H × τ_O) also heatmaps of accuracy and interventions
    (easd.render.grid, which the study draws its grid with too).
    A point's values are those its rows ran with where results.csv holds them (τ_H, τ_O), else its label's."""
    results = load_results(out / "results.csv")
    summary = summary_table(results, format, grader_of(out))
    method, columns = next(
        ((m, c) for m, c in GRIDS.items() if summary["method"].str.startswith(f"{m}@").any()), (PROPOSED, GRIDS[PROPOSED])
    )
    cells = summary[summary["method"].str.startswith(f"{method}@")].copy()
    labelled = cells["method"].str.removeprefix(f"{method}@").str.split("/", expand=True)
    ran = results.groupby("method", sort=False).first()  # each point ran at one value of each setting
    for i, column in enumerate(columns):  # results.csv holds τ_H and τ_O as they ran; the others, the point's label
        cells[column] = cells["method"].map(ran[column]) if column in ran else labelled[i].astype(float)
    kept = [*columns, "runs", "accuracy", "ci95_low", "ci95_high", "penalized_token_rate", "interventions_per_1k", "tokens_per_s"]
    cells = cells[kept].sort_values(list(columns[::-1]))
    cells.to_csv(out / "sweep.csv", index=False, float_format="%.4f")
    references = {
        m: summary.loc[summary["method"] == m, "accuracy"].iloc[0]
        for m in (REFERENCE, SPEED_REFERENCE)
        if m in set(summary["method"])
    }
    title = METHODS[method].title
    write_html(out / "sweep.html", f"{title} threshold sweep", grid_figures(cells, title, columns, references))
    return cells
