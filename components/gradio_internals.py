"""What the app reads and changes inside Gradio and its server, in one place: Gradio has no public way to do it.

- Whether a client is reading (`Outbox.watch`): a streaming handler is pulled whether or not
  anyone listens, and what it yields waits in a queue per session until the client's event
  stream takes it. A client that takes anything at all is reading, however slowly; one whose
  queue has not moved for the worker's patience, or whose connection closed, is not
  (easd.core.worker stops its run as "unread").
- The result said once (`say_results_once`): Gradio sends a generator's every value as a
  `generating` message and then the last one again as `complete`. An API call's last value is
  its whole result, so its `generating` copy is dropped and the result travels once.
- Small buffers for event streams (`SmallStreamBuffers`): a client that stops reading is only
  noticed once the buffers between the server and it are full; by default they absorb
  megabytes, more than a whole run streams.
- Outputs an update leaves alone cost nothing (`skip_untouched_outputs`): a handler that returns a
  dict sets only the components it names, and Gradio reads every other output as an empty update,
  which it handles as a change of properties: it builds that component anew and its config (its
  API schema included), for every update of every user. A page streams a few updates a second over
  some thirty outputs, and a room sends each update to every viewer, so this was most of the
  server's own work for a room; now such outputs go to the page as the same empty update, built once.
- What a custom event sent (`event_data`): the lanes' token clicks send {lane, pos} through
  `gr.HTML`'s JavaScript trigger, which Gradio hands over only as the event's private `_data`.

Everything here rests on Gradio's and uvicorn's internals (`Blocks._queue`, its per-session
message queues and `send_message`, `Blocks.postprocess_data`, `EventData._data`, uvicorn's
request cycle): after upgrading either, re-run tests/test_app_isolation.py, which checks the
first three on both of the API's routes, tests/test_gradio_internals.py, which compares the
fourth with Gradio's own output, and tests/test_app_browser.py, which clicks tokens.
"""

from __future__ import annotations

import copy
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr
from gradio.blocks import Block
from gradio.server_messages import ProcessGeneratingMessage

log = logging.getLogger("easd.app")


@dataclass
class Watch:
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


@dataclass(frozen=True)
class Outbox:
    """Where the app looks to see whether a client is reading (see `Watch`): the shared batch's worker asks at
    every block boundary, from its own thread (a dict look-up and a deque's head: atomic under the GIL)."""

    demo: gr.Blocks

    def watch(self, session: str) -> Watch:
        """A watch on `session`'s queue from now on: what waits in it already does not count as taken later."""
        watch = Watch(self.demo, session)
        watch.took_any()
        return watch


def say_results_once(demo: gr.Blocks, api_name: str, is_result: Callable[[object], bool]) -> None:
    """Drop the `generating` message of API `api_name` whose value `is_result` (its whole result), which
    Gradio sends again as `complete`. Call after `demo.queue()`, which makes the queue this changes."""
    queue = demo._queue
    send = queue.send_message

    def send_message(event, message):
        if isinstance(message, ProcessGeneratingMessage) and event.fn.api_name == api_name:
            values = message.output.get("data") or [None]
            if is_result(_top_level(values[0])):
                return
        send(event, message)

    queue.send_message = send_message


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
    edits to the previous value ([action, path, new value] each), those its edits set."""
    if isinstance(value, list) and all(isinstance(edit, list) and len(edit) == 3 for edit in value):
        return {path[0]: new for action, path, new in value if action in ("replace", "add") and len(path) == 1}
    return value


class SmallStreamBuffers:
    """ASGI middleware: each event stream (GET /gradio_api/queue/data, GET /gradio_api/call/NAME/ID) gets small
    send buffers, so that what a client leaves unread fills them soon and the stream's queue stops moving.

    The kernel's default send buffer grows to 4 MB, and asyncio's holds 64 kB more: more than a
    whole run streams. With these, what waits unread is the client's own receive buffer (about
    128 kB by default) and about 25 kB here. Other responses (the page, its files) keep the
    defaults. uvicorn hands each request's `receive` as a method of the object holding the
    connection's transport; under another server this does nothing.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("method") == "GET" and _is_event_stream(scope.get("path", "")):
            transport = getattr(getattr(receive, "__self__", None), "transport", None)
            if transport is not None:
                _shrink(transport)
        await self.app(scope, receive, send)


STREAM_SEND_BUFFER = 4096  # bytes of kernel send buffer asked for an event stream (Linux doubles it)
STREAM_WRITE_BUFFER = 16 * 1024  # bytes asyncio buffers for it above the kernel's before the writer waits


def _is_event_stream(path: str) -> bool:
    return path.endswith("/gradio_api/queue/data") or "/gradio_api/call/" in path  # a GET there reads an event's stream


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
