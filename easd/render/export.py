"""One comparison as one HTML file: both lanes, every token's inspector, the legend, the figures and the runs'
figures, opened from disk or a Static Space with no server and no network (`python -m easd export-html`, and the
page's "one HTML file" download, which a gallery recording opened on the page offers too). No Gradio here: the
command line draws the file as the page does.

Everything is drawn by the page's own renderers (easd.render: lanes, inspector, stats, figures), once per token, as the
page would show it under the run's own settings: the method and the inspector are not written again in JavaScript.
The file's one script only shows the inspector of the token clicked or chosen with the keyboard, and draws the
figures with Plotly, which the file carries. Token texts are escaped like everywhere else, and the file also says,
in its Content-Security-Policy, that only these two scripts (by their hashes) may run and that nothing may be
fetched: a token text that slipped through as markup would still run nothing and reach nothing.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from pathlib import Path

from plotly.offline import get_plotlyjs

from ..errors import EasdError
from ..method.compare import LANES, first_difference, verifying, whatif_lane
from ..method.trace import Trace
from ..method.whatif import RuleView
from . import figures
from .html import Html, join, tag
from .inspector import inspector_html
from .lanes import lane_html, lane_title, legend_html, origin_css
from .stats import comparison_html, speed_html, stats_html

STYLE = Path(__file__).resolve().parents[2] / "assets" / "style.css"  # the page's own style sheet
NOTHING_YET = "nothing to put in a file yet: run a comparison, or open one, first"
# Draws each figure from the JSON beside its box (`figure_box`); the study's report runs it alone.
DRAW_FIGURES = """
  for (const data of document.querySelectorAll('script[data-figure]')) {
    const figure = JSON.parse(data.textContent);
    Plotly.newPlot(data.previousElementSibling, figure.data, figure.layout, {displaylogo: false, responsive: true});
  }
"""
# Shows the chosen token's inspector (its <template>, rendered in Python), marks the token, keeps the address's
# #lane-position in step so a link opens on that token, and draws the figures from their JSON.
SCRIPT = (
    """
(() => {
  const inspector = document.getElementById('inspector') || document.createElement('div');  // a page without tokens
  const hint = inspector.innerHTML;
  let chosen = null;
  const spanAt = (lane, pos) => document.querySelector(`span[data-lane="${lane}"][data-pos="${pos}"]`);
  function choose(span, focus) {
    if (chosen) { chosen.classList.remove('sel'); chosen.setAttribute('aria-pressed', 'false'); }
    chosen = span;
    if (!span) { inspector.innerHTML = hint; return; }
    span.classList.add('sel'); span.setAttribute('aria-pressed', 'true');
    const details = document.getElementById(`i-${span.dataset.lane}-${span.dataset.pos}`);
    inspector.replaceChildren(details.content.cloneNode(true));
    if (focus) span.focus({preventScroll: true});
    try { history.replaceState(null, '', `#${span.dataset.lane}-${span.dataset.pos}`); } catch (e) {}
  }
  document.addEventListener('click', (event) => {
    const span = event.target.closest('span[data-pos]');
    if (span) choose(span, true);
    else if (event.target.closest('button.close')) choose(null);
  });
  document.addEventListener('keydown', (event) => {
    const span = event.target.closest && event.target.closest('span[data-pos]');
    if (!span) return;
    const step = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1}[event.key];
    if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); choose(span, true); }
    else if (step) {
      const next = spanAt(span.dataset.lane, parseInt(span.dataset.pos) + step);
      if (next) { event.preventDefault(); choose(next, true); }
    }
  });
