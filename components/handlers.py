"""What the Compare tab's events do: named functions that take the page (and the host) explicitly.

Each handler gets its inputs as one dict keyed by component (its event's inputs are a set) and
returns a dict keyed by component, so no list of outputs is counted by hand. Every value from the
page passes `components.controls` first; every error a user can act on comes back as one line in the page's
words (a slider's label, never a command-line flag). Handlers only render traces and hand work to
the engine; none of them re-implements the method.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from pathlib import Path

import gradio as gr

from easd.errors import EasdError, SettingsError, shown
from easd.method.compare import LANES, first_difference
from easd.method.summary import intervened
from easd.method.trace import Trace
from easd.method.whatif import RuleView
from easd.render.export import NOTHING_YET
from easd.render.html import tag
from easd.render.lanes import lane_title
from easd.render.search import Search
from easd.render.stepper import block_views, stepper_html
from easd.serving.estimates import lane_cost
from easd.serving.host import ModelHost
from easd.serving.tickets import Stream
from easd.traces import files as trace_io

from . import evaluation
from .controls import check_prompt
from .evaluation import EvaluationTab
from .export import file_aside, site_aside
from .gallery import Gallery
from .gradio_internals import Outbox, event_data
from .intake import CompareRequest, client_of
from .links import Link, eval_folder, folder_name
from .news import news
from .page import Page
from .rooms import ROOM_EVERY_S, Room
from .session import Session, Sessions, in_lanes
from .views import (
    in_page_words,
    no_fix,
    offer_fix,
    render_all,
    render_files,
    render_lanes,
    render_lanes_and_panels,
    render_panels,
    say,
    stop_note,
)

LANES_EVERY_S = 0.25  # at most four lane updates a second: faster only floods the browser with HTML
RECONNECT_S = 5.0  # a heartbeat that ended and comes back within this long was no goodbye (a browser retries in about 3 s)
log = logging.getLogger("easd.app")
# --- rendering a session ----------------------------------------------------------------------------


# --- the handlers -------------------------------------------------------------------------------


def generate(page: Page, host: ModelHost, outbox: Outbox, values: dict, request: gr.Request):
    """Run the two lanes' methods (SD | EASD unless chosen otherwise) side by side in the shared batch, streaming the
    lanes; figures and files once it ends.

    While it streams, each update is the lanes (which only grow, so Gradio sends the new spans) and
    a message line: the page's work per block stays small however long the run.
    """
    session: Session = values[page.state]
    if session.watching is not None:
        raise EasdError(
            f"this page watches room {session.watching.code}, so it shows the presenter's runs; "
            "to run your own, open the app's address without ?room="
        )
    view = page.controls.read_view(values)
    settings = page.controls.read_settings(values, host.max_new_tokens_cap)
    methods = {lane: values[page.methods[lane]] for lane in LANES}
    asked = CompareRequest.check(host, values[page.pair], values[page.prompt], settings, values[page.controls.chat], methods)
    for place in host.waiting_for(asked.pair):
        yield {page.message: say(waiting_for_pair(host, asked.pair, place))}
    try:
        comparison = asked.comparison(host)
    except SettingsError as err:  # a lane's method refused the pair, the page offers the remedy where one value gives it
        if err.fix is None:
            raise
        session.offered = err
        yield offer_fix(page, err)
        return
    if session.offered is not None:  # this run is under way: the last one's remedy is moot
        session.offered = None
        yield no_fix(page)
    client = client_of(request)
    uptake = outbox.uptake(client.session)
    with host.stream(asked.pair, comparison.generations.values(), client, uptake.took_any) as stream:
        session.clear()
        session.chosen = methods
        page.sessions.track(client.session, session)
        session.stream, session.running = stream, True
        if session.room is not None:  # the room's viewers follow this run from now on
            session.room.show(stream.ticket, asked.prompt, {lane: g.settings for lane, g in comparison.generations.items()})
        try:
            for _ in news(stream, LANES_EVERY_S, uptake):
                if stream.position:  # still in line: say where
                    yield {page.message: say(in_line(stream))}
                    continue
                session.show(stream)
                yield render_lanes(page, session, view) | {page.message: say(sharing(stream))}
        finally:
            session.running = False
    session.show(stream)
    if stream.error is not None:
        yield render_all(page, session, view) | {page.message: say(in_page_words(stream.error))}
        return
    ended = "Stopped" if stream.cancelled else "Done"  # Stop, or a stream nobody read
    yield render_all(
        page, session, view, message=" ".join(filter(None, (f"{ended}: {stop_note(session)}.", SHARED.get(stream.how))))
    )


def in_line(stream: Stream) -> str:
    """Where a waiting request stands: "3rd in line: starts in about 20 s, done in about 45 s"."""
    starts, ends = (max(1, round(s)) for s in stream.estimate())
    return (
        f"⏳ {ordinal(stream.position)} in line: starts in about {starts} s, done in about {ends} s "
        "(from the batch's measured speed). Every user's runs share one batch, which is full."
    )


def waiting_for_pair(host: ModelHost, name: str, place: int) -> str:
    """Where a request that came while its pair loads stands: "1st of 2 waiting for tiny-random: loading… 3 s (…)"."""
    state = host.states[name]
    return f"⏳ {ordinal(place)} of {len(state.waiters)} waiting for the pair {name}: {state.describe()}; your run starts when it is ready"


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def sharing(stream: Stream) -> str:
    """Where the result comes from, how many share the batch, and what a lane of several rows costs the others."""
    others = stream.sharing - 1
    batch = f"Decoding in a batch shared with {others} other user{'s' if others != 1 else ''}." if others > 0 else ""
    ticket = stream.ticket
    costs = dict.fromkeys(lane_cost(g.method.title, g.width, ticket.allowance) for g in ticket.generations)  # once each
    return " ".join(filter(None, (SHARED.get(stream.how, ""), batch, *costs)))


SHARED = {  # where a stream's result comes from, when not from its own request (easd.serving.same_request)
    "joined": "Someone asked for exactly this a moment ago: you are watching the same run, computed once.",
    "replayed": "This exact request was computed a moment ago: replayed at once, no model time.",
}


def present(page: Page, values: dict, request: gr.Request) -> dict:
    """Open this page's room (or show its code again): viewers who open the app with ?room=CODE watch its runs."""
    session: Session = values[page.state]
    if session.watching is not None:
        raise EasdError(f"this page watches room {session.watching.code}; a viewer cannot present")
    presenter = client_of(request).session
    page.sessions.track(presenter, session)
    room = session.room = page.rooms.open(presenter)
    link = tag("a", f"?room={room.code}", href=f"?room={room.code}", target="_blank")
    line = tag(
        "p",
        tag("b", f"📡 Presenting in room {room.code}."),
        " Viewers open this page's address with ",
        link,
        " and watch your runs as they stream, each in their own page. The room ends when you close this tab.",
    )
    return {page.message: line, page.state: session}


