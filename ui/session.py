"""What one browser session holds: its two traces, the selected token, the step-through position.

Lives in `gr.State`, one copy per user; the model pair is never in here.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from easd.core import trace as trace_io
from easd.core.compare import LANES
from easd.core.trace import TokenRecord, Trace

from .lanes import fork_position


@dataclass
class Session:
    traces: dict[str, Trace | None] = field(default_factory=lambda: dict.fromkeys(LANES))
    selected: tuple[str, int] | None = None  # (lane, position)
    step_lane: str = "easd"
    step: int = 0
    running: bool = False

    def clear(self) -> None:
        self.__dict__.update(Session().__dict__)

    @property
    def fork(self) -> int | None:
        return fork_position(self.traces["sd"], self.traces["easd"])

    def selected_record(self) -> tuple[str, TokenRecord | None]:
        if self.selected is None:
            return "", None
        lane, position = self.selected
        trace = self.traces.get(lane)
        if trace is None or not 0 <= position < len(trace.records):
            return lane, None
        return lane, trace.records[position]

    def select(self, lane: str, position: int) -> None:
        trace = self.traces.get(lane)
        if trace is not None and 0 <= position < len(trace.records):
            self.selected = (lane, position)

    def load_traces(self, traces: list[Trace], source: str) -> str:
        """Put loaded runs into the lanes: SD and EASD by method, anything else in file order."""
        self.clear()
        by_method = {t.settings.method: t for t in traces}
        if "sd" in by_method or "easd" in by_method:
            self.traces = {lane: by_method.get(lane) for lane in LANES}
        else:
            self.traces = dict(zip(LANES, traces + [None, None]))
        shown = [t for t in self.traces.values() if t is not None]
        skipped = len(traces) - len(shown)
        return f"Loaded {len(shown)} run(s) from {source}" + (f"; {skipped} more run(s) in the file not shown" if skipped else "")

    def export(self) -> tuple[str, str] | None:
        """Both traces as CSV and JSON files (one `method` column tells the runs apart)."""
        traces = [t for t in self.traces.values() if t is not None and t.records]
        if not traces:
            return None
        folder = Path(tempfile.mkdtemp(prefix="easd-trace-"))
        paths = folder / "easd-trace.csv", folder / "easd-trace.json"
        trace_io.write_csv(traces, paths[0])
        trace_io.write_json(traces, paths[1])
        return str(paths[0]), str(paths[1])
