"""The page's one-file export (easd.render.export draws it), made in a process of its own so that a long run's file
does not keep the server's other users waiting."""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from easd.files import write_text_whole
from easd.render.export import comparison_file
from easd.traces import files as trace_io


def file_aside(source: Path, lanes: list[str], out: Path) -> int:
    """Write the comparison file at `out`, in a process of its own, from the runs of `source` (a JSON trace file whose
    runs are `lanes`' in order: the page's own download, already written). A long run's file takes seconds of
    CPU, and in the server's process its long single steps (a join of the whole file, escaping one huge text) would hold
    Python's lock for a third of a second at a time, keeping every other user's page and /metrics waiting; the
    process is started once, on the first file, and serves one file at a time (the page's make_html limit).
    -> the id of the process that wrote it."""
    with _LOCK:
        global _POOL
        if _POOL is None:
            _POOL = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        pool = _POOL
    return pool.submit(write_file, source, lanes, out).result()


def write_file(source: Path, lanes: list[str], out: Path) -> int:
    """`file_aside`'s work, where it runs: -> that process's id."""
    runs = trace_io.read_json(source, capped=False)  # the server's own file: no limit to apply
    write_text_whole(out, comparison_file(dict(zip(lanes, runs))), errors="replace")  # a lone surrogate becomes "?"
    return os.getpid()


_LOCK = threading.Lock()
_POOL: ProcessPoolExecutor | None = None  # the process that makes files, once one was asked for