async def follow_room(page: Page, host: ModelHost, values: dict, request: gr.Request):
    """A viewer's page (opened with ?room=CODE) follows the presenter's runs: each new run's prompt, settings and
    lanes as they stream, then its figures and files; no model time, and nothing here reaches the presenter's run."""
    code = request.query_params.get("room") if request is not None else None
    if not code:
        yield {page.message: gr.skip()}  # one update that changes nothing: a generator that yields none resets every output
        return
    session: Session = values[page.state]
    room = page.rooms.get(code)
    if room is None:
        raise EasdError(f"there is no room {str(code)[:12]!r} here (it ends when its presenter closes their tab)")
    room.enter()
    client = client_of(request)
    page.sessions.track(client.session, session)
    session.watching, shown = room, 0
    try:
        yield {page.message: say(f"👀 Watching room {room.code}: the presenter's runs appear here as they start.")}
        while not room.ended:
            showing = room.showing
            if showing is None or showing.number == shown:
                await asyncio.sleep(ROOM_EVERY_S)
                continue
            shown = showing.number
            session.clear()
            stream = session.stream = showing.ticket.open_stream(owner=client.session, how="watched", passive=True)
            session.running = True
            view = RuleView.of(showing.lanes["right"])
            context = page.controls.show(showing.lanes["right"], host.max_new_tokens_cap) | {page.prompt: showing.prompt}
            context |= {page.methods[lane]: settings.method for lane, settings in showing.lanes.items()}
            session.chosen = {lane: settings.method for lane, settings in showing.lanes.items()}  # the pickers, moved
            context |= {page.message: say(f"👀 Room {room.code}: the presenter's run {shown}."), page.state: session}
            empty = _for_viewer(room, (shown, "start"), stream, session, partial(render_lanes_and_panels, page, session, view))
            yield empty | render_files(page, None) | context  # the figures, once for the room, not once a viewer
            seen = -1
            while not stream.done and not room.ended and room.showing is showing:
                tick = await _room_tick()
                if stream.version != seen:
                    seen = stream.version
                    session.show(stream)
                    yield _for_viewer(room, (shown, tick, "lanes"), stream, session, partial(render_lanes, page, session, view))
            session.running = False
            session.show(stream)
            ended = {page.message: say(f"👀 Room {room.code}: the presenter's run {shown}, as it ended."), page.state: session}
            done = (shown, stream.version, stream.cancelled, session.step_lane, session.step)
            final = _for_viewer(room, done, stream, session, partial(render_lanes_and_panels, page, session, view))
            files = (
                render_files(page, session.export(page.downloads))
                if stream.left is not None
                else room.shared((*done, "files"), partial(_room_files, page, room, session))
            )
            yield final | files | ended
        yield {page.message: say(f"Room {room.code} has ended: its presenter left.")}
    finally:
        room.leave()
        session.watching = None