"""
    + DRAW_FIGURES
    + """  const wanted = /^#(left|right)-(\\d+)$/.exec(location.hash);
  const first = wanted && spanAt(wanted[1], wanted[2]);
  if (first) { choose(first, true); first.scrollIntoView({block: 'center'}); }
})();
"""
)
# The page's layout in a file of its own: lanes beside the inspector, stacked on a phone (where style.css makes the
# inspector a sheet over the bottom of the screen).
LAYOUT_CSS = """
body { font-family: system-ui, sans-serif; margin: 0 auto; padding: 12px; max-width: 1400px; color: #111; background: #fff; }
.columns { display: flex; gap: 16px; align-items: flex-start; }
#main { flex: 3; min-width: 0; }
#side { flex: 2; min-width: 0; }
.lanes { display: flex; gap: 12px; }
.lanes > section { flex: 1; min-width: 0; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 8px; }
.figure { min-height: 360px; }
pre.prompt { white-space: pre-wrap; background: #f7f7f7; padding: 8px; border-radius: 6px; }
@media (max-width: 768px) { .columns, .lanes { flex-direction: column; } .figures { grid-template-columns: 1fr; } }
"""


def comparison_file(traces: dict[str, Trace | None]) -> str:
    """The whole file for a comparison's two lanes (a lane may be None)."""
    title, body = comparison_body(traces)
    return standalone_page(title, body, SCRIPT, LAYOUT_CSS)


def comparison_body(
    traces: dict[str, Trace | None], above: Html | None = None, drawn: Callable[[], object] = lambda: None
) -> tuple[str, Html]:
    """(title, body) of a comparison's page: lanes, inspector, figures and every token's details (`above` goes
    first: a static site's way home; `drawn` is called after each token's details, the most of a long run's time:
    a static site's progress bar)."""
    traces = {lane: traces.get(lane) for lane in LANES}
    shown = next((t for t in traces.values() if t is not None and t.records), None)
    if shown is None:
        raise EasdError(NOTHING_YET)
    body = join(
        [
            above or Html(""),
            tag("h1", "EASD Lab: ", " | ".join(lane_title(lane, t) for lane, t in traces.items())),
            tag("pre", shown.prompt, class_="prompt"),
            legend_html(t.settings.method for t in traces.values() if t is not None),
            tag("div", tag("div", _lanes(traces), id="main"), _side(), class_="columns"),
            _figures(traces),
            *_inspectors(traces, drawn),
        ]
    )
    return f"EASD Lab: {' '.join(shown.prompt.split())[:80]}", body


def style_sheet() -> str:
    """The page's own style sheet and the lanes' colours of every origin (easd.render.lanes.origin_css)."""
    return STYLE.read_text(encoding="utf-8") + "\n" + origin_css() + "\n"


def standalone_page(title: str, body: Html, script: str, css: str) -> str:
    """A whole HTML file that needs nothing but itself: the page's style sheet and `css`, Plotly inlined, and a
    Content-Security-Policy under which only Plotly and `script` (by their hashes) run and nothing is fetched."""
    plotly = get_plotlyjs()
    policy = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; script-src {_hash(plotly)} {_hash(script)}"
    head = join(
        [
            Html('<meta charset="utf-8">'),
            tag("meta", http_equiv="Content-Security-Policy", content=policy),
            Html('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            tag("title", title),
            tag("style", Html(style_sheet() + css)),
            tag("script", Html(plotly)),
        ]
    )
    return f'<!doctype html>\n<html lang="en"><head>{head}</head><body>{body}{tag("script", Html(script))}</body></html>\n'


def figure_box(name: str, title: str, figure) -> list[Html]:
    """A Plotly figure as an empty box and its JSON beside it, which a file's script draws (`DRAW_FIGURES`)."""
    data = figure.to_json().replace("<", "\\u003c")  # no "</script>" can end the data early
    return [tag("div", class_="figure", id=f"figure_{name}", aria_label=title), _data(data)]


def _lanes(traces: dict[str, Trace | None]) -> Html:
    fork = first_difference(traces["left"], traces["right"])
    sections = [
        tag(
            "section",
            tag("h3", lane_title(lane, trace)),
            tag("div", lane_html(lane, trace, fork=fork, limit=None), class_="prose lane", id=f"lane_{lane}"),  # every token
            stats_html(trace),
        )
        for lane, trace in traces.items()
    ]
    comparison = comparison_html(traces["left"], traces["right"], fork)
    return join([tag("div", *sections, class_="lanes"), comparison, speed_html(verifying(traces))])


def _side() -> Html:
    return tag("div", tag("div", inspector_html("", None, None, RuleView()), id="inspector"), id="side")


def _inspectors(traces: dict[str, Trace | None], drawn: Callable[[], object]) -> list[Html]:
    """Every token's inspector under its run's own rule, each in an inert <template> the script copies from."""
    templates = []
    for lane, trace in traces.items():
        if trace is None:
            continue
        view = RuleView.of(trace.settings)  # once a lane: the same for each of its tokens
        for record in trace.records:
            templates.append(tag("template", inspector_html(lane, trace, record, view), id=f"i-{lane}-{record.position}"))
            drawn()
    return templates


def _figures(traces: dict[str, Trace | None]) -> Html:
    """The page's figures for the whole runs (none selected), each as a box and its JSON, which the script draws."""
    trace = traces["right"] or traces["left"]
    sd_lane = whatif_lane(traces)
    focus = figures.Focus(
        trace=trace,
        sd=traces[sd_lane] if sd_lane else None,
        speculative=verifying(traces),
        view=RuleView.of(trace.settings),
        selected=None,
        fork=first_difference(traces["left"], traces["right"]),
    )
    boxes = [box for name, (title, draw) in figures.FIGURES.items() for box in figure_box(name, title, draw(focus))]
    return tag("div", *boxes, class_="figures")


def _data(text: str) -> Html:
    """JSON in a script element that never runs (its type is not JavaScript), read by the file's script."""
    return Html(f'<script type="application/json" data-figure>{text}</script>')


def _hash(script: str) -> str:
    """A script's hash as a Content-Security-Policy source: only scripts with these hashes run."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"
