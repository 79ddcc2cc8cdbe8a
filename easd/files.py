"""Files read and written whole, and the one way a name given by a user or a data file (a problem id) becomes a
file's name.

A user's file is read with bounds (`read_text`, `read_json`): it may be a pipe that never ends, a device, a
gigabyte, or text that is not UTF-8, and each must be one line naming the flag it came from, not a hang or a
traceback. Files are written beside their final name and renamed into place, so that a process reading at the same
moment finds the old file or the new one, never half of one (a rename within a folder is atomic).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from .errors import EasdError, SettingsError

# Python refuses to read an integer of more digits than this (CVE-2020-10735), in JSON as anywhere
INT_DIGITS = sys.get_int_max_str_digits()
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # \ud800–\udfff: half of a character pair in JSON's escapes


def read_text(path: Path, flag: str, max_bytes: int) -> str:
    """The UTF-8 text of a user's file (a byte-order mark dropped); refused in one line naming `flag` as `read_bytes`
    refuses it, or if it is not UTF-8 (with the line of the first byte that is not)."""
    return utf8_text(read_bytes(path, flag, max_bytes), path, flag)


def read_bytes(path: Path, flag: str, max_bytes: int) -> bytes:
    """The bytes of a user's file; refused in one line naming `flag` if it is missing, not a regular file (a pipe or
    device, which may block or never end: opened without waiting and never read) or larger than `max_bytes`."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO opens at once, unread
    except FileNotFoundError:
        raise EasdError(f"{flag}: no such file: {path}") from None
    except OSError as err:
        raise EasdError(f"{flag}: cannot open {path} ({err.strerror})") from None
    try:
        status = os.fstat(descriptor)  # of what was opened, not of what the name pointed to a moment before
        if stat.S_ISDIR(status.st_mode):
            raise EasdError(f"{flag}: {path} is a folder; give a file")
        if not stat.S_ISREG(status.st_mode):
            raise EasdError(f"{flag}: {path} is not a regular file (a pipe, device or socket); give a file saved on disk")
        if status.st_size > max_bytes:
            raise EasdError(f"{flag}: {path} is {status.st_size:,} bytes, more than the {max_bytes:,} it may be")
        try:
            with open(descriptor, "rb", closefd=False) as file:
                data = file.read(max_bytes + 1)  # a file growing while read still stops at the limit
        except OSError as err:  # a regular file only by its mode: /proc/self/mem refuses to be read from its start
            raise EasdError(f"{flag}: cannot read {path} ({err.strerror})") from None
    finally:
        os.close(descriptor)
    if len(data) > max_bytes:
        raise EasdError(f"{flag}: {path} grew past the {max_bytes:,} bytes it may be while it was read")
    return data


def utf8_text(data: bytes, path: Path, flag: str) -> str:
    """`data`, read from `path`, as UTF-8 text (a byte-order mark dropped), or one line naming `flag` and the line of
    the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise EasdError(f"{flag}: line {line} of {path} is not UTF-8 text (save the file as UTF-8)") from None


def read_json(text: str, where: str):
    """json.loads, where what Python cannot hold raises EasdError("{where} …", a reason and what to do): nesting too
    deep for its recursion, an integer of more than INT_DIGITS digits, an escape of half a character pair (\\ud800),
    which no UTF-8 text can hold. Text that is not JSON raises json.JSONDecodeError, for the caller to word."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise EasdError(f"{where} nests its JSON too deeply to read; nothing EASD reads nests so deep") from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # the one other ValueError json raises: an integer past Python's limit
        raise EasdError(
            f"{where} holds a number of more than {INT_DIGITS:,} digits, which Python does not read; write it as a string"
        ) from None
    if _SURROGATE_ESCAPE.search(text):  # rare: only then is the value checked (a pair of escapes is one character)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise EasdError(
                f"{where} holds a \\ud800–\\udfff escape without its pair, half of a character; fix or drop it"
            ) from None
    return value


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


def writable_folder(path: Path) -> None:
    """Make the folder `path` (and its parents) if it is missing, and write and remove a file in it: an OSError (its
    strerror says why) if this process cannot, so that a command finds out before its work rather than after."""
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder", str(path))
    path.mkdir(parents=True, exist_ok=True)
    probe = temporary_path(path / "probe")
    probe.write_bytes(b"")
    probe.unlink()


def claim_folder(path: Path, flag: str, name: str, ours: Callable[[Path], bool]) -> None:
    """Before a command's work (and its model's load), one line naming `flag` unless `path` can be the folder of its
    `name` ("study"): one this process can make and write in (`writable_folder`: not a file, nothing under /proc or
    /sys, no read-only disk), and new, empty or `ours(path)`, one the command made, to resume. A user's folder of
    other files is refused: the command would write into it and over its files."""
    try:
        writable_folder(path)
    except OSError as err:
        raise SettingsError(flag, f"{path} cannot be the {name}'s folder ({err.strerror}: {err.filename})") from None
    if any(path.iterdir()) and not ours(path):
        raise SettingsError(flag, f"{path} holds other files: give a new or empty folder, or an earlier {name}'s to --resume")