async def _room_tick() -> int:
    """Sleep until the room's clock next ticks (every ROOM_EVERY_S); -> the tick's number. Every viewer wakes on the
    same tick and shares that tick's one render: a run's version changes several times a second, so viewers that woke
    at their own moments would each read another version and render it again."""
    await asyncio.sleep(ROOM_EVERY_S - time.monotonic() % ROOM_EVERY_S)
    return round(time.monotonic() / ROOM_EVERY_S)


def _room_files(page: Page, room: Room, session: Session) -> dict:
    """The finished run's downloads, written once into the room's own folder for every viewer who kept the whole run
    (a folder no viewer's Clear or next run deletes: it goes when the room ends)."""
    return render_files(page, room.files.write(list(session.traces.values()), page.downloads))


def _for_viewer(room: Room, key: tuple, stream: Stream, session: Session, render) -> dict:
    """A viewer's update: shared by the room's viewers while they show the same, rendered alone once they select a
    token or stop their view (their own page, their own selection, the traces they kept)."""
    return room.shared(key, render) if session.selected is None and stream.left is None else render()


def stop(page: Page, values: dict) -> dict:
    """Stop this page's run: its rows leave the shared batch at the next block boundary, and the run's own
    handler then shows everything emitted ("Stopped: …"). A second click, or Stop after the end, changes nothing."""
    stream = values[page.state].stream
    if stream is not None and not stream.done:
        stream.cancel()
    return gr.skip()


async def leave(host: ModelHost, sessions: Sessions, outbox: Outbox, request: gr.Request) -> None:
    """Gradio says the tab closed: its runs leave the shared batch at the next block boundary ("left"); its traces and
    files go. Gradio says so when the session's heartbeat connection ends, which also happens to a client that is still
    there (on a busy server gradio_client gives up on a late heartbeat; a browser reconnects its own): a client that
    still holds a connection open, or opens one within RECONNECT_S, keeps its runs and its page."""
    client = client_of(request)
    if await outbox.still_connected(client.session, RECONNECT_S):
        log.info("a session's heartbeat ended while it is still connected; its runs go on")
        return
    host.cancel(client, "left")
    sessions.close(client.session)


def make_html(page: Page, values: dict) -> dict:
    """Both lanes as one HTML file that opens anywhere offline (components.export), offered for download; it is made
    from the session's JSON download in a process of its own (`export.file_aside`)."""
    session: Session = values[page.state]
    lanes, source = _finished_download(session)
    path = session.downloads.made_path(list(session.traces.values()), page.downloads, ".html")
    file_aside(source, lanes, path)
    line = "One file with both lanes, every token's details and the figures: it opens in any browser, offline."
    return {page.html_file: gr.File(value=str(path), visible=True), page.message: say(line)}


