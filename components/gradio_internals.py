"""What the app reads and changes inside Gradio and its server, in one place: Gradio has no public way to do it.

- Whether a client is reading (`Outbox.uptake`): a streaming handler is pulled whether or not
  anyone listens, and what it yields waits in a queue per session until the client's event
  stream takes it. A client that takes anything at all is reading, however slowly; one whose
  queue has not moved for the worker's patience, or whose connection closed, is not
  (easd.serving.worker stops its run as "unread").
- The result said once (`say_results_once`): Gradio sends a generator's every value as a
  `generating` message and then the last one again as `complete`. An API call's last value is
  its whole result, so its `generating` copy is dropped and the result travels once.
- Small buffers for event streams (`EventStreams`): a client that stops reading is only
  noticed once the buffers between the server and it are full; by default they absorb
  megabytes, more than a whole run streams.
- Whether a client is still connected (`Connections`, counted by `EventStreams`): Gradio runs a
  page's unload event when the session's heartbeat connection ends, and that also happens to
  clients that are still there (gradio_client gives up on a heartbeat more than 20 s late, which
  a busy server sends). A session that holds a heartbeat or an event stream open is connected.
- Outputs an update leaves alone cost nothing (`skip_untouched_outputs`): a handler that returns a
  dict sets only the components it names, and Gradio reads every other output as an empty update,
  which it handles as a change of properties: it builds that component anew and its config (its
  API schema included), for every update of every user. A page streams a few updates a second over
  some thirty outputs, and a room sends each update to every viewer, so this was most of the
  server's own work for a room; now such outputs go to the page as the same empty update, built once.
- Which endpoints are MCP tools (`mcp_tools_only`): Gradio's MCP server offers every public API endpoint; the
  app's `compare` returns whole traces, megabytes an agent's context cannot hold, so only api.MCP_TOOLS stay.
- Places in line where nobody sees them (`queue_places_only_where_shown`): Gradio tells every queued event its place
  each time the line changes, n² messages for n clicks, which a page handles for events whose progress it hides.
- How often an idle queue looks for work (`queue_idles_quietly`): every millisecond by default on Linux, which kept
  an app nobody used 7.5% busy; at Gradio's own Windows pace it idles at 1.4%.
- A loop the page's loading screen leaves behind (`END_THE_LOADERS_LOOP`, run by each page as it loads): it asked
  for 60 frames a second for as long as the page was open.
- What a custom event sent (`event_data`): the lanes' token clicks send {lane, pos} through
  `gr.HTML`'s JavaScript trigger, which Gradio hands over only as the event's private `_data`.

Everything here rests on Gradio's and uvicorn's internals (`Blocks._queue`, its per-session
message queues and `send_message`, `Blocks.postprocess_data`, `EventData._data`, uvicorn's
request cycle): after upgrading either, re-run tests/test_app_isolation.py, which checks the
first three on both of the API's routes and the fourth (a dropped heartbeat), tests/test_gradio_internals.py, which compares the
fourth with Gradio's own output, and tests/test_app_browser.py, which clicks tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib.util
import logging
import socket
import sys
import threading
import time
import urllib.parse
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr
import orjson
from gradio import processing_utils
from gradio.blocks import Block
from gradio.server_messages import EstimationMessage, ProcessGeneratingMessage
from gradio.state_holder import SessionState

log = logging.getLogger("easd.app")


@dataclass
class Uptake:
    """One stream's look at its client's message queue: has the client taken anything since the last look?"""

    demo: gr.Blocks
    session: str
    _head: object = field(default=None, init=False, repr=False)  # the oldest waiting message at the last look

    def took_any(self) -> bool:
        """Whether the client took a message since the last look, or has none waiting.

        Not whether it took *everything*: a slow reader always has a backlog, and a backlog is
        no sign of absence. A closed connection's queue is gone (Gradio drops it), so it takes
        nothing. Without a session (the handler called in-process) there is nobody to wait for.
        """
        if not self.session:
            return True
        waiting = self.demo._queue.pending_messages_per_session.get(self.session)
        if waiting is None:
            return False
        try:
            head = waiting._queue[0]  # asyncio.Queue's deque; reading its head is atomic
        except IndexError:
            return True
        took, self._head = head is not self._head, head
        return took

    def behind(self) -> bool:
        """Whether a message waits in the client's queue: it has not yet taken what it was sent last (a stream then
        waits, and sends what is new in one update once the client has caught up)."""
        waiting = self.demo._queue.pending_messages_per_session.get(self.session) if self.session else None
        return bool(waiting is not None and waiting.qsize())


class Connections:
    """The connections each session holds open to the server now: its heartbeat and its event streams (counted
    by the `EventStreams` middleware, from any thread)."""

    def __init__(self):
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def opened(self, session: str) -> None:
        with self._lock:
            self._open[session] += 1

    def closed(self, session: str) -> None:
        with self._lock:
            self._open[session] -= 1
            if self._open[session] <= 0:
                del self._open[session]

    def holds(self, session: str) -> bool:
        """Whether `session` holds a heartbeat or an event stream open now."""
        with self._lock:
            return self._open[session] > 0 if session in self._open else False


@dataclass(frozen=True)
class Outbox:
    """Where the app looks to see whether a client is reading (see `Uptake`): the shared batch's worker asks at
    every block boundary, from its own thread (a dict look-up and a deque's head: atomic under the GIL); and
    whether it is still connected at all (`connections`)."""

    demo: gr.Blocks
    connections: Connections = field(default_factory=Connections)

    @classmethod
    def of(cls, demo: gr.Blocks) -> Outbox:
        """The app's one Outbox, made on first asking: the page's handlers and the server's middleware share it."""
        if demo not in _OUTBOXES:
            _OUTBOXES[demo] = cls(demo)
        return _OUTBOXES[demo]

    def uptake(self, session: str) -> Uptake:
        """What `session`'s client takes of its queue from now on: what waits in it already does not count as taken later."""
        uptake = Uptake(self.demo, session)
        uptake.took_any()
        return uptake

    async def still_connected(self, session: str, within_s: float) -> bool:
        """Whether `session` holds a connection open, or opens one within `within_s` (a heartbeat that reconnects).
        Not once the app is closing: its close ends every heartbeat itself, and would wait out each such wait (it
        gives up after 5 s, with the server still running)."""
        deadline = time.monotonic() + within_s
        while not self.connections.holds(session):
            if time.monotonic() >= deadline or not self.demo.is_running:
                return False
            await asyncio.sleep(RECONNECT_POLL_S)
        return True


RECONNECT_POLL_S = 0.25
_OUTBOXES: weakref.WeakKeyDictionary[gr.Blocks, Outbox] = weakref.WeakKeyDictionary()  # one per app, gone with it


QUEUE_IDLE_POLL_S = 0.05  # Gradio's own pace on Windows; on Linux it looks every 1 ms
PROGRESS_IDLE_POLL_S = 0.1  # likewise (10 ms on Linux); the app sends no gr.Progress of its own


def queue_idles_quietly(demo: gr.Blocks) -> None:
    """Gradio's queue looks for a new event every millisecond while it has none (and for progress every 10 ms): an
    app nobody uses kept 7.5% of a core busy here (0.75 CPU-s in 10 s, the server alone), on a Space or a teacher's
    laptop as in the test suite, where each served app does it for as long as it lives. At Gradio's own Windows pace
    (50 ms and 100 ms) an idle app uses 0.14 CPU-s in 10 s, and a click waits at most 50 ms more to start, as it
    does in every Gradio app on Windows. Call after `demo.queue()`, which makes the queue this changes."""
    demo._queue.sleep_when_free = QUEUE_IDLE_POLL_S
    demo._queue.progress_update_sleep_when_free = PROGRESS_IDLE_POLL_S


# Gradio 6.31's loading screen counts its seconds in a requestAnimationFrame loop and is taken off the page while the
# loop runs, so the loop outlives it: it asks for a frame 60 times a second for as long as the page is open, and an
# idle page kept 18% of a core busy (headless Chromium, our app on the tiny pair), on a user's laptop as in the suite.
# Nothing reaches that loop but its frame's number, and numbers are handed out in order: once the page is quiet, a
# frame of ours and exactly one other in each of 20 frames is that loop, and the other's number is just below ours.
# Where no other frame is asked for, there is nothing to end; while more are (a run under way, or the status trackers'
# spring for the first seconds after load), it looks again a second later.
# tests/test_app_browser.py checks that a plain Gradio page has the loop and ours does not.
END_THE_LOADERS_LOOP = """
() => {
  let looks = 0;
  const look = () => {
    const ours = [];
    const frame = () => {
      ours.push(requestAnimationFrame(frame));
      if (ours.length < 20) return;
      const last = ours[ours.length - 1];
      cancelAnimationFrame(last);
      const others = new Set(ours.slice(1).map((id, i) => id - ours[i] - 1));  // frames others asked for, per frame
      const steady = others.size === 1 ? [...others][0] : null;
      if (steady === 1) cancelAnimationFrame(last - 1);
      else if (steady !== 0 && ++looks < 30) setTimeout(look, 1000);
    };
    requestAnimationFrame(frame);
  };
  setTimeout(look, 1000);
}
"""


def _drop_messages(demo: gr.Blocks, dropped: Callable[[object, object], bool]) -> None:
    """Leave out of the queue's messages to its clients each (event, message) that `dropped` names; send the rest."""
    queue = demo._queue
    send = queue.send_message

    def send_message(event, message):
        if not dropped(event, message):
            send(event, message)

    queue.send_message = send_message


def queue_places_only_where_shown(demo: gr.Blocks) -> None:
    """Send a queued event's place in line (Gradio's `estimation` message) only to a client that can show it: not to a
    page event whose progress is hidden (`show_progress="hidden"`, `api_visibility="private"`). Gradio sends every
    event in line its place again each time one joins or starts, so n clicks make some n²/2 messages, and a page
    spends tens of milliseconds on each whether it shows it or not: 40 clicks on Stop made 319 of them, and the page
    said "Stopped" after 5.1 s instead of 2.3 s (the 1.3 s its 80 other messages cost). The page says itself where a
    run stands in line; an API client, which asks Gradio for its place, still gets it. Call after `demo.queue()`."""

    def unseen(event, message) -> bool:
        shown = event.fn.show_progress != "hidden" or event.fn.api_visibility != "private"
        return isinstance(message, EstimationMessage) and not shown

    _drop_messages(demo, unseen)


def say_results_once(demo: gr.Blocks, api_name: str, is_result: Callable[[object], bool]) -> None:
    """Drop the `generating` message of API `api_name` whose value `is_result` (its whole result), which
    Gradio sends again as `complete`. Call after `demo.queue()`, which makes the queue this changes."""

    def said_again(event, message) -> bool:
        if not (isinstance(message, ProcessGeneratingMessage) and event.fn.api_name == api_name):
            return False
        values = message.output.get("data") or [None]
        return is_result(_top_level(values[0]))

    _drop_messages(demo, said_again)


def pass_values_as_they_are(demo: gr.Blocks, api_name: str, is_result: Callable[[object], bool]) -> None:
    """Send the values of API `api_name` (trace JSON: no files, no URLs, one output) as they are, however many users
    stream them: each costs the server what building it cost, once, and not a walk through it per user.

    - Gradio walks every output twice looking for files to move into its cache and URLs to complete
      (`async_move_files_to_cache`, `add_root_url`): for a whole trace, tens of milliseconds per user.
      The value is passed on as `AsIs`, which both walks leave alone.
    - The queue protocol sends a streamed value as edits to the one before (Gradio's `utils.diff`).
      An update that holds only what is new shares nothing with the last, so its edits would be one
      per field, each with its path: larger than the update and a walk through both; and
      gradio_client's `apply_diff` mis-applies the deletes of a list inside a list (a shorter list
      of rows inside `runs`). Each update goes as one edit that replaces the last, which every
      client applies; Gradio's record of the last value (which its final message sends) is kept.
    - The final message holds the result (the value that `is_result`). Gradio copies a message whole
      into plain Python values before it writes it as JSON (pydantic's `model_dump`), tens of
      milliseconds for a whole trace, per user; the result goes as JSON text written once per user
      (`orjson.Fragment`), which that copy passes over. (Gradio's plain HTTP route writes its messages
      with Python's own json, which would not take it: there the result goes as it is.)"""
    postprocess_data, handle = demo.postprocess_data, demo.handle_streaming_diffs
    latest: list[tuple[object, orjson.Fragment]] = []  # the results written last: users of one run share one document

    def written(result) -> orjson.Fragment:
        for document, text in latest:
            if document is result:
                return text
        text = orjson.Fragment(orjson.dumps(result))
        latest[:] = [(result, text), *latest[: WRITTEN_RESULTS - 1]]  # holding the document keeps its id from reuse
        return text

    async def as_is(block_fn, predictions, state):
        if block_fn.api_name != api_name:
            return await postprocess_data(block_fn, predictions, state)
        return AsIs([predictions])

    def whole(block_fn, data, session_hash, run, final, simple_format=False):
        if block_fn.api_name != api_name or final or simple_format or session_hash is None or run is None:
            return handle(block_fn, data, session_hash, run, final, simple_format)
        runs = demo.pending_diff_streams[session_hash]
        first = run not in runs
        runs[run] = [written(v) if is_result(v) else v for v in data]  # what the final message sends
        return data if first else [[["replace", [], value]] for value in data]

    demo.postprocess_data, demo.handle_streaming_diffs = as_is, whole
    if not getattr(processing_utils.add_root_url, "passes_as_is", False):  # once per process: the function is Gradio's
        add_root_url = processing_utils.add_root_url

        def add_root_url_but_as_is(data, root_url, previous_root_url):
            return data if isinstance(data, AsIs) else add_root_url(data, root_url, previous_root_url)

        add_root_url_but_as_is.passes_as_is = True
        processing_utils.add_root_url = add_root_url_but_as_is


def sessions_without_configs() -> None:
    """New sessions start without a copy of every component's config; Gradio makes one when a component first changes
    for the session (its own `SessionState._update_value_in_config` does so when none is there).

    Gradio builds, for every new session (a browser tab, an API client), the config of every
    component of the app, API schema included, to recreate the page for a deep link
    (`gr.DeepLinkButton`, which this app does not have): about 60 ms of the event loop per session
    here, so a hundred API users arriving at once held every stream for 6 s. Gradio's class, so this
    holds for the whole process; once is enough."""
    init = SessionState.__init__
    if getattr(init, "without_configs", False):
        return

    def without_configs(self, blocks):
        init(self, _NoBlocks(blocks.default_config))  # its loop over the app's blocks finds none

    without_configs.without_configs = True
    SessionState.__init__ = without_configs


@dataclass(frozen=True)
class _NoBlocks:
    default_config: object
    blocks: dict = field(default_factory=dict)


def absent_matplotlib_fails_at_once() -> None:
    """Where matplotlib is not installed, record it as absent (`sys.modules[name] = None`, Python's own way to say so),
    so that importing it fails at once.

    Gradio switches matplotlib's backend around every call of a handler, each step of a stream
    included, and so imports it twice per update; where it is not installed, each of those imports
    searches every folder on sys.path again before it fails. With a hundred streams that was a fifth
    of the event loop's time. The app draws with Plotly and never uses matplotlib."""
    if "matplotlib" not in sys.modules and importlib.util.find_spec("matplotlib") is None:
        sys.modules["matplotlib"] = None


WRITTEN_RESULTS = 4  # results kept as JSON text: the runs finishing about now


class AsIs(list):
    """An event's outputs that Gradio's walks for files and URLs leave alone (see `pass_values_as_they_are`)."""


def skip_untouched_outputs(demo: gr.Blocks) -> None:
    """Let Gradio postprocess only the outputs an update names; every other output gets what Gradio itself would send
    for it (an empty update, or nothing for a gr.State), without building anything."""
    postprocess_data = demo.postprocess_data

    async def only_named(block_fn, predictions, state):
        outputs = list(block_fn.outputs)
        by_id = {key._id: value for key, value in predictions.items()} if _keyed_by_block(predictions) else {}
        named = [i for i, block in enumerate(outputs) if block._id in by_id]
        if not named or len(named) == len(outputs) or len(named) < len(by_id) or block_fn.batch:
            return await postprocess_data(block_fn, predictions, state)  # Gradio's own way, errors included
        narrow = copy.copy(block_fn)
        narrow.outputs = [outputs[i] for i in named]
        values = [by_id[block._id] for block in narrow.outputs]
        done = await postprocess_data(narrow, values[0] if len(values) == 1 else values, state)  # one output: its value
        sent = [None if block.stateful else {"__type__": "update"} for block in outputs]
        for i, value in zip(named, done):
            sent[i] = value
        return sent

    demo.postprocess_data = only_named


def _keyed_by_block(predictions) -> bool:
    return isinstance(predictions, dict) and bool(predictions) and all(isinstance(key, Block) for key in predictions)


def _top_level(value):
    """The top-level keys a streamed value sets: the value itself, or, where Gradio's queue protocol sends it as
    edits to the previous value ([action, path, new value] each), those its edits set (all of them, for an edit that
    replaces the whole value: `pass_values_as_they_are`)."""
    if isinstance(value, list) and all(isinstance(edit, list) and len(edit) == 3 for edit in value):
        if len(value) == 1 and value[0][0] == "replace" and value[0][1] == []:  # pass_values_as_they_are's
            return value[0][2]
        return {path[0]: new for action, path, new in value if action in ("replace", "add") and len(path) == 1}
    return value


class EventStreams:
    """ASGI middleware for the event streams (GET /gradio_api/queue/data, GET /gradio_api/call/NAME/ID) and the
    heartbeats (GET /gradio_api/heartbeat/SESSION): each event stream gets small send buffers, and `connections`
    counts each session's open heartbeats and queue streams until the client disconnects.

    The buffers: the kernel's default send buffer grows to 4 MB, and asyncio's holds 64 kB more:
    more than a whole run streams. With these, what waits unread is the client's own receive
    buffer (about 128 kB by default) and about 25 kB here, so a client that stops reading is
    noticed soon. Other responses (the page, its files) keep the defaults. uvicorn hands each
    request's `receive` as a method of the object holding the connection's transport; under
    another server the buffers stay as they are.

    A connection counts as closed at the client's disconnect (before Gradio's own clean-up for it,
    the unload event included, runs) or when its response ends, whichever comes first.
    """

    def __init__(self, app, connections: Connections):
        self.app, self.connections = app, connections

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if _is_event_stream(path):
            transport = getattr(getattr(receive, "__self__", None), "transport", None)
            if transport is not None:
                _shrink(transport)
        session = _session_of(path, scope.get("query_string", b""))
        if not session:
            return await self.app(scope, receive, send)
        self.connections.opened(session)
        counted = True

        def close() -> None:
            nonlocal counted
            if counted:
                counted = False
                self.connections.closed(session)

        async def watched_receive():
            message = await receive()
            if message.get("type") == "http.disconnect":
                close()
            return message

        try:
            await self.app(scope, watched_receive, send)
        finally:
            close()


STREAM_SEND_BUFFER = 4096  # bytes of kernel send buffer asked for an event stream (Linux doubles it)
STREAM_WRITE_BUFFER = 16 * 1024  # bytes asyncio buffers for it above the kernel's before the writer waits


def _is_event_stream(path: str) -> bool:
    return path.endswith("/gradio_api/queue/data") or "/gradio_api/call/" in path  # a GET there reads an event's stream


def _session_of(path: str, query: bytes) -> str:
    """The session a heartbeat or a queue stream belongs to; "" for any other request."""
    if "/gradio_api/heartbeat/" in path:
        return path.rsplit("/gradio_api/heartbeat/", 1)[1].strip("/")
    if path.endswith("/gradio_api/queue/data"):
        values = urllib.parse.parse_qs(query.decode("latin-1")).get("session_hash", [""])
        return values[0]
    return ""


def _shrink(transport) -> None:
    try:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SEND_BUFFER)
        transport.set_write_buffer_limits(high=STREAM_WRITE_BUFFER)
    except (AttributeError, OSError) as err:  # not fatal: an unread stream is then noticed later
        log.warning("could not shrink an event stream's buffers: %s", err)


def event_data(event: gr.EventData) -> dict:
    """What the page's own JavaScript sent with an event (Gradio keeps it in a private attribute); {} if nothing."""
    data = getattr(event, "_data", None)
    return data if isinstance(data, dict) else {}


def mcp_tools_only(demo: gr.Blocks, api_names: tuple[str, ...]) -> Callable:
    """A lifespan for the app (FastAPI's `lifespan`) that, as the server starts and before it takes a request, leaves
    Gradio's MCP server (when there is one) only the tools of endpoints `api_names`: its tool list and the tools it
    will call are both read from `tool_to_endpoint`."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        server = demo.mcp_server_obj
        if server is not None:
            tools = server.tool_to_endpoint
            server.tool_to_endpoint = {tool: name for tool, name in tools.items() if name.lstrip("/") in api_names}
        yield

    return lifespan
