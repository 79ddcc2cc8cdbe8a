"""A request and the users who look at it.

ticket   one request: a user's generations (a comparison's SD and EASD) as the worker decodes them
         (easd.serving.worker): waiting in line, then in the batch, then over. It holds what a reader
         may see: snapshots of the traces after every block, the update since what a stream sent, and
         the final document, each made once per change for every stream of it.
stream   one user's look at a ticket (several users asking the same thing share one ticket,
         easd.serving.same_request): its traces, its place in line, and a Stop of its own.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Hashable, Iterable

from ..errors import EasdError
from ..method.generation import Generation
from ..method.judging import Block
from ..method.trace import Trace
from ..traces.files import to_json_delta, to_json_dict
from .same_request import Result

Reader = Callable[[], bool]  # whether a stream's user has taken anything since the last call
Sent = list[tuple[int, int]]  # per generation: the rows and blocks a stream has sent already


class Ticket:
    """One request's generations in the shared batch: where they stand, and their traces so far. Each user
    watching it holds a Stream (easd.serving.same_request); the ticket stops when its last stream does."""

    def __init__(self, generations: Iterable[Generation], address: str = ""):
        self.generations = list(generations)
        self.address = address  # where from (the first asker's network address): the line is fair between addresses
        self.streams: list[Stream] = []  # the users watching it, who have not left
        self.key: Hashable = None  # its request's (easd.serving.same_request.request_key), set by the worker
        self.context = contextvars.copy_context()  # the submitting request's, for calls made on its behalf (ZeroGPU quota)
        self.position = 0  # 1, 2, … while waiting in line; 0 once in the batch
        self.sharing = 0  # tickets in the batch (this one included) at its latest block
        self.allowance: int | None = None  # the rows a lane may use a step while others decode (set by the worker)
        self.starts_in_s = 0.0  # the worker's estimates (easd.serving.estimates): seconds until it joins the batch,
        self.ends_in_s = 0.0  # and until it ends, as of `estimated_at` (time.monotonic())
        self.estimated_at = time.monotonic()
        self.ended: float | None = None  # when it settled (time.monotonic())
        self.error: EasdError | None = None
        self.started: float | None = None  # when it joined the batch
        self._snapshots: list[Trace | None] = [None] * len(self.generations)
        self._news = threading.Condition()
        self._version = 0  # bumped by every delivery, so a reader knows whether anything is new
        self._done = False
        self.last_read = time.monotonic()
        self.final: list[Trace] | None = None  # the traces once done
        self._shared = threading.Lock()  # held while an update or the result is made for every stream that asks
        self._updates: dict[tuple, tuple[dict, Sent]] = {}  # the latest version's updates, by the point they start from
        self._document: dict | None = None  # the result as trace JSON, made once

    @classmethod
    def finished(cls, result: Result) -> Ticket:
        """A ticket that is over already, holding a result computed earlier (easd.serving.same_request.Results)."""
        ticket = cls([])
        ticket.final, ticket._document, ticket._done = result.traces, result.document, True
        return ticket

    def open_stream(self, owner: str = "", reader: Reader | None = None, how: str = "computed", passive: bool = False) -> Stream:
        """A new user's stream of this ticket; `reader` says whether they have taken anything since last asked."""
        stream = Stream(self, owner, reader, how, passive)
        with self._news:
            if not self._done:  # a finished ticket (a replay) keeps no list of who read it
                self.streams.append(stream)
        return stream

    def leave(self, stream: Stream, why: str = "stopped") -> None:
        """`stream`'s user stops watching: they keep what they saw, and the ticket stops if nobody else watches."""
        with self._news:
            if self._done or stream.left is not None:
                return
            others = [v for v in self.streams if v is not stream]
            if stream.passive or any(not v.passive for v in others):
                self.streams, stream.left = others, self.traces()
                self._version += 1
                self._news.notify_all()
                return
        self.cancel(why)  # the last one who asked for it: the ticket stops, and its stream follows it to the end

    @property
    def done(self) -> bool:
        return self._done

    def cancel(self, why: str = "stopped") -> None:
        """Stop this ticket's generations: they leave the batch (or the line) at the next block boundary, with stop reason `why`."""
        for generation in self.generations:
            generation.stop(why)

    @property
    def cancelled(self) -> bool:
        return any(g.stopped for g in self.generations)

    def traces(self) -> list[Trace]:
        """The generations' traces so far (final once `done`), in the order they were given."""
        if self.final is not None:
            return self.final
        return [s if s is not None else g.trace.snapshot() for s, g in zip(self._snapshots, self.generations)]

    def update(self, sent: Sent) -> tuple[dict, Sent]:
        """What the generations gained since `sent` (rows and blocks already sent, per generation) as one
        easd-trace-update (easd.method.trace.to_json_delta), and the new `sent`. Made once per version for every stream
        that asks from the same point: streams of one run wake on the same clock tick, so after their first update
        they ask from the same point, and each update costs what is new, once."""
        with self._shared:
            key = (self._version, tuple(sent))
            if key not in self._updates:
                if any(version != key[0] for version, _ in self._updates):
                    self._updates.clear()  # nobody asks from an older version again
                traces = self.traces()
                self._updates[key] = (to_json_delta(traces, sent), [(len(t.records), len(t.blocks)) for t in traces])
            return self._updates[key]

    def document(self) -> dict:
        """The finished traces as one easd-trace JSON document, made once for all of its streams."""
        with self._shared:
            if self._document is None:
                self._document = to_json_dict(self.traces())
            return self._document

    def wait(self, seen: int, timeout: float) -> int:
        """Block until something is newer than version `seen` or `timeout` passes; -> the version now."""
        with self._news:
            self._news.wait_for(lambda: self._version != seen or self._done, timeout)
            return self._version

    def unread_for(self, now: float) -> float:
        """Seconds since any user who asked for it took anything of what was sent to them (asking each stream's
        `reader`; a room's viewers only watch)."""
        askers = [s for s in list(self.streams) if s.reader is not None and not s.passive]
        if any([stream.reader() for stream in askers]):  # a list, not a generator: every reader is asked, and each resets
            self.last_read = now
        return now - self.last_read

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` (None: as long as it takes) for the generations to end (after `cancel`, by the next block
        boundary); -> done."""
        return self.wait_for(lambda: self._done, timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        with self._news:
            return self._news.wait_for(predicate, timeout)

    def watched_by(self, owner: str) -> bool:
        """Whether `owner` asked for it (a passive stream, a room's viewer, does not count)."""
        return any(stream.owner == owner and not stream.passive for stream in self.streams)

    @property
    def version(self) -> int:
        return self._version

    @property
    def failure(self) -> EasdError | None:
        """The first error of a generation of this ticket that failed, if one did."""
        return next((g.error for g in self.generations if g.error is not None), None)

    @property
    def rows_held(self) -> int:
        """Rows of the batch this ticket holds (or will, once in): those of its generations not ended or stopped (a group
        of rows counts by its rows: SMC-SD's particles, SpecGuard's candidates, beam search's beams)."""
        return sum(g.width for g in self.generations if not (g.done or g.stopped))

    # --- called by the worker thread --------------------------------------------------------------

    def deliver(self, block: Block, sharing: int) -> None:
        which = self.generations.index(block.generation)  # by identity: a Generation equals only itself
        with self._news:
            self._snapshots[which] = block.generation.trace.snapshot()
            self.sharing = sharing
            self._version += 1
            self._news.notify_all()

    def moved(self, position: int, starts_in_s: float, ends_in_s: float, now: float) -> None:
        """Its place in line (0: in the batch) and the estimates, as of `now`; readers are told when either changed."""
        with self._news:
            before = (self.position, round(self.starts_in_s + self.estimated_at), round(self.ends_in_s + self.estimated_at))
            self.position, self.starts_in_s, self.ends_in_s, self.estimated_at = position, starts_in_s, ends_in_s, now
            if (position, round(starts_in_s + now), round(ends_in_s + now)) != before:
                self._version += 1
                self._news.notify_all()

    def settle(self, error: EasdError | None = None) -> None:
        """The ticket is over: generations that never joined end as stopped; `error` is what its user is told."""
        with self._news:
            for generation in self.generations:
                generation.finish(generation.why_stopped)
            self.final, self.ended = [g.trace for g in self.generations], time.monotonic()
            self.error, self.position, self._done = error or self.failure, 0, True
            self._version += 1
            self._news.notify_all()


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
