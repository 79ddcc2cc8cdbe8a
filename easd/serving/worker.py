"""Many users' runs in one batch: a worker thread per model pair keeps the batch going while there is work.

A request is a Ticket: one user's generations (a comparison's SD and EASD). It waits in this worker's line, the one
place that admits a request to the shared batch (easd.method.rows says so from the batch's side), until the batch has
a row for each of them (`max_rows`), joins at the next block boundary, and
leaves when they end or it is cancelled; nobody waits for another user's run to finish
before theirs starts, only for room. Generations share forward passes and nothing else
(easd.method.step: each decodes exactly as it would alone, in float32).

Users who ask for exactly the same thing share one ticket, each through a Stream of it, and a
request that finished a moment ago is replayed from `Results` (easd.serving.same_request). Each user reads
only their own stream. After every block of a ticket's generation, the worker puts a
snapshot of that generation's trace in the ticket, so the user's thread never reads a trace the worker
is writing. With `abandon_after_s`, a running ticket whose readers have taken nothing at all for
that long is cancelled with stop reason "unread", so a vanished user cannot hold rows to the end;
a reader that takes anything, however slowly, keeps its run. The worker asks each stream's
`reader` (the app's look at what its client took, `components.gradio_internals`) at every block
boundary, so the answer does not wait on the thread that streams to the user.

Generations are isolated: one whose numbers fail ends alone (easd.method.step), its ticket ends with
that generation's one-line error, and every other ticket goes on. When the batch has room, the line is
served in order, except that an address already holding half the batch's rows waits behind
requests from other addresses, so one network address cannot take the whole class's batch.

With `chunks` (a ZeroGPU Space, which lends its GPU one call at a time), the batch is decoded in
rounds instead of one loop: each round is one call of `chunks` on every generation's snapshot
(easd.serving.chunks), run in the context of the ticket that has waited longest, so that the call
is charged to that user; between rounds tickets settle and join as they do between blocks. A call
refused because that user's GPU time is spent (QuotaSpent) ends that user's run alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable

from ..errors import Busy, EasdError, QuotaSpent, SettingsError
from ..method.generation import Generation, GenerationSnapshot
from ..method.judging import Block
from ..method.pair import ModelPair
from ..method.seam import free_memory, row_bytes
from ..method.step import Batch
from ..traces.files import to_json_dict
from .chunks import ChunkProgress, catch_up
from .estimates import Job, Pace, schedule
from .metrics import ServingMetrics
from .same_request import Results, request_key
from .tickets import Reader, Stream, Ticket

MEMORY_SHARE = 0.5  # of the free memory, what a default batch's KV caches may take: the models' activations need the rest
MAX_DEFAULT_ROWS = 32  # beyond this a CPU step grows too slow to stream; an operator with a GPU can ask for more
# rows one lane may use a step, on average, while others decode (easd.method.step.Batch): on the embedded pair on 2
# cores an SD lane beside an SMC-SD lane of 4 particles kept 0.51× its speed with none, 0.73× with 2
# (docs/benchmarks.md); a wider lane steps less often and pays for its rows itself
ROW_ALLOWANCE = 2
ADDRESS_SHARE = 0.5  # of the batch's rows, what one address may hold while requests from other addresses wait
STEP_FAILED = "decoding failed on the server (the details are in its log); try again"
log = logging.getLogger("easd.worker")
Chunks = Callable[[list[GenerationSnapshot]], list[ChunkProgress]]  # decodes rows for one round: easd.serving.chunks.decode_chunk


class Worker:
    """The shared batch of one model pair, run by one thread; `submit` tickets from any thread."""

    def __init__(
        self,
        pair: ModelPair,
        max_rows: int,
        row_tokens: int,
        abandon_after_s: float | None = None,
        chunks: Chunks | None = None,
        results: Results | None = None,
        metrics: ServingMetrics | None = None,
        name: str = "",
        allowance: int | None = None,
    ):
        check_max_rows(max_rows)
        limit = min(pair.draft.max_rows, pair.target.max_rows)
        if max_rows > limit:
            raise SettingsError("--max-batch", f"must be at most {limit} on {pair.backend} (got {max_rows})")
        self.pair = pair
        self.max_rows = max_rows
        self.row_tokens = row_tokens  # the most tokens (prompt and generated) one row may hold: bounds the batch's memory
        self.abandon_after_s = abandon_after_s  # None: tickets run to their end whether or not anyone reads them
        self.chunks = chunks  # None: one continuous batch; else every round of decoding is one call of it
        self.line: deque[Ticket] = deque()
        self.running: list[Ticket] = []
        self.computing: dict[Hashable, Ticket] = {}  # each ticket in line or running, by its request's key
        self.results = results if results is not None else Results()  # finished ones, replayed to the same request
        self.joins = True  # False: a request never joins its twin (the load test's baseline: the app before sharing)
        self.pace = Pace()  # the batch's measured speed, for the estimates
        self.metrics, self.name = metrics, name  # the app's figures for Prometheus (app.py --metrics), labelled `name`
        self.allowance = allowance  # rows a lane may use a step while others decode (app.py --row-allowance); None: all
        # since the last boundary: (its time, {id: rows} of the generations that stepped, tokens, joined)
        self._step = (time.monotonic(), {}, 0, False)
        self._ended = 0  # generations that ran to their end, for the pace's running mean
        self._lock = threading.Condition()
        serve = self._serve if chunks is None else self._serve_in_chunks
        self._thread = threading.Thread(target=serve, name="easd-worker", daemon=True)
        self._thread.start()

    def submit(
        self,
        generations: Iterable[Generation],
        owner: str = "",
        address: str = "",
        reader: Reader | None = None,
        max_line: int | None = None,
    ) -> Stream:
        """Put one user's generations in line; they join the batch as soon as it has room for all of them. The same
        request in line or decoding is joined instead, and one finished a moment ago replayed (easd.serving.same_request).
        A new request that would wait behind `max_line` others is refused in one line (joining or a replay costs
        nothing, and is never refused)."""
        ticket = Ticket(generations, address)
        ticket.key, ticket.allowance = request_key(self.pair, ticket.generations), self.allowance
        key = ticket.key
        if ticket.rows_held > self.max_rows:
            raise SettingsError(
                "--max-batch",
                f"is {self.max_rows} rows; a request of {ticket.rows_held} rows cannot fit (particles, candidates and beams "
                "are rows each): ask for fewer",
            )
        longest = max(g.prompt_length + g.settings.max_new_tokens for g in ticket.generations)
        if longest > self.row_tokens:
            raise SettingsError(
                "prompt",
                f"and the tokens asked for make {longest:,} tokens; rows here hold at most {self.row_tokens:,} "
                "so that everyone's fits in memory: shorten the prompt or ask for fewer tokens",
            )
        with self._lock:  # looked up and added at once, so two of the same request cannot both start
            twin = self.computing.get(key) if self.joins else None
            if twin is not None and not (twin.done or twin.cancelled):
                self._count("joined")
                return twin.open_stream(owner, reader, "joined")
            if (result := self.results.get(key)) is not None:  # its streams share the result's trace JSON
                self._count("replayed")
                return Ticket.finished(result).open_stream(owner, reader, "replayed")
            if max_line is not None and len(self.line) >= max_line:
                self._count("refused")
                raise Busy(
                    f"busy: {len(self.line)} requests are waiting for this pair already (at most {max_line}); try again in a minute"
                )
            stream = ticket.open_stream(owner, reader)
            self.computing[key] = ticket
            self.line.append(ticket)
            self._count("computed")
            self._renumber()
            self._lock.notify()
        return stream

    def _count(self, served: str) -> None:
        if self.metrics is not None:
            self.metrics.arrived(self.name, served)

    def cancel_owner(self, owner: str, why: str = "left") -> int:
        """Stop every stream `owner` (a closed tab) holds, with stop reason `why`; -> how many."""
        with self._lock:
            tickets = [t for t in (*self.running, *self.line) if not t.done]
        mine = [stream for ticket in tickets for stream in list(ticket.streams) if stream.owner == owner]
        for stream in mine:
            stream.cancel(why)
        return len(mine)

    def holding(self, owner: str | None = None, address: str | None = None) -> int:
        """Tickets in line or running, not cancelled, that `owner` watches (or that came from `address`, where joining
        one costs nothing more)."""
        with self._lock:
            tickets = [*self.line, *self.running]
        return sum(
            not (t.done or t.cancelled) and (owner is None or t.watched_by(owner)) and (address is None or t.address == address)
            for t in tickets
        )

    @property
    def users(self) -> int:
        """Tickets decoding in the batch right now."""
        return len(self.running)

    # --- the worker thread --------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self.line)
            # a fresh batch per busy spell: nothing of the last one stays; a long prompt is computed between the others' steps
            batch = Batch(self.pair, at_boundary=self._admit_into, prompts_between_steps=True, allowance=self.allowance)
            try:
                for block in batch:
                    self._deliver(block)
                self._admit(let_in=False)  # the batch ran dry: settle the last tickets; one that came since starts the next
            except Exception as err:  # a shared pass failed (a row's own maths fail alone, in the batch): its tickets end
                self._fail_running(err)

    def _serve_in_chunks(self) -> None:
        """Round after round: settle and admit, then one call of `chunks` decodes every generation for a while."""
        latest: dict[
            Generation, GenerationSnapshot
        ] = {}  # each one's state after the latest round (a Generation hashes as itself)
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self.line or self.running)
            self._admit()
            decoding = [g for t in self.running for g in t.generations if not g.done]
            for generation in decoding:
                if generation.stopped:  # cancelled: it leaves without another round
                    generation.finish(generation.why_stopped)
            decoding = [g for g in decoding if not g.done]
            snapshots = [latest.get(g) or GenerationSnapshot.of(g) for g in decoding]
            if not decoding:
                continue
            charged = self.running[0]
            try:
                progress = charged.context.run(self.chunks, snapshots)
            except QuotaSpent as err:  # only the user it was charged to is out of GPU time: the next round charges another
                with self._lock:
                    self.running.remove(charged)
                charged.cancel("quota")
                self._settle(charged, err)
                continue
            except Exception as err:  # the call failed: every ticket in it ends
                self._fail_running(err)
                continue
            latest = {}  # kept through a failed call: a snapshot, not the Generation, holds a run's random state
            for generation, chunk_progress in zip(decoding, progress):
                latest[generation] = chunk_progress.snapshot
                for block in catch_up(generation, chunk_progress):
                    self._deliver(block)

    def _deliver(self, block: Block) -> None:
        began, stepped, tokens, joined = self._step
        self._step = (began, stepped | {id(block.generation): block.generation.width}, tokens + len(block.records), joined)
        ticket = next(t for t in self.running if block.generation in t.generations)
        ticket.deliver(block, sharing=len(self.running))

    def _fail_running(self, err: Exception) -> None:
        """Every running ticket ends with one line (the error's own, or a generic one with the details in the log)."""
        if not isinstance(err, EasdError):
            log.exception("a step of the shared batch failed")
        failure = err if isinstance(err, EasdError) else EasdError(STEP_FAILED)
        with self._lock:
            failed, self.running = self.running, []
        for ticket in failed:
            ticket.cancel("error")
            self._settle(ticket, failure)

    def _settle(self, ticket: Ticket, error: EasdError | None = None) -> None:
        """The ticket is over: a result that ran to its end is kept for the same request, then its users are told
        (so that one who asks again at once is replayed, not computed again)."""
        traces = [g.trace for g in ticket.generations]
        if self.metrics is not None:
            self.metrics.ended(self.name, traces)
        result = None
        if error is None and ticket.failure is None and all(g.done for g in ticket.generations):  # made once, outside the
            # lock, for its streams and for the same request's replays
            ticket._document = to_json_dict(traces)
            result = self.results.measure(traces, ticket._document)
        with self._lock:  # no request can find the ticket gone and its result not kept yet
            if self.computing.get(ticket.key) is ticket:
                del self.computing[ticket.key]
            self.results.put(ticket.key, result)
        ticket.settle(error)

    def _admit_into(self, batch: Batch) -> None:
        """At a block boundary of `batch`: `_admit`, and the newly admitted generations join the batch."""
        for ticket in self._admit():
            for generation in ticket.generations:
                batch.add(generation)

    def _admit(self, let_in: bool = True) -> list[Ticket]:
        """Between steps: settle finished tickets, cancel abandoned ones, let in those that fit (unless `let_in` is
        False: after a batch's last step there is no batch for them to join); -> the ones let in."""
        now = time.monotonic()
        began, stepped, tokens, joined = self._step
        with self._lock:  # the pace is read under it too, by `submit` renumbering the line
            if stepped:  # a step (or, in chunks, a round of steps) ended: the pace learns from it
                self.pace.step(now - began, sum(stepped.values()), tokens, joined, len(stepped))
            for ticket in self.running:
                if self.abandon_after_s is not None and ticket.unread_for(now) > self.abandon_after_s:
                    ticket.cancel("unread")
                if ticket.failure is not None:  # a failed generation takes its ticket's others with it
                    ticket.cancel("error")
            finished = [t for t in self.running if all(g.done for g in t.generations)]
            for ticket in finished:
                self.running.remove(ticket)
                for generation in ticket.generations:
                    if generation.trace.stats.stop_reason in ("eos", "max_new_tokens"):
                        self.pace.finished(len(generation.trace.records), generation.settings.max_new_tokens, self._ended)
                        self._ended += 1
            for ticket in [t for t in self.line if t.cancelled]:
                self.line.remove(ticket)
                finished.append(ticket)
            # generations stopped but not yet gone leave at the next boundary, before anyone joins: their room is free now
            admitted = []
            while let_in and (ticket := self._next_in_line()) is not None:
                self.line.remove(ticket)
                ticket.started = ticket.last_read = now
                self.running.append(ticket)
                admitted.append(ticket)
            self._step = (now, {}, 0, bool(admitted))  # the next step also computes the prompts of those let in
            self._renumber()
            if self.metrics is not None:
                rows = sum(t.rows_held for t in self.running)
                self.metrics.boundary(self.name, len(self.line), rows, now - began if stepped else 0.0)
        for ticket in finished:
            self._settle(ticket)
        return admitted

    def _next_in_line(self) -> Ticket | None:
        """The first ticket in line that fits, skipping those of an address holding its share while others wait."""
        free = self.max_rows - sum(t.rows_held for t in self.running)
        fitting = [t for t in self.line if t.rows_held <= free]
        if not fitting or self.line[0].rows_held > free:
            return None  # the head waits for room: nobody overtakes it for lack of room alone
        share = self.max_rows * ADDRESS_SHARE
        held = {}
        for ticket in self.running:
            held[ticket.address] = held.get(ticket.address, 0) + ticket.rows_held
        fair = [t for t in fitting if held.get(t.address, 0) + t.rows_held <= share]
        return fair[0] if fair else fitting[0]

    def _renumber(self) -> None:
        """Each ticket's place in line, and when it starts and ends at the batch's measured pace (easd.serving.estimates)."""
        now = time.monotonic()
        running = [self._job(t) for t in self.running]
        waiting = [self._job(t) for t in self.line]
        ends, starts_and_ends = schedule(running, waiting, self.max_rows, self.pace.step_s)
        for ticket, end in zip(self.running, ends):
            ticket.moved(0, 0.0, end, now)
        for place, (ticket, (start, end)) in enumerate(zip(self.line, starts_and_ends), start=1):
            ticket.moved(place, start, end, now)

    def _job(self, ticket: Ticket) -> Job:
        """The ticket as the schedule sees it: the rows it holds, the rows it decodes a step on average (a generation
        wider than the allowance steps 1 in width ÷ allowance steps) and the steps its slowest generation needs still."""
        going = [g for g in ticket.generations if not (g.done or g.stopped)]
        share = {id(g): 1.0 if self.allowance is None else min(1.0, self.allowance / g.width) for g in going}
        left = [self.pace.tokens_left(len(g.trace.records), g.settings.max_new_tokens) / share[id(g)] for g in going]
        return Job(ticket.rows_held, self.pace.steps_for(max(left, default=0.0)), sum(g.width * share[id(g)] for g in going))


def check_max_rows(max_rows: int) -> None:
    """The batch's least size: app.py checks its --max-batch with this before anything loads, the worker again."""
    if max_rows < 2:
        raise SettingsError("--max-batch", f"must be at least 2: a comparison is two rows, SD and EASD (got {max_rows})")


def default_max_rows(pair: ModelPair, tokens_per_row: int) -> int:
    """Rows whose KV caches fit in MEMORY_SHARE of the free memory, from 2 to MAX_DEFAULT_ROWS."""
    fits = int(free_memory(pair.device) * MEMORY_SHARE // row_bytes((pair.draft, pair.target), tokens_per_row))
    return max(2, min(MAX_DEFAULT_ROWS, fits))
