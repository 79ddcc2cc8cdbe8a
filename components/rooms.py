"""Rooms: a class watches the presenter's runs live, each viewer in their own page, with no model time.

The presenter presses Present and gets a short code; whoever opens the app with `?room=CODE` sees
the presenter's prompt, settings and lanes as they stream, and each new run the presenter starts.
A viewer's page follows the presenter's ticket through a passive Stream (easd.serving.same_request): it
reads the same traces the presenter's page reads, so a room costs no decoding, and a viewer's Stop
only stops their own view. Everything else on a viewer's page (the inspector, the what-if, the
step-through, the figures, the downloads) works on their own copy of the traces. A room ends with
its presenter's session: their tab closes, or its time limit passes.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from easd.errors import EasdError
from easd.method.settings import DecodeSettings
from easd.serving.tickets import Ticket

from .downloads import Downloads

CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: a code is read aloud and typed
CODE_LENGTH = 5  # 32^5, about 33 million codes
MAX_VIEWERS = 250  # per room: a large lecture; each viewer's page costs a render a second, not a model pass
ROOM_EVERY_S = 1.0  # a viewer's page updates at most once a second
SHARED_UPDATES = 8  # renders a room keeps for its viewers: the latest few versions of the run it shows


@dataclass(frozen=True)
class Showing:
    """A run the presenter started: what viewers see of it, and the ticket they follow."""

    number: int  # 1, 2, … in the room
    ticket: Ticket
    prompt: str
    lanes: dict[str, DecodeSettings]  # each lane's settings, by lane: they differ only in the method


class Room:
    """One presenter's room: its code, the run it shows now, and how many watch."""

    def __init__(self, code: str, presenter: str):
        self.code, self.presenter = code, presenter
        self.showing: Showing | None = None
        self.ended = False
        self.viewers = 0
        self._lock = threading.Lock()
        self._rendered: dict[object, dict] = {}  # the latest updates every viewer shares, by what they show
        self.files = Downloads()  # the room's own downloads of a finished run, written once for every viewer

    def show(self, ticket: Ticket, prompt: str, lanes: dict[str, DecodeSettings]) -> None:
        with self._lock:
            number = self.showing.number + 1 if self.showing else 1
            self.showing = Showing(number, ticket, prompt, lanes)

    def shared(self, key: object, render: Callable[[], dict]) -> dict:
        """The update for `key` (a run, its version, a part of the page), rendered once for every viewer who shows
        the same (one who selected a token renders their own): a room of 100 costs about one page's rendering."""
        with self._lock:
            if key in self._rendered:
                return self._rendered[key]
        update = render()
        with self._lock:
            if len(self._rendered) >= SHARED_UPDATES:
                self._rendered.clear()
            self._rendered[key] = update
        return update

    def enter(self) -> None:
        """A viewer comes in; EasdError, in one line, when the room is full."""
        with self._lock:
            if self.viewers >= MAX_VIEWERS:
                raise EasdError(f"room {self.code} is full ({MAX_VIEWERS} viewers); ask the presenter to share their screen")
            self.viewers += 1

    def leave(self) -> None:
        with self._lock:
            self.viewers -= 1

    def end(self) -> None:
        self.ended = True
        self.files.delete()  # its download folder goes with it


class Rooms:
    """The open rooms, by code and by presenter (a browser session)."""

    def __init__(self):
        self._by_code: dict[str, Room] = {}
        self._lock = threading.Lock()

    def open(self, presenter: str) -> Room:
        """The presenter's room, made on their first Present."""
        with self._lock:
            for code in [c for c, r in self._by_code.items() if r.ended]:  # rooms whose presenter's session ended
                del self._by_code[code]
            mine = next((r for r in self._by_code.values() if r.presenter == presenter and not r.ended), None)
            if mine is not None:
                return mine
            code = _new_code(set(self._by_code))
            self._by_code[code] = room = Room(code, presenter)
            return room

    def get(self, code) -> Room | None:
        """The open room of `code` (any case, spaces ignored), or None."""
        if not isinstance(code, str):
            return None
        room = self._by_code.get(code.strip().upper())
        return room if room is not None and not room.ended else None


def _new_code(taken: set[str]) -> str:
    while (code := "".join(secrets.choice(CODE_LETTERS) for _ in range(CODE_LENGTH))) in taken:
        pass
    return code
