"""The acceptance report (`python -m easd acceptance`) as markdown and as one HTML file: the seed study's findings put
to these runs, acceptance by domain and category, by draft position, against both models' entropy, and where EASD's
penalty would fire. Both show the same tables (`tables`), from the figures of easd.lab.acceptance.dynamics.analyse.

Built like the study's report (easd.render.study) under the one-file export's rules (easd.render.export): every
text through `tag`, which escapes it (a category is the question file's text), Plotly inlined, figures as JSON drawn
by one hashed script, and a policy under which nothing else runs and nothing is fetched. Plotly reads a few HTML tags
in a figure's text, so the names shown in figures are escaped as well.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from .export import DRAW_FIGURES, figure_box, standalone_page
from .figures import DRAFT_COLOUR, PENALTY_COLOUR, TARGET_COLOUR
from .html import Html, join, tag
from .study import CSS, table

# Okabe–Ito, one colour a domain; categories of no domain in grey
DOMAIN_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7")
NO_DOMAIN = "#999999"
POSITION_NOTE = "Conditional acceptance (of the drafts that reached the position); vLLM's accepted ÷ every draft in brackets."
DEFINITIONS = (
    "A draft is one proposal of k tokens that the target verified in one pass; mean acceptance length is 1 + accepted "
    "÷ drafts, and the draft acceptance rate accepted ÷ (k × drafts): vLLM's definitions.",
    "An examined position is a drafted token the standard test judged, accepted or not. A position behind a "
    "rejection in the same draft was never judged and is not counted. Accepted of examined, the entropies, ρ and "
    "the rule's figures are over examined positions.",
    "Conditional acceptance at position i: of the drafts that reached i, the share accepted there; vLLM's rate per "
    "position divides by every draft instead.",
    "ρ is Spearman's between acceptance (1 or 0) and the entropy at that position; its 95% interval resamples whole "
    "questions, since the positions of one answer are not independent.",
    "Rule fires: EASD's rule holds at an examined position (both entropies ≥ τ_H and overlap ≥ τ_O, for the full "
    "rule). Penalty would fire: the rule holds where the standard test accepted, so EASD would have refused the "
    "token; counted once a draft, at the first such position, since EASD's block ends there. Both are read along SD's "
    "runs: after a penalty, EASD's own text would go elsewhere.",
)


@dataclass(frozen=True)
class Table:
    """One of the report's tables, as both the markdown and the HTML report show it."""

    title: str
    header: list[str]
    rows: list[list[str]]
    first_numeric: int  # the columns from this one on are numbers, right-aligned
    note: str = ""


def tables(found: dict) -> list[Table]:
    """The report's tables: acceptance, then entropy and the rule, by domain (and overall) and by category; then
    acceptance by draft position."""
    groups = [*found["domains"], found["overall"]]
    made = []
    for title, rows, first, members in (
        ("By domain", groups, "domain", "categories"),
        ("By category", found["categories"], "category", "domain"),
    ):
        acceptance = [[r["name"], _members(r), *_acceptance_cells(r)] for r in rows]
        signals = [[r["name"], *_signal_cells(r)] for r in rows]
        made += [
            Table(f"{title}: acceptance", [first, members, *ACCEPTANCE_HEADER], acceptance, 2),
            Table(f"{title}: entropy and EASD's rule", [first, *SIGNAL_HEADER], signals, 1),
        ]
    k = max((len(r["conditional_acceptance"]) for r in [found["overall"], *found["categories"]]), default=0)
    positions = [[r["name"], *_position_cells(r, k)] for r in [*groups, *found["categories"]]]
    made.append(
        Table("Acceptance by draft position", ["group", *(f"position {i + 1}" for i in range(k))], positions, 1, POSITION_NOTE)
    )
    return made


ACCEPTANCE_HEADER = [
    "questions",
    "turns",
    "tokens",
    "drafts",
    "mean acceptance length",
    "draft acceptance rate",
    "examined positions",
    "accepted of examined",
]
SIGNAL_HEADER = [
    "mean H draft",
    "mean H target",
    "ρ(accepted, H draft)",
    "ρ(accepted, H target)",
    "rule fires",
    "penalty would fire",
]


