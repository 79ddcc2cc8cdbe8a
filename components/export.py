"""The page's one-file export (easd.render.export draws it), made in a process of its own so that a long run's file
does not keep the server's other users waiting."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
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
    return _pool().submit(write_file, source, lanes, out).result()


def site_aside(sources: list[Path], title: str, out: Path) -> int:
    """The static site of `sources` (easd.lab.site: the page's JSON download, an evaluation folder) as one zip at `out`,
    made in the same process of its own as the one-file export (a folder of many problems takes seconds of CPU)
    -> the id of the process that made it."""
    return _pool().submit(write_site, sources, title, out).result()


def write_site(sources: list[Path], title: str, out: Path) -> int:
    """`site_aside`'s work, where it runs: the site built beside `out`, zipped into it, and the folder removed."""
    import shutil
    import tempfile

    from easd.lab.site import build_site

    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        site = build_site(sources, Path(scratch) / "site", title, progress=False)
        made = shutil.make_archive(str(Path(scratch) / "site"), "zip", site)
        os.replace(made, out)
    return os.getpid()


def write_file(source: Path, lanes: list[str], out: Path) -> int:
    """`file_aside`'s work, where it runs: -> that process's id."""
    runs = trace_io.read_json(source, capped=False)  # the server's own file: no limit to apply
    write_text_whole(out, comparison_file(dict(zip(lanes, runs))), errors="replace")  # a lone surrogate becomes "?"
    return os.getpid()


def _pool() -> ProcessPoolExecutor:
    """The one process the page's files are made in, started on the first file."""
    with _LOCK:
        global _POOL
        if _POOL is None:
            spawn = multiprocessing.get_context("spawn")
            _POOL = ProcessPoolExecutor(max_workers=1, mp_context=spawn, initializer=_end_with, initargs=(os.getpid(),))
        return _POOL


def _end_with(server: int) -> None:
    """In the files' process: end it once the server's process is gone. Killed (SIGTERM, as a Space or systemd stops
    it) the server runs no exit handler, and this process, with multiprocessing's resource tracker beside it, would
    run on, serving nobody."""

    def watch() -> None:
        while os.getppid() == server:
            time.sleep(SERVER_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="end-with-the-server", daemon=True).start()


SERVER_CHECK_S = 0.5  # how often the files' process looks for the server's
_LOCK = threading.Lock()
_POOL: ProcessPoolExecutor | None = None  # the process that makes files, once one was asked for