def make_site(page: Page, values: dict) -> dict:
    """Both lanes as a static site (easd.lab.site: a home page, the run's page, Plotly once, a Space's README),
    zipped for download; made from the session's JSON download in the same process of its own as the one file."""
    session: Session = values[page.state]
    lanes, source = _finished_download(session)
    path = session.downloads.made_path(list(session.traces.values()), page.downloads, "-site.zip")
    site_aside([source], f"EASD Lab: {' '.join(session.traces[lanes[0]].prompt.split()[:8])}", path)
    line = "A static site of both lanes: unzip it and open index.html, or publish the folder as a Static Space (docs)."
    return {page.site_file: gr.File(value=str(path), visible=True), page.message: say(line)}


def _finished_download(session: Session) -> tuple[list[str], Path]:
    """The lanes that hold tokens, and the session's JSON download of their runs (in that order), once the run ended."""
    if session.running:
        raise EasdError("the run is still going; make the file once it has ended")
    lanes = [lane for lane, trace in session.traces.items() if trace is not None and trace.records]
    source = session.downloads.latest_json()  # its runs are those lanes', in order
    if not lanes or source is None:
        raise EasdError(NOTHING_YET)
    return lanes, source


def clear(page: Page, values: dict) -> dict:
    session: Session = values[page.state]
    session.clear()
    return render_all(page, session, page.controls.read_view(values)) | {page.prompt: ""}


def rerender(page: Page, values: dict) -> dict:
    """A what-if slider moved: re-read the finished traces under the new rule view, no model call."""
    session: Session = values[page.state]
    view = page.controls.read_view(values)
    return (
        render_lanes(page, session, view)
        | render_panels(page, session, view)
        | {page.controls.tau_o_meaning: view.overlap_meaning()}
    )


def choose_method(page: Page, values: dict) -> dict:
    """A lane's method was picked (or moved to a loaded run's): the lanes' titles say which run they show and which the
    next runs, the legend lists what the lanes' methods may show, and their own settings (only theirs) are in view.
    Nothing runs until Generate."""
    session: Session = values[page.state]
    session.chosen = {lane: values[page.methods[lane]] for lane in LANES}
    return render_lanes(page, session, page.controls.read_view(values)) | page.controls.follow(session.chosen.values())


def select_token(page: Page, values: dict, event: gr.EventData) -> dict:
    """A token was clicked, tapped or chosen by keyboard (lane "" closes the details); the stepper follows it."""
    session: Session = values[page.state]
    data = event_data(event)
    lane, index = data.get("lane"), data.get("pos")
    if lane == "":
        session.selected = None
    elif lane in LANES and isinstance(index, int) and not isinstance(index, bool):
        session.select(lane, index)
    view = page.controls.read_view(values)
    return render_lanes(page, session, view) | render_panels(page, session, view) | {page.step_lane: session.step_lane}


def find(page: Page, delta: int, values: dict) -> dict:
    """The search box read (easd.render.search) and its matches marked; the selection moves to the next match after it
    (`delta` +1: Enter or next ›) or the one before (-1), around the ends, left lane first."""
    session: Session = values[page.state]
    view = page.controls.read_view(values)
    try:
        session.search = Search.read(values[page.search])
    except SettingsError as err:  # said where the count stood, and none of the last filter's marks or count stays
        session.search = None
        return render_lanes(page, session, view) | {page.found: say(in_page_words(err))}
    hits = [(lane, i) for lane in LANES for i in session.search.positions(session.traces[lane])] if session.search else []
    if hits:
        place = {lane: n for n, lane in enumerate(LANES)}  # reading order: the left lane, then the right
        here = (place[session.selected[0]], session.selected[1]) if session.selected else (-1, -1)
        if delta > 0:
            later = [hit for hit in hits if (place[hit[0]], hit[1]) > here]
            session.select(*(later[0] if later else hits[0]))
        else:
            earlier = [hit for hit in hits if (place[hit[0]], hit[1]) < here]
            session.select(*(earlier[-1] if earlier else hits[-1]))
    return render_lanes(page, session, view) | render_panels(page, session, view) | {page.step_lane: session.step_lane}