def _acceptance_cells(row: dict) -> list[str]:
    return [
        f"{row['questions']}",
        f"{row['turns']}",
        f"{row['tokens']:,}",
        f"{row['num_drafts']:,}",
        _figure(row["mean_acceptance_length"], "{:.2f}"),
        _figure(row["draft_acceptance_rate"], "{:.3f}"),
        f"{row['examined']:,}",
        _figure(row["examined_acceptance"], "{:.3f}"),
    ]


def _signal_cells(row: dict) -> list[str]:
    return [
        _figure(row["h_draft_mean"], "{:.2f}"),
        _figure(row["h_target_mean"], "{:.2f}"),
        _rho(row["rho_draft"]),
        _rho(row["rho_target"]),
        _figure(row["rule_share"], "{:.1%}"),
        _figure(row["penalty_share"], "{:.1%}") + f" ({_figure(row['penalties_per_1k'], '{:.1f}')} / 1k tokens)",
    ]


def _rho(rho: dict) -> str:
    """ρ and its 95% interval, signed."""
    if rho["rho"] is None:
        return "—"
    interval = f" ({rho['low']:+.2f} to {rho['high']:+.2f})" if rho["low"] is not None else ""
    return f"{rho['rho']:+.2f}{interval}"


def _position_cells(row: dict, k: int) -> list[str]:
    """Per position 1..k: the conditional acceptance, and vLLM's accepted there ÷ every draft in brackets."""
    pairs = zip(row["conditional_acceptance"], row["acceptance_per_position"])
    cells = [f"{conditional:.3f} ({every:.3f})" for conditional, every in pairs]
    return cells + ["—"] * (k - len(cells))


def _members(row: dict) -> str:
    """A domain's categories, or a category's domain."""
    if "categories" in row:
        return ", ".join(row["categories"])
    return row.get("domain") or "—"


def _figure(value, form: str) -> str:
    return "—" if value is None else form.format(value)


def _title(found: dict) -> str:
    config = found["config"]
    return f"Where SD accepts: {config.get('pair', '')} on {Path(config['data']).name}"


# --- markdown -------------------------------------------------------------------------------------


