"""What the Compare tab shows of a session: its lanes, panels, files and message line, as updates keyed by component.

Renderers only draw traces (and the what-if's marks, easd.method.whatif); they never decode or recompute the method.
"""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from easd.errors import EasdError, SettingsError
from easd.method.compare import LANES, whatif_method
from easd.method.methods import METHODS
from easd.method.trace import Trace
from easd.method.whatif import RuleView, whatif_marks
from easd.render import figures
from easd.render.html import Html, join, tag
from easd.render.inspector import inspector_html
from easd.render.lanes import lane_html, lane_title, legend_html
from easd.render.search import Search
from easd.render.stats import comparison_html, speed_html, stats_html
from easd.render.stepper import block_views, stepper_html

from .controls import api_words, page_name, page_words
from .links import link_html
from .page import Page
from .session import Session


def say(text: str) -> Html:
    """A line for the page's message area, escaped (it may quote a file name or a bad value)."""
    return tag("p", text) if text else Html("")


def render_lanes(page: Page, session: Session, view: RuleView) -> dict:
    traces, fork = session.traces, session.fork
    marks, sd_lane = _whatif_marks(session, read_as(session, view)), session.whatif_lane()
    found = {lane: set(session.search.positions(traces[lane])) if session.search else set() for lane in LANES}
    finished = join([comparison_html(traces["left"], traces["right"], fork), speed_html(session.speculative())])
    out = {page.comparison: finished if not session.running else Html("")}
    for lane in LANES:
        selected = session.selected[1] if session.selected and session.selected[0] == lane else None
        whatif = marks if lane == sd_lane else None
        out[page.titles[lane]] = title_html(session, lane)
        out[page.lanes[lane]] = lane_html(
            lane,
            traces[lane],
            selected=selected,
            fork=fork,
            whatif=whatif,
            found=found[lane],
            running=session.running,
            spans=page.spans,
        )
        out[page.stats[lane]] = stats_html(traces[lane], running=session.running)
    out[page.found] = found_html(session.search, found)
    out[page.legend] = legend_html(session.lane_methods())
    return out


def title_html(session: Session, lane: str) -> Html:
    """A lane's heading: its run's method, and where its picker has moved since, that the run is the previous request's
    and which method the next one runs."""
    title = lane_title(lane, session.traces[lane])
    if not session.stale(lane):
        return tag("h3", title)
    chosen = METHODS[session.chosen[lane]].title
    return tag("h3", title, tag("span", f" · previous run; next: {chosen}", class_="stale"))


def found_html(search: Search | None, found: dict[str, set[int]]) -> Html:
    """How many tokens of each lane the search matched (nothing without a search)."""
    if search is None:
        return Html("")
    counts = ", ".join(f"{lane} {len(positions)}" for lane, positions in found.items())
    total = sum(len(positions) for positions in found.values())
    return tag("p", f"{total} token(s) match “{search.text}” ({counts}); Enter or next match › steps through them.")


def read_as(session: Session, view: RuleView) -> RuleView:
    """The sliders' view, reading SD's run as the lanes ask: as their relaxed rule where one runs, else as EASD."""
    return replace(view, reads_as=whatif_method(session.traces))


def _whatif_marks(session: Session, view: RuleView):
    """What the view's method would have done otherwise on the SD lane's run (None without a finished SD run)."""
    sd = _whatif_trace(session)
    return None if sd is None else whatif_marks(sd, view)


def _whatif_trace(session: Session) -> Trace | None:
    """The SD run the what-if re-reads: a finished one, in either lane, not too long to re-read per slider move."""
    lane = session.whatif_lane()
    sd = session.traces[lane] if lane is not None and not session.running else None
    return sd if sd is not None and len(sd.records) <= MAX_WHATIF_ROWS else None


def render_panels(page: Page, session: Session, view: RuleView) -> dict:
    lane, record = session.selected_record()
    view = read_as(session, view)
    trace = session.traces.get(lane or "right") or session.traces["left"]
    selected = session.selected[1] if record is not None else None
    sd = _whatif_trace(session)
    focus = figures.Focus(trace=trace, sd=sd, speculative=session.speculative(), view=view, selected=selected, fork=session.fork)
    views = block_views(session.traces.get(session.step_lane))
    out = {page.figures[name]: draw(focus) for name, (_, draw) in figures.FIGURES.items()}
    out[page.inspector] = join(
        [inspector_html(lane, session.traces.get(lane), record, view), link_html(session.link, session.selected)]
    )
    out[page.stepper] = stepper_html(lane_title(session.step_lane, session.traces.get(session.step_lane)), views, session.step)
    return out


def render_files(page: Page, paths: tuple[str, str] | None) -> dict:
    """The download buttons, for the files at `paths` (CSV, JSON) or off for None; the one-file HTML of an earlier
    run and its site, if any, go (Make makes the current ones)."""
    made = {
        page.make_html: gr.Button(interactive=paths is not None),
        page.html_file: gr.File(value=None, visible=False),
        page.make_site: gr.Button(interactive=paths is not None),
        page.site_file: gr.File(value=None, visible=False),
    }
    if paths is None:
        return made | {
            button: gr.DownloadButton(value=None, interactive=False) for button in (page.download_csv, page.download_json)
        }
    return made | {
        page.download_csv: gr.DownloadButton(value=paths[0], interactive=True),
        page.download_json: gr.DownloadButton(value=paths[1], interactive=True),
    }


def render_all(page: Page, session: Session, view: RuleView, message: str = "") -> dict:
    """Everything the page shows of a session, the session itself included (so Gradio's time limit counts from now)."""
    return (
        render_lanes(page, session, view)
        | render_panels(page, session, view)
        | render_files(page, None if session.running else session.export(page.downloads))
        | {page.message: say(message), page.state: session}
        | no_fix(page)
        | {page.guide: gr.Accordion(open=False)}
    )


def offer_fix(page: Page, err: SettingsError) -> dict:
    """A refusal that one value of its setting answers: the message, and under it a button that sets it and runs again
    ("Check each step by confidence alone: set SpecGuard grounding to none and run again")."""
    does = err.fix.does
    words = f"{does[:1].upper()}{does[1:]}: set {page_name(err.setting)} to {err.fix.value} and run again"
    return {page.message: say(in_page_words(err)), page.fix: gr.Button(words, visible=True)}


def no_fix(page: Page) -> dict:
    """The remedy's button gone: a run under way or a page drawn again has nothing to answer."""
    return {page.fix: gr.Button(visible=False)}


def in_page_words(err: EasdError) -> str:
    return "⚠️ " + (page_words(err) if isinstance(err, SettingsError) else str(err))


def in_api_words(err: EasdError) -> str:
    return api_words(err) if isinstance(err, SettingsError) else str(err)


def render_lanes_and_panels(page: Page, session: Session, view: RuleView) -> dict:
    return render_lanes(page, session, view) | render_panels(page, session, view)


def stop_note(session: Session) -> str:
    counts = [
        f"{lane_title(lane, t)} {len(t.records)} tokens ({t.stats.stop_reason})"
        for lane, t in session.traces.items()
        if t is not None
    ]
    return ", ".join(counts)


MAX_WHATIF_ROWS = 200_000  # rows re-read per slider move or click (outside the queue); a bigger trace is shown, not re-read