def step(page: Page, delta: int, values: dict) -> dict:
    """Move the step-through by `delta` blocks (0: the lane changed, start again)."""
    session: Session = values[page.state]
    lane = values[page.step_lane]
    if lane not in LANES:
        return gr.skip()  # change nothing (an empty dict would be read as one output)
    views = block_views(session.traces.get(lane))
    session.step = 0 if lane != session.step_lane else min(max(session.step + delta, 0), max(len(views) - 1, 0))
    session.step_lane = lane
    return {page.stepper: stepper_html(lane_title(lane, session.traces.get(lane)), views, session.step)}


def load_file(page: Page, host: ModelHost, values: dict, request: gr.Request = None) -> dict:
    session: Session = values[page.state]
    page.sessions.track(client_of(request).session, session)
    path = values[page.upload]
    try:
        traces = trace_io.load(path)
        if not traces:
            raise EasdError("the file holds no runs")
    except EasdError as err:
        # the upload's server path is no business of the browser: name the file as the user knows it
        reason = in_page_words(err).removeprefix("⚠️ ").replace(str(path), _file_name(path))
        return {page.message: say(f"⚠️ Could not load that file: {reason}")}
    return show_loaded(page, host, session, session.load_traces(traces, _file_name(path)))


def open_recorded(page: Page, host: ModelHost, gallery: Gallery, values: dict, request: gr.Request = None) -> dict:
    """A comparison from the gallery: loaded like a file, with no model involved."""
    key = values[page.recorded]
    if key is None:
        return gr.skip()
    session: Session = values[page.state]
    page.sessions.track(client_of(request).session, session)
    recording, traces = gallery.open(key)
    loaded = session.load_traces(traces, f"the gallery ({recording.title})")
    session.link = Link({"run": key})
    return show_loaded(page, host, session, f"{loaded}. {recording.shows}")


def open_difference(
    page: Page, host: ModelHost, tab: EvaluationTab, tabs: gr.Tabs, values: dict, event: gr.SelectData, request: gr.Request = None
) -> dict:
    """A difference clicked in the Evaluation tab: both runs in the lanes and the Compare tab in front (`show_runs`).
    No model is involved."""
    chosen = evaluation.chosen_runs(tab, values, event)
    if chosen is None:
        return gr.skip()
    traces, (problem, sample) = chosen
    session: Session = values[page.state]
    page.sessions.track(client_of(request).session, session)
    folder = folder_name(values[tab.traces].parent)
    link = Link({"eval": folder, "problem": problem, "sample": str(sample), **_methods_of(traces)})
    shown = show_runs(page, host, session, traces, link, f"Opened problem {problem} (sample {sample}) of {folder}")
    return shown | {tabs: gr.Tabs(selected="compare"), tab.message: say("")}


def open_link(page: Page, host: ModelHost, gallery: Gallery, eval_dirs: list[str], values: dict, request: gr.Request):
    """A page opened with a link to a recorded run and a token (components.links): the runs in the lanes, the token
    selected. Only a gallery key or an allowed eval folder can be named; anything else is one line."""
    link = Link.read(dict(request.query_params) if request is not None else {})
    if link is None:
        return {page.message: gr.skip()}  # an update that changes nothing (an empty dict would be read as one output)
    session: Session = values[page.state]
    page.sessions.track(client_of(request).session, session)
    if "run" in link.source:
        if link.source["run"] not in gallery.recordings:
            raise SettingsError("run", f"must be the key of a recording in the gallery (got {shown(link.source['run'])})")
        recording, runs = gallery.open(link.source["run"])
        return show_runs(page, host, session, in_lanes(runs), link, f"Opened {recording.title} from the gallery")
    folder = eval_folder(link.source["eval"], eval_dirs)
    problem, sample = link.source["problem"], link.source["sample"]
    runs = evaluation.problem_runs(evaluation.traces_in(folder), problem, sample, {lane: link.source[lane] for lane in LANES})
    return show_runs(page, host, session, runs, link, f"Opened problem {problem} (sample {sample}) of {folder.name}")


