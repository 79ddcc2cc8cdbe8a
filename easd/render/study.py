"""A study's report as one HTML file (`python -m easd study`): the verdict, accuracy with paired statistics, speed,
the τ_H × τ_O heatmaps, where the penalty fires, the problems whose answers part (each a link into the app and a
one-file export), and what was assumed.

Built like the one-file export (easd.render.export): every text through `tag`, which escapes it (token texts and
answers are model output), Plotly inlined, figures as JSON drawn by one hashed script, and a policy under which
nothing else runs and nothing is fetched.
"""

from __future__ import annotations

import plotly.graph_objects as go

from .export import DRAW_FIGURES, figure_box, standalone_page
from .html import Html, join, tag

CSS = """
body { font-family: system-ui, sans-serif; margin: 0 auto; padding: 12px 16px; max-width: 1100px; color: #111; background: #fff; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { background: #f3f3f3; padding: 0 3px; white-space: pre-wrap; }
p.verdict { font-size: 1.15em; border-left: 4px solid #2563eb; padding: 6px 12px; background: #f5f8ff; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 8px; }
.figure { min-height: 340px; }
"""


def study_file(study: dict) -> str:
    title, body = study_body(study)
    return standalone_page(title, body, DRAW_FIGURES, CSS)


def study_body(study: dict, above: Html | None = None) -> tuple[str, Html]:
    """(title, body) of the report (`above` goes first: a static site's way home)."""
    title = f"Does EASD help? {study['config']['pair']}"
    body = join(
        [
            above or Html(""),
            tag("h1", title),
            tag("p", study["verdict"], class_="verdict"),
            _accuracy(study),
            _speed(study),
            _grid(study),
            _fires(study),
            _differences(study),
            _graders(study),
            tag("h2", "What was assumed"),
            tag("ul", *[tag("li", line) for line in study["assumptions"]]),
        ]
    )
    return title, body


def table(header: list[str], rows: list[list], numeric: set[int] = frozenset()) -> Html:
    """A report's table: every cell escaped (unless built as Html), the columns in `numeric` right-aligned."""
    head = tag("tr", *[tag("th", cell) for cell in header])
    lines = [tag("tr", *[tag("td", cell, class_="n" if i in numeric else None) for i, cell in enumerate(row)]) for row in rows]
    return tag("table", tag("thead", head), tag("tbody", *lines))


def _percent(value) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _accuracy(study: dict) -> Html:
    settings = study["config"]["settings"]
    rows = []
    for row in study["accuracy"]:
        label = row["method"]
        if label == "easd":
            label = f"easd (k = {settings['k']}, τ_H = {settings['tau_h']:g}, τ_O = {settings['tau_o']:g})"
        low, high = row["ci95"]
        rows.append(
            [
                label,
                row["problems"],
                row["correct"],
                f"{_percent(row['accuracy'])} ({_percent(low)}–{_percent(high)})",
                row["source"],
            ]
        )
    p, target = study["paired"], study["target"]
    paired = table(
        [
            "EASD against SD",
            "pairs",
            "both right",
            "only EASD",
            "only SD",
            "both wrong",
            "difference",
            "bootstrap 95%",
            "McNemar p",
        ],
        [
            [
                "",
                p.get("pairs", 0),
                p.get("both_right", 0),
                p.get("only_a", 0),
                p.get("only_b", 0),
                p.get("both_wrong", 0),
                _percent(p.get("difference")),
                f"{_percent(p.get('boot95_low'))} to {_percent(p.get('boot95_high'))}",
                "—" if p.get("mcnemar_p") is None else f"{p['mcnemar_p']:.3g}",
            ]
        ],
        numeric={1, 2, 3, 4, 5, 6, 8},
    )
    note = (
        f"EASD's text differs from SD's on {p.get('texts_differ', 0)} problems, its answer on {p.get('answers_differ', 0)}. "
        f"Target-only: {target['why']}."
    )
    header = ["method", "problems", "correct", "accuracy (95% Wilson)", "from"]
    return join([tag("h2", "Accuracy"), table(header, rows, numeric={1, 2}), paired, tag("p", note)])


def _graders(study: dict) -> Html:
    compared = study["graders"]
    grader, other, parted = compared["grader"], compared["other"], compared["disagree"]
    accuracy = table(
        ["method", f"{grader} (the study's)", other],
        [[m, _percent(a), _percent(b)] for m, (a, b) in compared["accuracy"].items()],
        numeric={1, 2},
    )
    said = tag("p", f"The two graders part on {len(parted)} answer{'s' if len(parted) != 1 else ''}.")
    rows = [
        [
            str(r["problem_id"]),
            r["method"],
            r["prediction"],
            r["gold"],
            *(("right", "wrong") if r["correct"] else ("wrong", "right")),
        ]
        for r in parted
    ]
    listed = table(["problem", "method", "answer", "gold", grader, other], rows) if rows else ""
    return join([tag("h2", "Graders"), accuracy, said, listed])


