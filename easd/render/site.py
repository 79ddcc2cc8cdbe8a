"""Pages of a static site of recorded runs, evaluations and studies (`python -m easd site`, easd.cli.site).

Each run page is the one-file export's (easd.render.export: lanes, every token's inspector, figures, links to a token
as `#right-12`), drawn by the same renderers; what changes is where the scripts live. The site stores Plotly and the
page's script once, in assets/, and every page loads them from there: two lanes of 128 tokens of the embedded pair
make a 0.7 MB page (55 kB gzipped), with no 4.8 MB of Plotly in it again. The policy lets only the site's own script files run (`script-src 'self'`): no inline
script, nothing fetched from elsewhere. Not by hashes, as the one-file export does: opened from disk, Chromium
refuses an external script whose hash it is asked to check (a file: page has no origin to check it for), and a
site is opened from disk as often as it is served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from plotly.offline import get_plotlyjs

from .export import LAYOUT_CSS, SCRIPT, comparison_body, style_sheet
from .html import Html, join, tag
from .study import CSS as STUDY_CSS
from .study import study_body

ASSETS = {"plotly.min.js": get_plotlyjs, "site.js": lambda: SCRIPT}  # name -> its text, written once per site
POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; script-src 'self'"
SITE_CSS = """
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
nav.home { margin-bottom: 8px; }
li.entry { margin: 10px 0; }
"""


@dataclass
class Entry:
    """One line of the home page: a run, an evaluation or a study, and what a reader sees before opening it."""

    kind: str  # run | evaluation | study
    title: str
    href: str  # from the site's root
    facts: list[str] = field(default_factory=list)
    table: Html = Html("")  # an evaluation's accuracy, a study's verdict


def page(title: str, body: Html, depth: int, css: str = "") -> str:
    """A whole page of the site, `depth` folders below its root, loading the site's two scripts from assets/."""
    up = "../" * depth
    head = join(
        [
            Html('<meta charset="utf-8">'),
            tag("meta", http_equiv="Content-Security-Policy", content=POLICY),
            Html('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            tag("title", title),
            tag("style", Html(style_sheet() + LAYOUT_CSS + SITE_CSS + css)),
            # deferred, in this order: the lanes paint while Plotly's 4.8 MB is parsed, then the page script runs
            tag("script", src=f"{up}assets/plotly.min.js", defer=True),
            tag("script", src=f"{up}assets/site.js", defer=True),
        ]
    )
    return f'<!doctype html>\n<html lang="en"><head>{head}</head><body>{body}</body></html>\n'


def home_link(depth: int) -> Html:
    return tag("nav", tag("a", "← every run, evaluation and study", href="../" * depth + "index.html"), class_="home")


def run_page(traces: dict, depth: int = 1, drawn: Callable[[], object] = lambda: None) -> str:
    """A run's page (`drawn`: called after each token's details, see comparison_body)."""
    title, body = comparison_body(traces, above=home_link(depth), drawn=drawn)
    return page(title, body, depth)


def study_page(study: dict, runs: dict[str, str], depth: int = 1) -> str:
    """The study's report; `runs` maps each problem whose answers part to its run page (from the site's root)."""
    title = study["method"]["title"]
    links = [
        tag("li", tag("a", f"problem {problem}: SD and {title}, at the token where they part", href="../" * depth + href))
        for problem, href in runs.items()
    ]
    heading, body = study_body(study, above=home_link(depth))
    if links:
        body = join([body, tag("h2", "The runs where the answers part, on this site"), tag("ul", *links)])
    return page(heading, body, depth, STUDY_CSS)


def evaluation_page(entry: Entry, differences: list[dict], depth: int = 1) -> str:
    """An evaluation: its accuracy table and every problem where two methods answer differently, each a link to the
    two runs at the token where they part (where the folder kept its traces)."""
    rows = [
        tag(
            "tr",
            tag("td", str(d["problem_id"])),
            tag("td", d["gold"]),
            tag("td", d["left"]),
            tag("td", d["right"]),
            tag("td", tag("a", "open both runs", href="../" * depth + d["href"]) if d.get("href") else "traces not kept"),
        )
        for d in differences
    ]
    methods = differences[0]["methods"] if differences else ("", "")
    header = tag("tr", *[tag("th", h) for h in ("problem", "gold", *methods, "")])
    listed = tag("table", tag("thead", header), tag("tbody", *rows)) if rows else tag("p", "No problem where they differ.")
    body = join(
        [
            home_link(depth),
            tag("h1", entry.title),
            tag("p", " · ".join(entry.facts)),
            entry.table,
            tag("h2", f"Where {methods[0]} and {methods[1]} answer differently" if differences else "Where they differ"),
            listed,
        ]
    )
    return page(entry.title, body, depth)


def home_page(title: str, entries: list[Entry]) -> str:
    sections = []
    for kind, heading in (("study", "Studies"), ("evaluation", "Evaluations"), ("run", "Runs")):
        chosen = [e for e in entries if e.kind == kind]
        if chosen:
            items = [
                tag("li", tag("a", e.title, href=e.href), tag("div", " · ".join(e.facts)), e.table, class_="entry")
                for e in chosen
            ]
            sections.append(join([tag("h2", heading), tag("ul", *items)]))
    body = join([tag("h1", title), tag("p", "Speculative decoding (SD) and entropy-aware SD (EASD), side by side."), *sections])
    return page(title, body, 0)


def accuracy_table(summary) -> Html:
    """An evaluation's accuracy per method, from its summary (easd.lab.reports.report.summary_table)."""
    rows = [
        tag(
            "tr",
            tag("td", str(r["method"])),
            tag("td", f"{100 * r['accuracy']:.1f}%", class_="n"),
            tag("td", f"{r['runs']:.0f}", class_="n"),
            tag("td", f"{r['tokens_per_s']:.2f}", class_="n"),
        )
        for _, r in summary.iterrows()
    ]
    header = tag("tr", *[tag("th", h) for h in ("method", "accuracy", "runs", "tokens/s")])
    return tag("table", tag("thead", header), tag("tbody", *rows))