def _methods_of(traces: dict[str, Trace | None]) -> dict[str, str]:
    """Each lane's method, as a link names them."""
    return {lane: t.settings.method for lane, t in traces.items() if t is not None}


def show_runs(page: Page, host: ModelHost, session: Session, traces: dict, link: Link, opened: str) -> dict:
    """Recorded runs in the lanes, `link`'s token selected, else the token where the lanes part, else the first
    intervention; the page's address can then name any token of them (`Link.to`)."""
    session.clear()
    session.traces, session.link = traces, Link(link.source)
    lane, token, note = link.lane, link.token, ""
    if token is not None and not (traces.get(lane) is not None and token < len(traces[lane].records)):
        shown = len(traces[lane].records) if traces.get(lane) is not None else 0
        note, token = f" ⚠️ token: the {lane} lane has tokens 0 to {shown - 1} (got {token}); none is selected", None
        lane = None
    elif token is None:
        lane, token, note = _first_to_see(traces)
    if token is not None:
        session.select(lane, token)
    return show_loaded(page, host, session, f"{opened}{note}.")


def _first_to_see(traces: dict) -> tuple[str | None, int | None, str]:
    """Where a reader should look first: the token where the lanes part, else the first intervention."""
    first = first_difference(traces.get("left"), traces.get("right"))
    if first is not None:
        return "right", first, f"; their tokens part at token {first}"
    for lane, trace in traces.items():
        for record in trace.records if trace is not None else []:
            if intervened(record.origin, trace.settings.method):
                return lane, record.position, f"; the first intervention is token {record.position} of the {lane} lane"
    return None, None, ""


def pick_example(page: Page, values: dict) -> dict:
    """The picked example in the prompt box (its run follows: components.wiring)."""
    return {page.prompt: check_prompt(values[page.example])}


def apply_fix(page: Page, values: dict) -> dict:
    """The remedy the last refusal offered, set on its setting's control (the run that follows, components.wiring, runs
    with it); the button goes."""
    session: Session = values[page.state]
    err, session.offered = session.offered, None
    hidden = no_fix(page)
    return hidden if err is None else hidden | {page.controls[err.setting]: err.fix.value}


def show_loaded(page: Page, host: ModelHost, session: Session, message: str) -> dict:
    """Loaded runs with their context: the prompt and the settings they ran with, on the page's controls (the comparison
    line under the lanes names their models)."""
    first = next(t for t in session.traces.values() if t is not None)
    shown = page.controls.show(first.settings, host.max_new_tokens_cap)
    view = RuleView.of(first.settings)
    methods = {page.methods[lane]: t.settings.method for lane, t in session.traces.items() if t is not None}
    update = render_all(page, session, view, message=message) | shown | methods
    return update | ({page.prompt: first.prompt} if first.prompt else {})


def poll(page: Page, host: ModelHost, values: dict) -> dict:
    """The pair's load state (on ZeroGPU with what a run of the slider's tokens costs), and whether Generate may be pressed."""
    name = values[page.pair]
    if name not in host.allowed:
        return {
            page.status: "No model pair is loaded here: load a trace file to view it.",
            page.generate: gr.Button(interactive=False),
            page.timer: gr.Timer(active=False),
        }
    state = host.ensure_loading(name)
    ready = state.status == "ready"
    note = f"\n\n{state.pair.note}" if ready and state.pair.note else ""
    tokens = values[page.controls["max_new_tokens"]]  # the cost line reads the slider as it stands; a bad value says nothing
    if ready and isinstance(tokens, int | float) and 1 <= tokens <= host.max_new_tokens_cap:
        cost = host.gpu_cost(name, int(tokens))
        note += f"\n\n{cost}" if cost else ""
    return {
        page.status: f"**{name}**: {state.describe()}{note}",
        page.generate: gr.Button(interactive=ready),
        page.timer: gr.Timer(active=state.status == "loading"),
    }


# --- helpers --------------------------------------------------------------------------------------


def _file_name(path) -> str:
    return str(path).replace("\\", "/").rsplit("/", 1)[-1]