def markdown(found: dict) -> str:
    """The report's findings and tables as markdown."""
    lines = [f"# {_title(found)}", "", "## Against the seed study's findings", ""]
    lines += [f"- {line}" for line in found["findings"]] + [""]
    for made in tables(found):
        lines += [f"## {made.title}", ""] + ([made.note, ""] if made.note else [])
        lines += ["| " + " | ".join(made.header) + " |", "|" + "---|" * len(made.header)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in made.rows] + [""]
    lines += ["## What is counted", ""] + [f"- {line}" for line in DEFINITIONS] + [""]
    lines += ["## What was assumed", ""] + [f"- {line}" for line in found["assumptions"]]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """A markdown table cell: a category is the question file's text, so no pipe or line break may split the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


# --- HTML -----------------------------------------------------------------------------------------


def dynamics_file(found: dict) -> str:
    """The whole report as one HTML file that opens offline."""
    title = _title(found)
    parts = [
        tag("h1", title),
        tag("h2", "Against the seed study's findings"),
        tag("ul", *[tag("li", line) for line in found["findings"]]),
    ]
    for made in tables(found):
        numeric = set(range(made.first_numeric, len(made.header)))
        parts += [tag("h2", made.title), tag("p", made.note) if made.note else "", table(made.header, made.rows, numeric)]
    parts += [
        _figures(found),
        tag("h2", "What is counted"),
        tag("ul", *[tag("li", line) for line in DEFINITIONS]),
        tag("h2", "What was assumed"),
        tag("ul", *[tag("li", line) for line in found["assumptions"]]),
    ]
    return standalone_page(title, join(parts), DRAW_FIGURES, CSS)


def _figures(found: dict) -> Html:
    boxes = [
        *figure_box("acceptance_length", "mean acceptance length by category", _lengths(found)),
        *figure_box("by_position", "conditional acceptance by draft position", _positions(found)),
        *figure_box("rho", "Spearman's ρ between acceptance and entropy", _rhos(found)),
        *figure_box("penalty", "where EASD's penalty would fire", _penalties(found)),
    ]
    return join([tag("h2", "Figures"), tag("div", *boxes, class_="figures")])


def _shown(name: str) -> str:
    return html.escape(name)  # Plotly reads <b>, <br> … in a figure's text


def _colour(found: dict, domain: str | None) -> str:
    """A domain's colour, the same in every figure (by its place in the domains' map); grey for no domain."""
    domains = list(found["domains_map"])
    return DOMAIN_COLOURS[domains.index(domain) % len(DOMAIN_COLOURS)] if domain in domains else NO_DOMAIN


def _lengths(found: dict) -> go.Figure:
    """Mean acceptance length per category, a bar trace per domain so that the legend names them."""
    figure = go.Figure()
    for domain in [*found["domains_map"], None]:
        rows = [r for r in found["categories"] if r["domain"] == domain]
        if rows:
            figure.add_trace(
                go.Bar(
                    x=[_shown(r["name"]) for r in rows],
                    y=[r["mean_acceptance_length"] for r in rows],
                    name=_shown(domain or "no domain"),
                    marker_color=_colour(found, domain),
                    hovertemplate="%{x}: %{y:.2f}<extra></extra>",
                )
            )
    figure.update_layout(title="Mean acceptance length by category", yaxis_title="tokens per verified draft", height=340)
    return figure


def _positions(found: dict) -> go.Figure:
    figure = go.Figure()
    for row in found["domains"]:
        rates = row["conditional_acceptance"]
        figure.add_trace(
            go.Scatter(
                x=list(range(1, len(rates) + 1)),
                y=rates,
                name=_shown(row["name"]),
                mode="lines+markers",
                line_color=_colour(found, row["name"]),
            )
        )
    overall = found["overall"]["conditional_acceptance"]
    figure.add_trace(
        go.Scatter(
            x=list(range(1, len(overall) + 1)), y=overall, name="overall", mode="lines", line=dict(color="#000", dash="dash")
        )
    )
    figure.update_layout(
        title="Conditional acceptance by draft position", xaxis_title="draft position", yaxis_title="accepted", height=340
    )
    figure.update_xaxes(dtick=1)
    return figure


def _rhos(found: dict) -> go.Figure:
    rows = [*found["domains"], found["overall"], *found["categories"]]
    names = [_shown(r["name"]) for r in rows]
    figure = go.Figure()
    for key, label, colour in (("rho_draft", "H draft", DRAFT_COLOUR), ("rho_target", "H target", TARGET_COLOUR)):
        rho = [r[key]["rho"] for r in rows]
        above = [None if r[key]["high"] is None else r[key]["high"] - r[key]["rho"] for r in rows]
        below = [None if r[key]["low"] is None else r[key]["rho"] - r[key]["low"] for r in rows]
        figure.add_trace(
            go.Scatter(
                x=names,
                y=rho,
                name=label,
                mode="markers",
                marker_color=colour,
                error_y=dict(type="data", array=above, arrayminus=below, symmetric=False),
            )
        )
    figure.add_hline(y=0, line_color="#888")
    figure.add_hrect(y0=-0.20, y1=-0.15, fillcolor="#999", opacity=0.2, line_width=0, annotation_text="seed study")
    figure.update_layout(title="Spearman ρ(accepted, H), 95% intervals", yaxis_title="ρ", scattermode="group", height=380)
    return figure


def _penalties(found: dict) -> go.Figure:
    rows = found["categories"]
    figure = go.Figure(
        go.Bar(
            x=[_shown(r["name"]) for r in rows],
            y=[r["penalty_share"] for r in rows],
            marker_color=PENALTY_COLOUR,
            hovertemplate="%{x}: %{y:.1%} of examined positions<extra></extra>",
        )
    )
    settings = found["config"]["settings"]
    figure.update_layout(
        title=f"Where EASD's penalty would fire (τ_H = {settings['tau_h']:g}, τ_O = {settings['tau_o']:g})",
        yaxis_title="share of examined positions",
        yaxis_tickformat=".0%",
        height=340,
    )
    return figure