def _speed(study: dict) -> Html:
    rows = [
        [
            r["method"],
            r["problems"],
            f"{r['tokens']:,}",
            ranged(r["tokens_per_s"], r["tokens_per_s_range"], "{:.2f}"),
            ranged(r["speedup"], r["speedup_range"], "{:.2f}×"),
            "—" if r["mean_acceptance_length"] is None else f"{r['mean_acceptance_length']:.2f}",
            "—" if r["draft_acceptance_rate"] is None else f"{r['draft_acceptance_rate']:.3f}",
        ]
        for r in study["speed"]
    ]
    header = [
        "method",
        "problems timed",
        "tokens",
        "tokens/s",
        "speed-up over target-only",
        "mean acceptance length",
        "draft acceptance rate",
    ]
    note = (
        f"{study['speed_note']} EASD resumes SD's run at its first penalty, so its time up to there is SD's (the same "
        "passes: SD computes the same signals); a run where EASD never fires times as SD's. The acceptance figures "
        "(vLLM's definitions) count every problem's drafts."
    )
    return join([tag("h2", "Speed"), tag("p", note), table(header, rows, numeric={1, 2, 3, 4, 5, 6})])


def ranged(value: float | None, bounds: list[float] | None, form: str) -> str:
    """A median and, where repetitions differ, their range: 12.30 (11.90–12.80)."""
    if value is None:
        return "—"
    if not bounds or bounds[0] == bounds[1]:
        return form.format(value)
    return f"{form.format(value)} ({form.format(bounds[0])}–{form.format(bounds[1])})"


def _grid(study: dict) -> Html:
    grid = study["grid"]
    hs, os_ = grid["tau_hs"], grid["tau_os"]
    figures = []
    for name, key, title, scale in (
        ("accuracy", "accuracy", "accuracy", "Blues"),
        ("penalties", "penalties_per_1k", "penalties per 1,000 tokens", "Oranges"),
    ):
        z = [[grid["cells"][f"{h:g}/{o:g}"][key] for o in os_] for h in hs]
        figure = go.Figure(
            go.Heatmap(
                z=z,
                x=[f"{o:g}" for o in os_],
                y=[f"{h:g}" for h in hs],
                colorscale=scale,
                texttemplate="%{z:.2f}",
                hovertemplate="τ_H %{y}, τ_O %{x}: %{z:.3f}<extra></extra>",
            )
        )
        subtitle = f" (SD: {grid['sd_accuracy']:.2f})" if key == "accuracy" and grid["sd_accuracy"] is not None else ""
        figure.update_layout(title=f"EASD's {title}{subtitle}", xaxis_title="τ_O", yaxis_title="τ_H", height=340)
        figures += figure_box(f"grid_{name}", f"EASD's {title} over τ_H and τ_O", figure)
    note = (
        f"EASD over the paper's grid on the first {grid['problems']} problems, each point resuming SD's run at its first penalty."
    )
    return join([tag("h2", "Sensitivity to τ_H and τ_O"), tag("p", note), tag("div", *figures, class_="figures")])


def _fires(study: dict) -> Html:
    fires = study["fires"]
    tenths = go.Figure(go.Bar(x=[f"{10 * i}–{10 * (i + 1)}%" for i in range(len(fires["by_tenth"]))], y=fires["by_tenth"]))
    tenths.update_layout(
        title="Penalties by where they fall in the answer", xaxis_title="share of the answer's tokens", height=320
    )
    kinds = go.Figure(go.Bar(x=list(fires["by_kind"]), y=list(fires["by_kind"].values())))
    kinds.update_layout(title="Penalties by the kind of token refused", height=320)
    boxes = [
        *figure_box("fires_position", "penalties by position", tenths),
        *figure_box("fires_kind", "penalties by kind", kinds),
    ]
    pairs = table(
        ["refused", "chosen instead", "times"],
        [[tag("code", p["refused"]), tag("code", p["chosen"]), p["count"]] for p in fires["pairs"]],
        numeric={2},
    )
    return join(
        [
            tag("h2", "Where the penalty fires"),
            tag("p", f"{fires['penalties']} penalties in EASD's runs; the most frequent refused → chosen pairs below."),
            tag("div", *boxes, class_="figures"),
            pairs,
        ]
    )


def _differences(study: dict) -> Html:
    found = study["differences"]
    if not found:
        return join([tag("h2", "Where SD and EASD answer differently"), tag("p", "Nowhere: every answer is the same.")])
    rows = []
    for d in found:
        token = "—" if d["token"] is None else d["token"]
        links = tag("a", "in the app", href=d["app_link"])
        if d["file"]:
            links = join([links, " · ", tag("a", "as one file", href=d["file"])])
        verdicts = lambda ok: "right" if ok else "wrong"  # noqa: E731
        rows.append(
            [
                tag("code", d["problem_id"]),
                tag("code", d["gold"]),
                join([tag("code", d["sd"]), f" {verdicts(d['sd_correct'])}"]),
                join([tag("code", d["easd"]), f" {verdicts(d['easd_correct'])}"]),
                token,
                links,
            ]
        )
    note = (
        "Each link opens SD (left) and EASD (right) at the token where they part: in the app started with "
        f"python app.py --eval-dir {study['folder']}, or, where one method was right and the other wrong, as the "
        "one-file export in differences/ beside this report."
    )
    header = ["problem", "gold", "SD", "EASD", "parts at token", "open"]
    return join([tag("h2", "Where SD and EASD answer differently"), tag("p", note), table(header, rows, numeric={4})])
