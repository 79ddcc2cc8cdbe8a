"""A method's grid as figures, for `sweep` (sweep.html) and `study` (study.html): accuracy over the grid's first
setting, a line per value of the others, with the reference runs as dashed lines; over a grid of two settings (EASD's
τ_H × τ_O) also heatmaps of accuracy and interventions."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..method.methods import knobs


def grid_figures(cells: pd.DataFrame, title: str, columns: tuple[str, ...], references: dict) -> list[go.Figure]:
    """`cells`: a row per point of the grid, a column per setting in `columns` and its `accuracy` and
    `interventions_per_1k`; `references`: the accuracy of each reference run by name (sd, target)."""
    heatmaps = _heatmaps(cells, columns, references) if len(columns) == 2 else []
    return [*heatmaps, _lines(cells, title, columns, references)]


def _label(setting: str) -> str:
    """A setting as its knob names it (τ_H), else by its name."""
    knob = knobs().get(setting)
    return (knob.label if knob is not None else "") or setting


def _lines(cells: pd.DataFrame, title: str, columns: tuple[str, ...], references: dict) -> go.Figure:
    """Accuracy over the grid's first setting, a line per value of the others, the references as dashed lines."""
    column, lines = columns[0], list(columns[1:])
    groups = cells.groupby(lines) if lines else [((), cells)]
    figure = go.Figure(
        [
            go.Scatter(
                x=group[column],
                y=group["accuracy"],
                mode="lines+markers",
                name=", ".join(
                    [title, *(f"{_label(n)} = {v:g}" for n, v in zip(lines, key if isinstance(key, tuple) else (key,)))]
                ),
            )
            for key, group in groups
        ]
    )
    for name, value in references.items():
        if value is not None:
            figure.add_hline(y=value, line_dash="dash", annotation_text=f"{name} {value:.1%}")
    figure.update_layout(
        title=f"{title}'s accuracy by {_label(column)}, with the references", xaxis_title=_label(column), yaxis_tickformat=".0%"
    )
    return figure


def _heatmaps(cells: pd.DataFrame, columns: tuple[str, ...], references: dict) -> list[go.Figure]:
    """Accuracy and interventions over a grid of two settings (rows: the first, columns: the second)."""
    figures = []
    rows, across = (_label(c) for c in columns)
    note = ", ".join(f"{name} {v:.1%}" for name, v in references.items() if v is not None)
    for value, title, scale, form in (
        ("accuracy", "Accuracy", "Greens", "%{z:.1%}"),
        ("interventions_per_1k", "Interventions per 1,000 tokens", "Oranges", "%{z:.1f}"),
    ):
        grid = cells.pivot(index=columns[0], columns=columns[1], values=value)
        figure = go.Figure(
            go.Heatmap(
                z=grid.values,
                x=[f"{v:g}" for v in grid.columns],
                y=[f"{v:g}" for v in grid.index],
                colorscale=scale,
                texttemplate=form,
                hovertemplate=f"{rows} %{{y}}, {across} %{{x}}: %{{z:.3f}}<extra></extra>",
            )
        )
        figure.update_layout(
            title=f"{title} over {rows} × {across}" + (f" (references: {note})" if note else ""),
            xaxis_title=across,
            yaxis_title=rows,
        )
        figures.append(figure)
    return figures
