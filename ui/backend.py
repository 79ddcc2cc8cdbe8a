"""The app's backend: the model pairs the operator allowed, loaded once and shared read-only.

Pairs load in a background thread so the page can show progress instead of failing. The
browser only ever names a pair from `allowed`; paths and hub ids come from the operator's
command line or environment, never from a request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from easd.core.pair import ModelPair

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


@dataclass
class ModelHost:
    """Allowed pairs by name, their load state, and the gate that limits concurrent generations."""

    allowed: dict[str, PairLoader]
    default: str | None
    max_new_tokens_cap: int = 512
    concurrency: int = 1
    states: dict[str, LoadState] = field(init=False)  # one per allowed pair, made in __post_init__

    def __post_init__(self):
        # Gradio frees a queue slot as soon as Stop is pressed, before the step in flight ends;
        # this gate keeps the number of generations actually running within `concurrency`.
        self.gate = threading.BoundedSemaphore(self.concurrency)
        self._lock = threading.Lock()
        self.states = {name: LoadState() for name in self.allowed}

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
