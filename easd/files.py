"""Files written beside their final name and renamed into place, so that a process reading at the same
moment finds the old file or the new one, never half of one (a rename within a folder is atomic)."""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path


def temporary_path(final: Path) -> Path:
    """A fresh name next to `final` (for a file or folder built there and renamed), hidden, and recognizable as a leftover."""
    return final.parent / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"


def write_text_whole(path: Path, text: str, errors: str = "strict") -> None:
    """Write `text` (UTF-8) to `path` aside and rename it into place, making the folder if needed; if anything fails,
    nothing is left behind, not even the aside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = temporary_path(path)
    try:
        written.write_text(text, encoding="utf-8", errors=errors)
        os.replace(written, path)
    except BaseException:
        written.unlink(missing_ok=True)
        raise


def writable_folder(path: Path) -> None:
    """Make the folder `path` (and its parents) if it is missing, and write and remove a file in it: an OSError (its
    strerror says why) if this process cannot, so that a command finds out before its work rather than after."""
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder", str(path))
    path.mkdir(parents=True, exist_ok=True)
    probe = temporary_path(path / "probe")
    probe.write_bytes(b"")
    probe.unlink()
