"""The app's backend: the model pairs the operator allowed, loaded once and shared read-only.

Pairs load in a background thread so the page can show progress instead of failing. The
browser only ever names a pair from `allowed`; paths and hub ids come from the operator's
command line or environment, never from a request.

Every user of a pair shares one batch: each loaded pair gets a `Worker` (easd.core.worker) that
decodes up to `max_batch` rows together, and a comparison (two rows) joins it at the next block
boundary, or waits in its line when it is full. `ModelHost.ticket` hands a request to it; a client
(a browser tab or API session, and separately its address) that already has
`max_queued_per_client` requests in line or running is refused at once with a "busy" message, so
one client cannot fill the line for everyone else.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from easd.core.decoding import Generation
from easd.core.pair import ModelPair
from easd.core.worker import MAX_DEFAULT_ROWS, Ticket, Worker, default_max_rows
from easd.errors import EasdError

PairLoader = Callable[[], ModelPair]


@dataclass
class LoadState:
    status: str = "idle"  # idle | loading | ready | failed
    message: str = ""
    started: float = 0.0
    pair: ModelPair | None = None
    worker: Worker | None = None  # the pair's shared batch, once loaded

    def describe(self) -> str:
        if self.status == "loading":
            return f"loading… {time.monotonic() - self.started:.0f} s ({self.message})"
        if self.status == "failed":
            return f"failed to load: {self.message}"
        return self.message


class Busy(EasdError):
    """This client already has as many requests in line as it may."""


@dataclass(frozen=True)
class Client:
    """Who a request comes from: its session (a tab, an API client) and its network address."""

    session: str = ""
    address: str = ""


ADDRESS_SHARE = 4  # an address may hold this many clients' worth of requests (several users behind one NAT)
PROMPT_TOKENS = 2048  # prompt tokens a row may hold beside the token cap: bounds every row's KV cache
ABANDON_S = 10.0  # a run whose page (or API client) has stopped reading for this long is stopped: see easd.core.worker


@dataclass
class ModelHost:
    """Allowed pairs by name, their load state, and the shared batch each one decodes in."""

    allowed: dict[str, PairLoader]
    default: str | None
    max_new_tokens_cap: int = 512
    max_batch: int | None = None  # rows decoded together; None: as many as fit in memory (easd.core.worker.default_max_rows)
    max_queued_per_client: int = 2  # requests one client may have in line or running
    max_waiting: int = 16  # requests waiting in a pair's line in all; more wait in Gradio's queue
    states: dict[str, LoadState] = field(init=False)  # one per allowed pair, made in __post_init__

    def __post_init__(self):
        self._lock = threading.Lock()
        self.states = {name: LoadState() for name in self.allowed}
        self._in_line: Counter = Counter()  # requests in line or running, by session and by address

    @property
    def row_tokens(self) -> int:
        return PROMPT_TOKENS + self.max_new_tokens_cap

    @property
    def slots(self) -> int:
        """Requests Gradio hands to the generating functions at once: those in the batches and those in line."""
        return (self.max_batch or MAX_DEFAULT_ROWS) // 2 + self.max_waiting

    @contextmanager
    def ticket(self, name: str, generations: Iterable[Generation], client: Client) -> Iterator[Ticket]:
        """Put `generations` in the shared batch of pair `name` for the block; raises Busy at once when
        `client` already has its share of requests. Leaving the block unfinished (Stop, a closed tab,
        an error) takes the rows out of the batch."""
        worker = self.states[name].worker
        self._join(client)
        try:
            ticket = worker.submit(generations, owner=client.session)
            try:
                yield ticket
            finally:
                if not ticket.done:  # the reader left early: its rows leave the batch
                    ticket.cancel()
        finally:
            self._leave(client)

    def cancel(self, client: Client) -> int:
        """Stop every run of `client`'s session (a closed tab, Stop, Clear); -> how many."""
        return sum(s.worker.cancel_owner(client.session) for s in self.states.values() if s.worker is not None)

    def _join(self, client: Client) -> None:
        with self._lock:
            mine = self._in_line[("session", client.session)]
            address_full = self._in_line[("address", client.address)] >= self.max_queued_per_client * ADDRESS_SHARE
            if mine >= self.max_queued_per_client or address_full:
                raise Busy(f"busy: you already have {mine or 'several'} request(s) waiting; try again when one has finished")
            self._in_line[("session", client.session)] += 1
            self._in_line[("address", client.address)] += 1

    def _leave(self, client: Client) -> None:
        with self._lock:
            self._in_line -= Counter({("session", client.session): 1, ("address", client.address): 1})

    def ensure_loading(self, name: str) -> LoadState:
        """Start loading `name` in the background unless it is loading or loaded already."""
        if name not in self.allowed:
            raise KeyError(f"pair {name!r} is not allowed here; choose one of {', '.join(self.allowed)}")
        with self._lock:
            state = self.states[name]
            if state.status in ("idle", "failed"):
                state.status, state.message, state.started = "loading", "first start may convert weights", time.monotonic()
                threading.Thread(target=self._load, args=(name,), daemon=True).start()
        return state

    def _load(self, name: str) -> None:
        state = self.states[name]
        try:
            pair = self.allowed[name]()
        except Exception as err:  # shown in the page; the app keeps serving traces
            state.status, state.message = "failed", (str(err).splitlines() or [type(err).__name__])[0]
            return
        seconds = time.monotonic() - state.started
        rows = self.max_batch or default_max_rows(pair, self.row_tokens)
        state.worker = Worker(pair, rows, self.row_tokens, abandon_after_s=ABANDON_S)
        state.pair, state.status = pair, "ready"
        state.message = f"{pair.describe()}; loaded in {seconds:.0f} s; up to {rows // 2} users decode together"

    def pair(self, name: str) -> ModelPair | None:
        state = self.states.get(name)
        return state.pair if state is not None and state.status == "ready" else None
