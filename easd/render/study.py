"""A study's report as one HTML file (`python -m easd study`): the verdict, accuracy with paired statistics, how many
problems it would take, speed, the method's grid (easd.render.grid: heatmaps over two settings, a line over one), where
it intervenes, the problems whose answers part (each a link into the app and a one-file export), and what was assumed.

Built like the one-file export (easd.render.export): every text through `tag`, which escapes it (token texts and
answers are model output), Plotly inlined, figures as JSON drawn by one hashed script, and a policy under which
nothing else runs and nothing is fetched.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .export import DRAW_FIGURES, figure_box, standalone_page
from .grid import grid_figures
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
    title = f"Does {study['method']['title']} help? {study['config']['pair']}"
    body = join(
        [
            above or Html(""),
            tag("h1", title),
            tag("p", study["verdict"], class_="verdict"),
            _accuracy(study),
            _power(study),
            _speed(study),
            _grid(study),
            _interventions(study),
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
    method = study["method"]
    title = method["title"]
    rows = []
    for row in study["accuracy"]:
        label = method["label"] if row["method"] == method["name"] else row["method"]
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
            f"{title} against SD",
            "pairs",
            "both right",
            f"only {title}",
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
        f"{title}'s text differs from SD's on {p.get('texts_differ', 0)} problems, its answer on {p.get('answers_differ', 0)}. "
        f"Target-only: {target['why']}."
    )
    header = ["method", "problems", "correct", "accuracy (95% Wilson)", "from"]
    return join([tag("h2", "Accuracy"), table(header, rows, numeric={1, 2}), paired, tag("p", note)])


def _power(study: dict) -> Html:
    """How many problems it would take: the lines the study wrote (easd.lab.study.power_lines)."""
    return join([tag("h2", "How many problems would it take?"), *[tag("p", line) for line in study["power_lines"]]])


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
    note = f"{study['speed_note']} The acceptance figures (vLLM's definitions) count every problem's drafts."
    return join([tag("h2", "Speed"), tag("p", note), table(header, rows, numeric={1, 2, 3, 4, 5, 6})])


def ranged(value: float | None, bounds: list[float] | None, form: str) -> str:
    """A median and, where repetitions differ, their range: 12.30 (11.90–12.80)."""
    if value is None:
        return "—"
    if not bounds or bounds[0] == bounds[1]:
        return form.format(value)
    return f"{form.format(value)} ({form.format(bounds[0])}–{form.format(bounds[1])})"


def _grid(study: dict) -> Html:
    grid, title = study["grid"], study["method"]["title"]
    if not grid["settings"]:
        return join([tag("h2", "Sensitivity"), tag("p", f"{title} declares no grid: no setting was varied.")])
    cells = pd.DataFrame(
        [
            {**cell["values"], "accuracy": cell["accuracy"], "interventions_per_1k": cell["interventions_per_1k"]}
            for cell in grid["cells"].values()
        ],
        columns=[*grid["settings"], "accuracy", "interventions_per_1k"],
    ).astype(float)
    figures = grid_figures(cells, title, tuple(grid["settings"]), {"SD": grid["sd_accuracy"]})
    boxes = [part for i, figure in enumerate(figures) for part in figure_box(f"grid_{i}", figure.layout.title.text, figure)]
    varied = " × ".join(grid["labels"])
    resumes = (
        f", each point resuming SD's run at its first {study['method']['intervention'][0]}" if study["method"]["follows"] else ""
    )
    note = f"{title} over its grid ({varied}) on the first {grid['problems']} problems{resumes}."
    return join([tag("h2", f"Sensitivity to {varied}"), tag("p", note), tag("div", *boxes, class_="figures")])


def _interventions(study: dict) -> Html:
    method, found = study["method"], study["interventions"]
    title, many = method["title"], method["intervention"][1]
    heading = tag("h2", f"Where {title} intervenes")
    if found is None:
        return join([heading, tag("p", f"{title} declares no interventions: every token is its own choice.")])
    tenths = go.Figure(go.Bar(x=[f"{10 * i}–{10 * (i + 1)}%" for i in range(len(found["by_tenth"]))], y=found["by_tenth"]))
    tenths.update_layout(
        title=f"{many.capitalize()} by where they fall in the answer", xaxis_title="share of the answer's tokens", height=320
    )
    kinds = go.Figure(go.Bar(x=list(found["by_kind"]), y=list(found["by_kind"].values())))
    kinds.update_layout(title=f"{many.capitalize()} by the {found['kind_of']}", height=320)
    boxes = [
        *figure_box("interventions_position", f"{many} by position", tenths),
        *figure_box("interventions_kind", f"{many} by kind", kinds),
    ]
    pairs = table(
        ["set aside", "chosen instead", "times"],
        [
            ["—" if p["set_aside"] is None else tag("code", p["set_aside"]), tag("code", p["chosen"]), p["count"]]
            for p in found["pairs"]
        ],
        numeric={2},
    )
    said = f"{found['count']} {many} in {title}'s runs; the most frequent set aside → chosen pairs below (—: the record names no token set aside)."
    return join([heading, tag("p", said), tag("div", *boxes, class_="figures"), pairs])


def _differences(study: dict) -> Html:
    found, title = study["differences"], study["method"]["title"]
    heading = tag("h2", f"Where SD and {title} answer differently")
    if not found:
        return join([heading, tag("p", "Nowhere: every answer is the same.")])
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
                join([tag("code", d["left"]), f" {verdicts(d['left_correct'])}"]),
                join([tag("code", d["right"]), f" {verdicts(d['right_correct'])}"]),
                token,
                links,
            ]
        )
    note = (
        f"Each link opens SD (left) and {title} (right) at the token where they part: in the app started with "
        f"python app.py --eval-dir {study['folder']}, or, where one method was right and the other wrong, as the "
        "one-file export in differences/ beside this report."
    )
    header = ["problem", "gold", "SD", title, "parts at token", "open"]
    return join([heading, tag("p", note), table(header, rows, numeric={4})])
