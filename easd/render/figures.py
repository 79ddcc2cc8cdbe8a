"""The Plotly figures: signal timeline, top-5 heatmaps, the what-if map and the speed map (`FIGURES`: one entry each).

All three read a finished (or growing) trace; the what-if map re-evaluates the rule with
`easd.method.whatif`, the same rule function the decoding loop runs. Token text shown inside a figure
is escaped too: Plotly interprets a small set of HTML tags in text.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..method import whatif
from ..method.spec_metrics import refused
from ..method.speed import Speed, predicted_speedup
from ..method.trace import Trace
from ..method.whatif import RuleView
from .lanes import lane_window, visible_text

PENALTY_COLOUR = "#D55E00"  # Okabe–Ito vermillion, as in the lanes
DRAFT_COLOUR, TARGET_COLOUR = "#0072B2", "#E69F00"
TAU_H_GRID = np.round(np.arange(0, 4.0001, 0.1), 2)
TAU_O_GRID = np.round(np.arange(0, 1.0001, 0.05), 2)
HEATMAP_WINDOW = 12  # positions shown around the selected token: at 1280×720 a cell holds about 6 characters
CELL_CHARS = 6  # a heatmap cell's token, cut to this many characters (the hover gives it whole)
# Plotly's toolbar sits over the top right of every figure: titles go top left, legends under the plot
TOP_LEFT_TITLE = dict(x=0.01, xanchor="left", y=0.96, yanchor="top", font_size=13)
LEGEND_BELOW = dict(orientation="h", x=0, y=-0.3, yanchor="top")


def cell_text(text) -> str:
    """A token as a figure's cell shows it: its invisible characters made visible, a character past the scripts every
    font draws (Latin, Greek, Cyrillic and their accents, below U+2000) as its escape, never an empty box (a CJK
    character, an emoji, a byte piece's U+FFFD), and cut to CELL_CHARS. Still to be escaped for HTML."""
    marks = "↵⇥␍∅"  # visible_text's own
    shown = "".join(ch if ord(ch) < 0x2000 or ch in marks else f"\\u{ord(ch):04x}" for ch in visible_text(text))
    shown = shown.replace("\n", "")  # a line break stays its ↵: a cell holds one line
    return shown if len(shown) <= CELL_CHARS else shown[: CELL_CHARS - 1] + "…"


def empty_figure(message: str = "") -> go.Figure:
    """A placeholder that makes the page load Plotly up front (so the first real figure is instant)."""
    figure = go.Figure()
    figure.update_layout(height=260, margin=dict(l=40, r=20, t=30, b=30), xaxis_visible=False, yaxis_visible=False)
    if message:
        figure.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return figure


def signal_timeline(trace: Trace | None, view: RuleView, selected: int | None = None) -> go.Figure:
    """H_draft, H_target and overlap per position, the τ lines, and penalized positions (the lane's
    window of a huge trace). Positions are the rows' indices, so a loaded file's own numbering never
    reaches the axis."""
    if trace is None or not trace.records:
        return empty_figure("signals appear here as tokens are generated")
    tau_h, tau_o, top_n = view.tau_h, view.tau_o, view.top_n
    window = lane_window(trace, selected)
    positions = list(window)
    h_draft = whatif.signal_column(trace, "h_draft")[window.start : window.stop]
    h_target = whatif.signal_column(trace, "h_target")[window.start : window.stop]
    overlap = whatif.overlap_counts(trace, top_n)[window.start : window.stop] / top_n
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    figure.add_trace(
        go.Scatter(x=positions, y=h_draft, name="H draft", mode="lines+markers", line_color=DRAFT_COLOUR, marker_size=4)
    )
    figure.add_trace(
        go.Scatter(x=positions, y=h_target, name="H target", mode="lines+markers", line_color=TARGET_COLOUR, marker_size=4)
    )
    figure.add_trace(
        go.Scatter(
            x=positions,
            y=overlap,
            name=f"overlap (n={top_n})",
            mode="markers",
            marker=dict(symbol="diamond", size=5, color="#009E73"),
        ),
        secondary_y=True,
    )
    penalized = [i for i in window if refused(trace.records[i])]
    if penalized:
        figure.add_trace(
            go.Scatter(
                x=penalized,
                y=[h_target[i - window.start] for i in penalized],
                name="penalized",
                mode="markers",
                marker=dict(symbol="x", size=11, color=PENALTY_COLOUR),
            )
        )
    # τ_H's label at the left end (its axis), τ_O's at the right (its own): at τ_H = 1, τ_O = 0.8 they meet otherwise
    figure.add_hline(
        y=tau_h, line_dash="dash", line_color="#555", annotation_text=f"τ_H = {tau_h:g}", annotation_position="top left"
    )
    figure.add_hline(
        y=tau_o,
        line_dash="dot",
        line_color="#009E73",
        annotation_text=f"τ_O = {tau_o:g}",
        annotation_position="bottom right",
        secondary_y=True,
    )
    if selected is not None:
        figure.add_vline(x=selected, line_color="#000", line_width=1)
    figure.update_layout(height=340, margin=dict(l=50, r=50, t=30, b=90), legend=LEGEND_BELOW, hovermode="x unified")
    figure.update_yaxes(title_text="entropy (nats)", secondary_y=False)
    figure.update_yaxes(title_text="overlap", range=[0, 1.05], secondary_y=True)
    figure.update_xaxes(title_text="position")
    return figure


def topk_heatmap(trace: Trace | None, selected: int | None = None, ranks: int = 5, fork: int | None = None) -> go.Figure:
    """Rank × position for the draft and the target around the selected token (or the fork, else the start): colour
    is probability, the cell holds the token, cut to a few characters and escaped (a control or a byte piece shown as
    its escape, never an empty box). Only a window is drawn, since thousands of text cells make the browser crawl."""
    if trace is None or not trace.records:
        return empty_figure("top-5 candidates appear here")
    centre = selected if selected is not None else fork if fork is not None else HEATMAP_WINDOW // 2
    first = max(0, min(centre - HEATMAP_WINDOW // 2, len(trace.records) - HEATMAP_WINDOW))
    window = trace.records[first : first + HEATMAP_WINDOW]
    positions = list(range(first, first + len(window)))
    figure = make_subplots(
        rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=("draft top-5", "target top-5")
    )
    for row, side in enumerate(("draft_top", "target_top"), start=1):
        probs = np.full((ranks, len(window)), np.nan)
        texts = [[""] * len(window) for _ in range(ranks)]
        whole = [[""] * len(window) for _ in range(ranks)]
        for j, record in enumerate(window):
            for rank, (_, text, prob) in enumerate(getattr(record, side)[:ranks]):
                whole[rank][j] = text
                probs[rank, j], texts[rank][j] = prob, html.escape(cell_text(text), quote=False)
        figure.add_trace(
            go.Heatmap(
                z=probs,
                x=positions,
                y=list(range(1, ranks + 1)),
                text=texts,
                texttemplate="%{text}",
                textfont_size=10,
                colorscale="Blues",
                zmin=0,
                zmax=1,
                showscale=row == 1,
                customdata=[[html.escape(visible_text(t), quote=False) for t in row] for row in whole],
                hovertemplate="pos %{x}, rank %{y}: %{customdata} p=%{z:.3f}<extra></extra>",
            ),
            row=row,
            col=1,
        )
        figure.update_yaxes(autorange="reversed", title_text="rank", row=row, col=1)
    for position, record in zip(positions, window):
        outline = dict(line_color="#000", line_width=2) if position == selected else None
        if refused(record):
            outline = dict(line_color=PENALTY_COLOUR, line_width=3)
        if outline:
            for row in (1, 2):
                figure.add_vrect(x0=position - 0.5, x1=position + 0.5, row=row, col=1, **outline)
    figure.update_xaxes(title_text="position", dtick=1, row=2, col=1)
    figure.update_layout(height=380, margin=dict(l=50, r=20, t=40, b=40))
    figure.update_annotations(x=0, xanchor="left", font_size=13)  # the subplots' titles, top left, clear of the toolbar
    return figure


def whatif_map(sd_trace: Trace | None, view: RuleView) -> go.Figure:
    """Share of the SD trace's drafted positions where the rule would fire, over τ_H × τ_O."""
    if sd_trace is None or not whatif.drafted_positions(sd_trace).any():
        return empty_figure("the what-if map needs a finished SD run")
    rule, tau_h, tau_o, top_n = view.rule, view.tau_h, view.tau_o, view.top_n
    grid = whatif.fire_share_grid(sd_trace, rule, TAU_H_GRID, TAU_O_GRID, top_n)
    figure = go.Figure(
        go.Heatmap(
            z=grid,
            x=TAU_O_GRID,
            y=TAU_H_GRID,
            colorscale="Oranges",
            zmin=0,
            zmax=1,
            colorbar_title="fires",
            hovertemplate="τ_O %{x}, τ_H %{y}: %{z:.1%}<extra></extra>",
        )
    )
    figure.add_trace(
        go.Scatter(
            x=[tau_o], y=[tau_h], mode="markers", marker=dict(symbol="x", size=14, color="#000"), name="current", showlegend=False
        )
    )
    figure.update_layout(
        height=320,
        margin=dict(l=50, r=20, t=50, b=40),
        title=dict(text=f"where rule {rule} fires (n = {top_n})", **TOP_LEFT_TITLE),
    )
    figure.update_xaxes(title_text="τ_O")
    figure.update_yaxes(title_text="τ_H (nats)")
    return figure


@dataclass(frozen=True)
class Focus:
    """What the figures show: the focused lane's trace, the SD trace the what-if re-reads (None while running), the
    speculative run whose speed is explained (SD or EASD, whichever lane comes first), the rule view, and the selected
    row's index."""

    trace: Trace | None
    sd: Trace | None
    speculative: Trace | None
    view: RuleView
    selected: int | None
    fork: int | None = None  # where the lanes part: the heatmap opens there


def speed_map(speculative: Trace | None) -> go.Figure:
    """SD's predicted speed-up over target-only against k and the acceptance rate, with this machine's measured
    costs (easd.method.speed), the break-even line, and the run's own point."""
    if speculative is None:
        return empty_figure("the speed map needs a finished SD or EASD run")
    speed = Speed.of_trace(speculative)
    if speed is None:  # a recorded or loaded run: its passes were timed on another machine, or not at all
        return empty_figure(
            "this run does not record this machine's pass costs (a recorded or loaded run):<br>generate it here to see its speed map"
        )
    per_token = (speed.r - 1) / speed.k  # a verify pass's cost grows about linearly with its width on a CPU
    alphas = np.round(np.arange(0, 0.96, 0.05), 2)
    predicted = [[predicted_speedup(a, k, speed.c, 1 + per_token * k) for k in SPEED_KS] for a in alphas]
    figure = go.Figure(
        go.Contour(
            x=SPEED_KS,
            y=alphas,
            z=predicted,
            colorscale="RdBu",
            zmid=1.0,
            colorbar_title="× target-only",
            contours=dict(showlabels=True),
            hovertemplate="k %{x}, α %{y}: %{z:.2f}×<extra></extra>",
        )
    )
    figure.add_trace(
        go.Scatter(
            x=[speed.k],
            y=[speed.alpha],
            mode="markers+text",
            text=[f"this run: {speed.measured:.2f}× measured"],
            textposition="top center",
            marker=dict(size=12, color="black", symbol="x"),
            name="this run",
        )
    )
    figure.update_layout(
        height=360,
        margin=dict(l=50, r=20, t=75, b=40),
        xaxis_title="k (drafts per block)",
        yaxis_title="acceptance α",
        title=dict(
            text=f"predicted speed-up<br>blue: faster than target-only<br>c = {speed.c:.2f}, r = 1 + {per_token:.2f}·k",
            **TOP_LEFT_TITLE,
        ),
    )
    return figure


SPEED_KS = list(range(1, 13))

# Every figure of the page, by name: its tab title and how to draw it. Adding a figure is one entry here.
FIGURES = {
    "timeline": ("Signal timeline", lambda f: signal_timeline(f.trace, f.view, f.selected)),
    "heatmap": ("Top-5 heatmap", lambda f: topk_heatmap(f.trace, f.selected, fork=f.fork)),
    "whatif": ("What-if map", lambda f: whatif_map(f.sd, f.view)),
    "speed": ("Speed", lambda f: speed_map(f.speculative)),
}
