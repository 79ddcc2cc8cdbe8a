"""From results.csv to summary.csv, paired.csv and report.html (and the sweep's tables)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...errors import EasdError
from ...method.methods import METHODS
from ...method.references import PROPOSED, REFERENCE, SPEED_REFERENCE
from ...render.grid import grid_figures
from ..grading.answers import GRADERS, is_correct, same_answer
from ..runs.evaluate import GRIDS
from ..runs.protocol import Protocol
from ..runs.results_table import load_results, read_config
from .stats import majority, mcnemar_exact, paired_bootstrap, wilson

# --- per method -------------------------------------------------------------------------------


CUT_OFF_WARNING = 0.01  # the share of runs cut off by the budget past which the paper's table warns: one in 100 moves
# accuracy by a point, the size of the differences the paper reports

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
        ],
    )


def paired_row(results: pd.DataFrame, a: str, b: str) -> dict:
    """`a` against `b` on the (problem, sample) pairs both ran: the discordant counts, exact McNemar, a bootstrap."""
    key = ["problem_id", "sample"]
    both = results[results["method"] == a][key + ["correct"]].merge(
        results[results["method"] == b][key + ["correct"]], on=key, suffixes=("_a", "_b")
    )
    right_a, right_b = both["correct_a"].to_numpy(), both["correct_b"].to_numpy()
    only_a, only_b = int((right_a & ~right_b).sum()), int((~right_a & right_b).sum())
    low, high = paired_bootstrap(right_a, right_b)
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
    }


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


def benchmark_name(out: Path) -> str:
    """An eval folder's benchmark, as a column of the paper's table: its data file's name (run.json), else the folder's."""
    config = out / "run.json"
    data = json.loads(config.read_text(encoding="utf-8")).get("data") if config.exists() else None
    return Path(data).stem if data else out.name


def paper_table(summaries: dict[str, pd.DataFrame], paired: dict[str, pd.DataFrame] | None = None) -> str:
    """The paper's main table as markdown: one row per method; accuracy per benchmark and their average, tokens/s,
    the mean acceptance length (vLLM's, over every benchmark's drafts; "—" for a method that does not draft),
    interventions per 1,000 tokens and target passes per token over all of them (each benchmark's summary.csv, by
    benchmark name); and where `paired` holds a benchmark's paired.csv, the method's accuracy minus target-only's
    there with its paired bootstrap 95% interval. A method run with several samples per problem (`--samples`) has
    a second row, its majority vote: the voted answer's accuracy (the paper's "majority voting" row), not the mean
    of its samples'. "cut off" is the share of runs that hit the token budget (or the context) before their end;
    past `CUT_OFF_WARNING` a line under the table names the method and benchmark, since a cut solution is graded
    wrong whatever the method."""
    paired = paired or {}
    methods = list(dict.fromkeys(m for summary in summaries.values() for m in summary["method"]))
    header = ["method", "models", *summaries, "average", "tokens/s", "mean acceptance length", "interventions / 1k tokens"]
    header.append("target passes / token")
    header.append("cut off")
    header += [f"{name}: − target-only (paired 95%)" for name in paired]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in methods:
        rows = {name: s[s["method"] == method].iloc[0] for name, s in summaries.items() if (s["method"] == method).any()}
        against = [_against_target(table, method) for table in paired.values()]
        samples = {round(r["runs"] / r["problems"]) for r in rows.values()}
        label = f"{method}, mean of {max(samples)} samples" if max(samples) > 1 else method
        lines.append(_table_row(label, {name: r["accuracy"] for name, r in rows.items()}, summaries, rows, against))
        voted = {name: r["vote_accuracy"] for name, r in rows.items() if not pd.isna(r.get("vote_accuracy", np.nan))}
        if voted:
            label = f"{method}, majority vote of {max(samples)} samples"
            lines.append(_table_row(label, voted, summaries, rows, ["—"] * len(paired)))
    warnings = [
        f"warning: {method} on {name}: {r['cut_off']:.0%} of runs were cut off by the token budget (more than"
        f" {CUT_OFF_WARNING:.0%}); give --max-new-tokens more, within the pair's context"
        for method in methods
        for name, s in summaries.items()
        for _, r in s[s["method"] == method].iterrows()
        if r.get("cut_off", 0) > CUT_OFF_WARNING
    ]
    return "\n".join([*lines, *([""] + warnings if warnings else [])])


def _table_row(label: str, accuracy: dict, summaries: dict, rows: dict, against: list[str]) -> str:
    """One row of the paper's table: accuracy per benchmark and their average, then the cost over every benchmark."""
    found = list(rows.values())
    tokens = sum(r["mean_tokens"] * r["runs"] for r in found)
    seconds = sum(r["mean_tokens"] * r["runs"] / r["tokens_per_s"] for r in found if r["tokens_per_s"] > 0)
    interventions = sum(r["interventions_per_1k"] * r["mean_tokens"] * r["runs"] / 1000 for r in found)
    passes = sum(r["target_calls_per_token"] * r["mean_tokens"] * r["runs"] for r in found)
    cells = [f"{100 * accuracy[name]:.2f}" if name in accuracy else "—" for name in summaries]
    average = f"{100 * np.mean([float(a) for a in accuracy.values()]):.2f}" if len(accuracy) == len(summaries) else "—"
    speed = f"{tokens / seconds:.2f}" if seconds else "—"
    drafts = sum(r.get("num_drafts", np.nan) for r in found)  # NaN for a summary written before drafts were counted
    accepted = sum(r.get("num_accepted_tokens", np.nan) for r in found)
    length = f"{1 + accepted / drafts:.2f}" if drafts > 0 else "—"
    rate = "—" if np.isnan(interventions) or not tokens else f"{1000 * interventions / tokens:.1f}"
    per_token = "—" if np.isnan(passes) or not tokens else f"{passes / tokens:.3f}"
    runs = sum(r["runs"] for r in found)
    cut = sum(r.get("cut_off", np.nan) * r["runs"] for r in found)
    cut_off = "—" if np.isnan(cut) or not runs else f"{cut / runs:.1%}"
    method = METHODS.get(re.split("[:@, ]", label, maxsplit=1)[0])
    models = method.models if method is not None else "?"  # as the paper's Table 1 marks them: TM, DM, PRM
    return "| " + " | ".join([label, models, *cells, average, speed, length, rate, per_token, cut_off, *against]) + " |"


