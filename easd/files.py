"""Files written beside their final name and renamed into place, so that a process reading at the same
moment finds the old file or the new one, never half of one (a rename within a folder is atomic); and the one way a
name given by a user or a data file (a problem id) becomes a file's name."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from pathlib import Path

READABLE_CHARS = 48  # of a file name made from a text: enough to recognize it, short enough for any file system
DIGEST_CHARS = 16  # of its SHA-256 (64 bits): two ids of a data file share none by chance
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def readable(text: str) -> str:
    """`text` as part of a file's name: its ASCII letters, digits, `_` and `-` (a run of anything else becomes one
    `-`), cut to READABLE_CHARS; "" where none is left. Such a name means the same on every OS and in a URL, as it is."""
    return _UNSAFE.sub("-", text).strip("-")[:READABLE_CHARS].strip("-")


def file_stem(key: str) -> str:
    """The stem of the file named after `key` (a problem id: any text, of any length): `readable(key)`, then a short
    hash of the whole key, so that two keys never share a file ("a b" and "a/b", two ids that begin alike, "A" and
    "a" on a file system that ignores case) and a key is never too long to name one. At most 65 characters, none of
    which a browser or an OS reads as anything but itself: `test/algebra/1.json` is `test-algebra-1-json-99228587b3303703`."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
    return f"{readable(key)}-{digest}".lstrip("-")


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
