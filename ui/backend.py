"""The app's backend: the model pairs the operator allowed, loaded once and shared read-only.

Pairs load in a background thread so the page can show progress instead of failing. The
browser only ever names a pair from `allowed`; paths and hub ids come from the operator's
command line or environment, never from a request.

Generations take turns through `ModelHost.turn`: at most `concurrency` run at once, the rest wait
in line, and a client (a browser tab or API session, and separately its address) that already has
`max_queued_per_client` requests in line or running is refused at once with a "busy" message, so
one client cannot fill the line for everyone else.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from easd.core.pair import ModelPair
from easd.errors import EasdError

PairLoader = Callable[[], ModelPair]


@dataclass
class LoadState:
    status: str = "idle"  # idle | loading | ready | failed
    message: str = ""
    started: float = 0.0
    pair: ModelPair | None = None

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
FIRST_GUESS_S = 10.0  # the expected length of a run before any has finished


@dataclass
class ModelHost:
    """Allowed pairs by name, their load state, and the gate that limits concurrent generations."""

    allowed: dict[str, PairLoader]
    default: str | None
    max_new_tokens_cap: int = 512
    concurrency: int = 1
    max_queued_per_client: int = 2  # requests one client may have in line or running
    max_waiting: int = 16  # requests waiting here in all; more wait in Gradio's queue
    states: dict[str, LoadState] = field(init=False)  # one per allowed pair, made in __post_init__

    def __post_init__(self):
        # Gradio frees a queue slot as soon as Stop is pressed, before the step in flight ends;
        # this gate keeps the number of generations actually running within `concurrency`.
        self.gate = threading.BoundedSemaphore(self.concurrency)
        self._lock = threading.Lock()
        self.states = {name: LoadState() for name in self.allowed}
        self._in_line: Counter = Counter()  # requests in line or running, by session and by address
        self._mean_run_s = FIRST_GUESS_S

    @property
    def slots(self) -> int:
        """Requests Gradio hands to the generating functions at once: the running ones and those waiting here."""
        return self.concurrency + self.max_waiting

    @contextmanager
    def turn(self, client: Client) -> Iterator[None]:
        """Hold one of the `concurrency` generation slots for the block, waiting in line for it;
        raises Busy at once when `client` already has its share of requests in line."""
        self._join(client)
        try:
            with self.gate:  # released when the run ends, is stopped, or the tab closes
                started = time.monotonic()
                try:
                    yield
                finally:
                    self._mean_run_s = 0.7 * self._mean_run_s + 0.3 * (time.monotonic() - started)
        finally:
            self._leave(client)

    def _join(self, client: Client) -> None:
        with self._lock:
            mine = self._in_line[("session", client.session)]
            address_full = self._in_line[("address", client.address)] >= self.max_queued_per_client * ADDRESS_SHARE
            if mine >= self.max_queued_per_client or address_full:
                raise Busy(
                    f"busy: you already have {mine or 'several'} request(s) waiting; try again in about {self._wait_s()} s"
                )
            self._in_line[("session", client.session)] += 1
            self._in_line[("address", client.address)] += 1

    def _leave(self, client: Client) -> None:
        with self._lock:
            self._in_line -= Counter({("session", client.session): 1, ("address", client.address): 1})

    def _wait_s(self) -> int:
        """A rough wait: the requests in line, `concurrency` at a time, at the recent mean length of a run."""
        in_line = sum(n for (kind, _), n in self._in_line.items() if kind == "session")
        return max(1, math.ceil(in_line / self.concurrency * self._mean_run_s))

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
        state.pair, state.status, state.message = pair, "ready", f"{pair.describe()}; loaded in {seconds:.0f} s"

    def pair(self, name: str) -> ModelPair | None:
        state = self.states.get(name)
        return state.pair if state is not None and state.status == "ready" else None