def _against_target(paired: pd.DataFrame, method: str) -> str:
    row = paired[(paired["a"] == method) & (paired["b"] == SPEED_REFERENCE)]
    if not len(row):
        return "—"
    r = row.iloc[0]
    return f"{r['difference']:+.3f} ({r['boot95_low']:+.3f} to {r['boot95_high']:+.3f})"


def write_html(path: Path, title: str, figures: list[go.Figure]) -> None:
    """One self-contained page (Plotly inlined once), readable offline."""
    parts = [figure.to_html(full_html=False, include_plotlyjs=i == 0) for i, figure in enumerate(figures)]
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>{''.join(parts)}</body></html>",
        encoding="utf-8",
    )


def fragility_figure(summary: pd.DataFrame) -> go.Figure:
    """Penalties, the share a rounding step could have flipped, and accuracy over runs whose every penalty was robust."""
    columns = ["method", "accuracy", "penalties", "fragile_share", "robust_runs", "robust_accuracy"]
    cells = [[_table_cell(v) for v in summary[c]] for c in columns]
    figure = go.Figure(go.Table(header=dict(values=columns), cells=dict(values=cells)))
    return figure.update_layout(
        title="Penalties decided by rounding (docs/method.md, 'Fragile decisions')", height=120 + 30 * len(summary)
    )


def _table_cell(value) -> str:
    if isinstance(value, str):
        return value
    return "n/a" if pd.isna(value) else f"{value:.3g}"


def accuracy_figure(summary: pd.DataFrame) -> go.Figure:
    error = dict(
        type="data",
        symmetric=False,
        array=summary["ci95_high"] - summary["accuracy"],
        arrayminus=summary["accuracy"] - summary["ci95_low"],
    )
    figure = go.Figure(
        go.Bar(x=summary["method"], y=summary["accuracy"], error_y=error, text=[f"{a:.1%}" for a in summary["accuracy"]])
    )
    figure.update_layout(title="Accuracy with 95% Wilson intervals", yaxis_tickformat=".0%", yaxis_range=[0, 1])
    return figure


def speed_figure(summary: pd.DataFrame) -> go.Figure:
    figure = make_subplots(rows=1, cols=3, subplot_titles=("tokens/s", "mean acceptance length", "penalized-token rate"))
    for col, column in enumerate(("tokens_per_s", "mean_acceptance_length", "penalized_token_rate"), start=1):
        figure.add_trace(go.Bar(x=summary["method"], y=summary[column], showlegend=False), row=1, col=col)
    figure.update_layout(title="Speed and intervention")
    return figure


def paired_figure(paired: pd.DataFrame) -> go.Figure:
    labels = [f"{a} vs {b} (p={p:.3g})" for a, b, p in zip(paired["a"], paired["b"], paired["mcnemar_p"])]
    figure = go.Figure()
    for column, name in (
        ("both_right", "both right"),
        ("only_a", "only the first right"),
        ("only_b", "only the second right"),
        ("both_wrong", "both wrong"),
    ):
        figure.add_trace(go.Bar(y=labels, x=paired[column], name=name, orientation="h"))
    figure.update_layout(barmode="stack", title="Paired outcomes (exact McNemar p-values)", height=200 + 40 * len(paired))
    return figure


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
