"""The paper's main table as markdown, over one benchmark's summary or several (`python -m easd table`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ...method.methods import METHODS
from ...method.references import SPEED_REFERENCE

# the share of runs cut off by the budget past which the paper's table warns: one in 100 moves accuracy by a point,
# the size of the differences the paper reports
CUT_OFF_WARNING = 0.01


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
