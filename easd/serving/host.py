"""The app's backend: the model pairs the operator allowed, loaded once and shared read-only.

Pairs load in a background thread so the page can show progress instead of failing. The
browser only ever names a pair from `allowed`; paths and hub ids come from the operator's
command line or environment, never from a request.

Every user of a pair shares one batch: each loaded pair gets a `Worker` (easd.serving.worker) that
decodes up to `max_batch` rows together, and a comparison (two rows) joins it at the next block
boundary, or waits in its line when it is full. `ModelHost.stream` hands a request to it; the same
request as one in line, decoding or just finished is joined or replayed instead (easd.serving.same_request). Two
limits count what is really in line or running: a client (a browser tab or an API session) may
hold `max_queued_per_client` requests, a network address `max_per_address` (several users behind
one school's NAT share an address); past either, a request is refused at once with a "busy" line
that says which limit. The address is the connection's own, unless the operator named the proxies
whose X-Forwarded-For header may be trusted (app.py --forwarded-allow-ips).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import Busy, EasdError
from ..method.generation import Generation
from ..method.pair import ModelPair, PairLoader
from ..method.speed import measure_pass_cost
from . import zerogpu
from .metrics import ServingMetrics
from .same_request import RESULTS_BYTES, Results
from .tickets import Reader, Stream
from .worker import MAX_DEFAULT_ROWS, ROW_ALLOWANCE, Worker, default_max_rows


@dataclass
class LoadState:
    status: str = "idle"  # idle | loading | ready | failed
    message: str = ""
    started: float = 0.0
    pair: ModelPair | None = None
    worker: Worker | None = None  # the pair's shared batch, once loaded
    waiters: list[object] = field(default_factory=list)  # calls waiting for the load to end, in order of arrival
    settled: threading.Event = field(default_factory=threading.Event)  # set when a load ends, ready or failed

    def describe(self) -> str:
        if self.status == "loading":
            return f"loading… {time.monotonic() - self.started:.0f} s ({self.message})"
        if self.status == "failed":
            return f"failed to load: {self.message}"
        return self.message


@dataclass(frozen=True)
class Client:
    """Who a request comes from: its session (a tab, an API client) and its network address."""

    session: str = ""
    address: str = ""


PROMPT_TOKENS = 2048  # prompt tokens a row may hold beside the token cap: bounds every row's KV cache
LOAD_WAIT_S = 300.0  # a call that comes while its pair loads waits this long for it (a first start may convert files)
ABANDON_S = 10.0  # a run whose page (or API client) has stopped reading for this long is stopped: see easd.serving.worker


@dataclass
class ModelHost:
    """Allowed pairs by name, their load state, and the shared batch each one decodes in."""

    allowed: dict[str, PairLoader]
    default: str | None
    max_new_tokens_cap: int = 512
    max_batch: int | None = None  # rows decoded together; None: as many as fit in memory (easd.serving.worker.default_max_rows)
    # rows one lane may use a step while others decode (a wider group steps less often: easd.method.step.Batch); None: no limit
    row_allowance: int | None = ROW_ALLOWANCE
    max_queued_per_client: int = 2  # requests one client may have in line or running
    max_per_address: int | None = None  # requests one network address may have in line or running; None: half of `slots`
    max_waiting: int = 16  # pages' requests waiting in a pair's line in all; more wait in Gradio's queue
    max_line: int = (
        64  # requests waiting in a pair's line in all: API calls, which no Gradio limit holds back, are refused past it
    )
    abandon_after_s: float = ABANDON_S  # a run whose client has not taken what it was sent for this long is stopped
    result_bytes: int = RESULTS_BYTES  # finished results kept per pair for the same request (app.py --result-cache-mb)
    metrics: ServingMetrics | None = None  # the figures GET /metrics shows (app.py --metrics); None: not counted
    states: dict[str, LoadState] = field(init=False)  # one per allowed pair, made in __post_init__

    def __post_init__(self):
        self._lock = threading.Lock()
        self.states = {name: LoadState() for name in self.allowed}

    @property
    def row_tokens(self) -> int:
        return PROMPT_TOKENS + self.max_new_tokens_cap

    @property
    def slots(self) -> int:
        """Requests Gradio hands to the generating functions at once: those in the batches and those in line."""
        return (self.max_batch or MAX_DEFAULT_ROWS) // 2 + self.max_waiting

    @property
    def address_cap(self) -> int:
        return self.max_per_address or max(self.max_queued_per_client, self.slots // 2)

    @contextmanager
    def stream(
        self, name: str, generations: Iterable[Generation], client: Client, reader: Reader | None = None
    ) -> Iterator[Stream]:
        """Put `generations` in the shared batch of pair `name` for the block (or join the same request, or replay
        it); raises Busy at once when `client` already has its share of requests. `reader` says whether the
        client has taken anything since it was last asked (see easd.serving.worker). Leaving the block unfinished
        (Stop, a closed tab, an error) ends the client's stream, and the generations leave the batch if nobody else
        watches them."""
        worker = self.states[name].worker
        with self._lock:  # counted and submitted at once, so two requests cannot both take the last place
            try:
                self._check_limits(client)
            except Busy:
                if self.metrics is not None:
                    self.metrics.arrived(name, "refused")
                raise
            stream = worker.submit(generations, client.session, client.address, reader, self.max_line)
        try:
            yield stream
        finally:
            if not stream.done:  # the handler ended before the run: its client went away (or its page cancelled it)
                stream.cancel("left")

    def cancel(self, client: Client, why: str = "left") -> int:
        """Stop every run of `client`'s session (its tab closed), with stop reason `why`; -> how many."""
        return sum(worker.cancel_owner(client.session, why) for worker in self._workers())

    def _check_limits(self, client: Client) -> None:
        """Busy, in words that say which limit, if the client or its address already holds its share.

        Counted from the workers' lines and batches (what is really waiting or running), not from
        handlers still open: a client that vanished mid-run holds nothing once its ticket is cancelled.
        """
        mine = sum(worker.holding(owner=client.session) for worker in self._workers())
        if mine >= self.max_queued_per_client:
            raise Busy(
                f"busy: you already have {mine} run(s) going or waiting (at most {self.max_queued_per_client}); "
                "try again when one has finished"
            )
        neighbours = sum(worker.holding(address=client.address) for worker in self._workers())
        if neighbours >= self.address_cap:
            raise Busy(
                f"busy: your network address already has {neighbours} runs going or waiting "
                f"(at most {self.address_cap} per address); try again when one has finished"
            )

    def _workers(self) -> list[Worker]:
        return [state.worker for state in self.states.values() if state.worker is not None]

    def ensure_loading(self, name: str) -> LoadState:
        """Start loading `name` in the background unless it is loading or loaded already."""
        if name not in self.allowed:
            raise KeyError(f"pair {name!r} is not allowed here; choose one of {', '.join(self.allowed)}")
        with self._lock:
            state = self.states[name]
            if state.status in ("idle", "failed"):
                state.settled.clear()
                state.status, state.message, state.started = (
                    "loading",
                    "seconds; the very first start joins or converts files",
                    time.monotonic(),
                )
                threading.Thread(target=self._load, args=(name,), daemon=True).start()
        return state

    def _load(self, name: str) -> None:
        state = self.states[name]
        try:
            pair = self.allowed[name]()
        except Exception as err:  # shown in the page; the app keeps serving traces
            state.status, state.message = "failed", (str(err).splitlines() or [type(err).__name__])[0]
            state.settled.set()
            return
        chunks = zerogpu.chunks_for(name, pair, self.allowed[name])
        if chunks is None:  # passes measured alone, for the Speed panel (easd.method.speed); ZeroGPU lends no GPU here
            pair = dataclasses.replace(pair, info={**pair.info, **measure_pass_cost(pair).info()})
        seconds = time.monotonic() - state.started
        # on ZeroGPU the GPU's free memory cannot be asked outside a GPU call: the default batch then is the fixed one
        rows = self.max_batch or (MAX_DEFAULT_ROWS if chunks else default_max_rows(pair, self.row_tokens))
        results = Results(self.result_bytes)
        allowance = None if chunks else self.row_allowance  # on ZeroGPU's GPU, more rows in a pass cost little
        state.worker = Worker(pair, rows, self.row_tokens, self.abandon_after_s, chunks, results, self.metrics, name, allowance)
        mode = f"; {zerogpu.MODE}" if chunks else ""
        state.message = f"{pair.describe()}; loaded in {seconds:.0f} s; up to {rows // 2} users decode together{mode}"
        state.pair, state.status = pair, "ready"
        state.settled.set()

    def waiting_for(self, name: str, limit_s: float = LOAD_WAIT_S) -> Iterator[int]:
        """Until pair `name` is ready, this call's place among the calls waiting for it (1, 2, …), about once a
        second; a pair not yet asked for starts loading. Ends at once for a ready pair. Raises EasdError, in one
        line, for a pair that failed to load (it is not retried for a call: the page's status retries it), or one
        still loading after `limit_s`."""
        state = self.states[name]
        if state.status == "idle":
            self.ensure_loading(name)
        waiter = object()
        with self._lock:
            state.waiters.append(waiter)
        try:
            deadline = time.monotonic() + limit_s
            while state.status == "loading" and time.monotonic() < deadline:
                yield state.waiters.index(waiter) + 1
                state.settled.wait(1.0)
        finally:
            with self._lock:
                state.waiters.remove(waiter)
        if state.status == "failed":
            raise EasdError(f"the pair {name} failed to load: {state.message}")
        if state.status != "ready":
            raise EasdError(f"the pair {name} is still loading after {limit_s:.0f} s ({state.describe()}); try again later")

    def gpu_cost(self, name: str, tokens: int) -> str:
        """On ZeroGPU, what a run of `tokens` new tokens per lane on pair `name` will cost in GPU seconds; else ""."""
        worker = self.states[name].worker
        return worker.chunks.describe_cost(tokens) if worker is not None and worker.chunks is not None else ""

    def pair(self, name: str) -> ModelPair | None:
        state = self.states.get(name)
        return state.pair if state is not None and state.status == "ready" else None
