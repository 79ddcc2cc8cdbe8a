"""What one browser session holds: its two lanes' traces, the selected token, the step-through position,
and its downloads (components.downloads).

Lives in `gr.State`, one copy per user; the model pair is never in here. A session ends when its
tab closes (`Sessions.close`, from the page's unload event) or when its state expires (Gradio
calls `Session.close` after the page's time limit): its run leaves the shared batch, its traces
are dropped and its download folder is deleted.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from easd.errors import SettingsError
from easd.method.compare import DEFAULT_METHODS, LANES, first_difference, verifying, whatif_lane
from easd.method.trace import TokenRecord, Trace
from easd.render.search import Search
from easd.render.stepper import block_views
from easd.serving.tickets import Stream

from .downloads import Downloads
from .links import Link
from .rooms import Room


@dataclass
class Session:
    traces: dict[str, Trace | None] = field(default_factory=lambda: dict.fromkeys(LANES))
    selected: tuple[str, int] | None = None  # (lane, index of the record)
    step_lane: str = "right"
    step: int = 0
    running: bool = False
    stream: Stream | None = None  # this page's stream of its run in the shared batch (Stop and Clear end it)
    downloads: Downloads = field(default_factory=Downloads)
    room: Room | None = None  # the room this page presents to (components.rooms)
    watching: Room | None = None  # the room this page watches
    link: Link | None = None  # how a link finds the recorded runs shown (components.links); None for a live run
    search: Search | None = None  # the tokens the reader looks for (easd.render.search): marked in every run shown
    chosen: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_METHODS))  # each lane's method for the next run
    offered: SettingsError | None = None  # the last run's refusal whose remedy the page offers (its button: Page.fix)

    def clear(self) -> None:
        """Forget the traces and the selection; the run stops and the download folder is deleted too (Clear). A room
        the page presents or watches stays, and so does the search, which marks the next runs too."""
        room, watching, search, chosen = self.room, self.watching, self.search, self.chosen
        self._forget("stopped")
        self.room, self.watching, self.search, self.chosen = room, watching, search, chosen

    def close(self) -> None:
        """The session ends (tab closed, state expired): its run stops ("left"), its room ends, its files and traces go."""
        if self.room is not None:
            self.room.end()
        self._forget("left")

    def _forget(self, why: str) -> None:
        if self.stream is not None:
            self.stream.cancel(why)
        self.downloads.delete()
        self.__dict__.update(Session().__dict__)

    def show(self, stream: Stream) -> None:
        """The lanes show `stream`'s traces: snapshots while it runs, the finished traces once done."""
        self.traces = dict(zip(LANES, stream.traces()))  # its generations are a Comparison's, in LANES order

    @property
    def fork(self) -> int | None:
        return first_difference(self.traces["left"], self.traces["right"])

    def speculative(self) -> Trace | None:
        """The first lane's finished run that drafts and verifies (SD or EASD): the one the Speed panel and map explain."""
        return None if self.running else verifying(self.traces)

    def stale(self, lane: str) -> bool:
        """Whether the lane shows a run of another method than the one it will run next (its picker moved since)."""
        trace = self.traces.get(lane)
        return trace is not None and not self.running and trace.settings.method != self.chosen.get(lane)

    def lane_methods(self) -> list[str]:
        """The methods the lanes show: each lane's run's, or the one it will run where it has none."""
        return [t.settings.method if t is not None else self.chosen[lane] for lane, t in self.traces.items()]

    def whatif_lane(self) -> str | None:
        """The lane whose run the what-if re-reads (SD's, wherever it is: easd.method.compare.whatif_lane)."""
        return whatif_lane(self.traces)

    def selected_record(self) -> tuple[str, TokenRecord | None]:
        if self.selected is None:
            return "", None
        lane, index = self.selected
        trace = self.traces.get(lane)
        if trace is None or not 0 <= index < len(trace.records):
            return lane, None
        return lane, trace.records[index]

    def select(self, lane: str, index: int) -> None:
        """Select a token of a lane (nothing if it has no such token); the step-through moves to its block."""
        trace = self.traces.get(lane)
        if trace is not None and 0 <= index < len(trace.records):
            self.selected = (lane, index)
            self.step_lane = lane
            block = trace.records[index].block
            self.step = next(i for i, view in enumerate(block_views(trace)) if view.index == block)

    def load_traces(self, traces: list[Trace], source: str) -> str:
        """Put loaded runs into the lanes (`in_lanes`); -> the line that says so."""
        self.clear()
        self.traces = in_lanes(traces)
        self.chosen = self.chosen | {lane: t.settings.method for lane, t in self.traces.items() if t is not None}
        shown = [t for t in self.traces.values() if t is not None]
        skipped = len(traces) - len(shown)
        return f"Loaded {len(shown)} run(s) from {source}" + (f"; {skipped} more run(s) in the file not shown" if skipped else "")

    def export(self, root: Path) -> tuple[str, str] | None:
        """Both lanes' traces as the session's downloads under `root`; None while there is nothing to export."""
        return self.downloads.write(list(self.traces.values()), root)


def in_lanes(traces: list[Trace]) -> dict[str, Trace | None]:
    """A file's runs by lane: the page's default methods' runs in their lanes (SD | EASD), anything else in file order
    (the app exports its lanes left to right)."""
    by_method = {t.settings.method: t for t in traces}
    if set(by_method) <= set(DEFAULT_METHODS.values()):
        return {lane: by_method.get(method) for lane, method in DEFAULT_METHODS.items()}
    return dict(zip(LANES, traces + [None, None]))


class Sessions:
    """The sessions of open tabs, by Gradio's session hash: a closed tab's session is freed at once.

    Weak references: a session Gradio has dropped (its time limit passed) leaves on its own.
    """

    def __init__(self):
        self._open: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def track(self, session_hash: str, session: Session) -> None:
        if session_hash:
            with self._lock:
                self._open[session_hash] = session

    def close(self, session_hash: str) -> None:
        with self._lock:
            session = self._open.pop(session_hash, None)
        if session is not None:
            session.close()

    def __len__(self) -> int:
        return len(self._open)
