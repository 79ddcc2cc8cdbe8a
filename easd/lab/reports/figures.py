"""An evaluation's figures (Plotly), and one self-contained page that holds them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots


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
