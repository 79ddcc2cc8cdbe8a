"""The files a page offers for download: its lanes' traces as one CSV and one JSON file, and on demand both lanes as
one HTML file or as a static site, in a folder of its own.

The folder lies inside Gradio's own file cache, so Gradio serves the downloads from there without copying them;
it is made on the first export, its files replaced by later ones, and deleted with its owner (a session, or a
room for its viewers), which leaves nothing behind.
"""

from __future__ import annotations

import datetime
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from easd.method.trace import Trace
from easd.traces import files as trace_io


@dataclass
class Downloads:
    folder: Path | None = None  # made on the first export, under the page's download root

    def write(self, traces: list[Trace], root: Path) -> tuple[str, str] | None:
        """The traces as CSV and JSON in this folder (one `method` column tells the runs apart); None for no tokens."""
        traces = [t for t in traces if t is not None and t.records]
        if not traces:
            return None
        for old in self._made(root).iterdir():  # one pair of files per owner: the latest export
            old.unlink()
        name = export_name(traces[0], datetime.date.today())
        paths = self.folder / f"{name}.csv", self.folder / f"{name}.json"
        trace_io.write_csv(traces, paths[0])
        trace_io.write_json(traces, paths[1])
        return str(paths[0]), str(paths[1])

    def made_path(self, traces: list[Trace], root: Path, ending: str) -> Path:
        """Where a file made of the traces on demand goes (`ending`: ".html" for one page, "-site.zip" for a static
        site): beside the latest export's files, named as they are."""
        first = next(t for t in traces if t is not None and t.records)
        return self._made(root) / f"{export_name(first, datetime.date.today())}{ending}"

    def latest_json(self) -> Path | None:
        """The JSON file of the latest export (`write`), None before one."""
        found = sorted(self.folder.glob("*.json")) if self.folder is not None and self.folder.is_dir() else []
        return found[0] if found else None

    def _made(self, root: Path) -> Path:
        """The folder, made under `root` if it is not there."""
        if self.folder is None or not self.folder.is_dir():
            root.mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(prefix="easd-session-", dir=root))
        return self.folder

    def delete(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def export_name(trace: Trace, day: datetime.date) -> str:
    """easd-2026-12-01-qwen2.5-coder-0.5b-instruct-to-qwen2.5-coder-1.5b-instruct-natalia-sold-clips-to-48:
    the date, the pair and the prompt's first words, in characters every file system takes."""
    pair = f"{_slug(trace.draft_model, 40)}-to-{_slug(trace.target_model, 40)}" if trace.draft_model else ""
    words = _slug(" ".join(trace.prompt.split()[:5]), 40)
    return "-".join(part for part in ("easd", day.isoformat(), pair, words) if part)


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")[:limit].strip("-.")
