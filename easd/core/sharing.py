"""The same request computed once: users who ask for exactly the same thing share one computation.

Most requests in a lesson are the same ("click the first example"), and 2 cores decode about
15–25 tokens a second in all, so sixteen copies of one request would make the last user wait
sixteen times as long for a result the first already has. Instead:

  request      what one user asks a worker for: the generations of one ticket (easd.core.worker).
  same         two requests are the same when their `request_key`s are equal: the engine's version,
               the pair (its files, backend, kernels and dtype), and each generation's prompt, chat
               flag and settings, the seed included.
  joined       a request whose twin is in line or decoding gets another `Stream` of the twin's ticket:
               everything decoded so far at once, then the stream.
  replayed     a request whose twin finished recently gets its traces from `Results` at once.

Each user holds a Stream: stopping it ends only that user's stream (they keep what they saw); the
computation stops when its last stream does. Where results are exact (llama.cpp's exact kernels,
transformers in float32) a shared result is the one a solo run gives, token for token, since a
generation decodes as it would alone. Where they are not (llama.cpp's fast kernels, bfloat16) a
shared result is still a valid run of that request, only not bit-identical to every solo run.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import _version
from ..errors import EasdError
from .pair import ModelPair
from .trace import Trace, to_json_delta, to_json_dict

if TYPE_CHECKING:
    from .decoding import Generation
    from .worker import Ticket

Reader = Callable[[], bool]  # whether a stream's user has taken anything since the last call
RESULTS_BYTES = 64 * 2**20  # finished results kept for replay: about 300 comparisons of 2 × 128 tokens
FINISHED = ("eos", "max_new_tokens", "context")  # stop reasons of a result worth replaying (not stopped, unread, error)


def request_key(pair: ModelPair, generations: Iterable[Generation]) -> Hashable:
    """What makes two requests the same (see above); equal keys promise equal results where results are exact."""
    runtime = tuple(sorted((name, str(value)) for name, value in pair.info.items()))
    asked = tuple((g.prompt, g.chat, g.use_cache, g.settings) for g in generations)
    return (_version.__version__, pair.describe(), runtime, asked)


class Stream:
    """One user's look at a Ticket: its traces, its place in line, and a Stop of its own.

    `how` says where the result comes from: "computed" (this user's request started it), "joined"
    (the same request was already in line or decoding), "replayed" (it had just finished) or
    "watched" (a room's viewer, components.rooms). A `passive` stream only watches: it never keeps
    the decoding going, and leaving it never stops anyone else's.
    """

    def __init__(
        self, ticket: Ticket, owner: str = "", reader: Reader | None = None, how: str = "computed", passive: bool = False
    ):
        self.ticket, self.owner, self.reader, self.how, self.passive = ticket, owner, reader, how, passive
        self.left: list[Trace] | None = None  # the traces as they were when this stream left a ticket others still watch

    @property
    def done(self) -> bool:
        return self.left is not None or self.ticket.done

    @property
    def cancelled(self) -> bool:
        return self.left is not None or self.ticket.cancelled

    @property
    def error(self) -> EasdError | None:
        return None if self.left is not None else self.ticket.error

    @property
    def position(self) -> int:
        return 0 if self.left is not None else self.ticket.position

    def estimate(self) -> tuple[float, float]:
        """Seconds from now until its run starts and until it ends, as the worker last estimated them."""
        ticket, now = self.ticket, time.monotonic()
        return max(0.0, ticket.estimated_at + ticket.starts_in_s - now), max(0.0, ticket.estimated_at + ticket.ends_in_s - now)

    @property
    def sharing(self) -> int:
        return self.ticket.sharing

    @property
    def generations(self) -> list[Generation]:
        return self.ticket.generations

    def traces(self) -> list[Trace]:
        """The traces so far (final once done); a copy per call, so that no user's page changes another's."""
        traces = self.left if self.left is not None else self.ticket.traces()
        return [trace.snapshot() for trace in traces]

    def update(self, sent: list[tuple[int, int]]) -> tuple[dict, list[tuple[int, int]]]:
        """What is new since `sent` as one easd-trace-update, and the new `sent` (see Ticket.update)."""
        if self.left is not None:
            return to_json_delta(self.left, sent), [(len(t.records), len(t.blocks)) for t in self.left]
        return self.ticket.update(sent)

    def document(self) -> dict:
        """The traces as one easd-trace JSON document (final once done): made once for every stream of a run."""
        return to_json_dict(self.left) if self.left is not None else self.ticket.document()

    def cancel(self, why: str = "stopped") -> None:
        """Stop this user's stream; the computation stops too when nobody else watches it."""
        self.ticket.leave(self, why)

    def wait(self, seen: int, timeout: float) -> int:
        return self.ticket.wait(seen, timeout)

    @property
    def version(self) -> int:
        """Bumped by every change a reader could see (see `wait`), read without waiting."""
        return self.ticket.version

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` (None: as long as it takes) for this stream to end; -> done."""
        return self.ticket.wait_for(lambda: self.done, timeout)


@dataclass(frozen=True)
class Result:
    """A finished result kept for the same request: its traces, and the trace JSON every replay of it sends."""

    traces: list[Trace]
    document: dict  # easd.core.trace.to_json_dict(traces), made once
    size: int  # bytes of that document as JSON


class Results:
    """Finished results by request key, least recently used out first, within `max_bytes` of trace JSON."""

    def __init__(self, max_bytes: int = RESULTS_BYTES):
        self.max_bytes = max_bytes
        self.kept: OrderedDict[Hashable, Result] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Result | None:
        with self._lock:
            if key not in self.kept:
                return None
            self.kept.move_to_end(key)
            return self.kept[key]

    def measure(self, traces: list[Trace], document: dict) -> Result | None:
        """`traces` (and their trace JSON, `document`) as a result to keep, or None for one not to keep: one not run to
        its end (a stopped or failed one would replay a fragment), or one larger than the whole cache. Takes no lock:
        a megabyte of JSON is tens of milliseconds."""
        if not all(trace.stats.stop_reason in FINISHED for trace in traces):
            return None
        size = len(json.dumps(document))
        return Result(traces, document, size) if size <= self.max_bytes else None

    def put(self, key: Hashable, result: Result | None) -> None:
        """Keep a result (as `measure` made it; None keeps nothing)."""
        if result is None:
            return
        with self._lock:
            if key in self.kept:
                self.bytes -= self.kept.pop(key).size
            self.kept[key] = result
            self.bytes += result.size
            while self.bytes > self.max_bytes:
                self.bytes -= self.kept.popitem(last=False)[1].size
