"""Links to a token of a recorded run: the page's address names the run and the token, so that a teacher can point
at "token 24 of the right lane" and a researcher at the token where two methods part.

    ?run=KEY&lane=right&token=24                                a gallery recording (its key in assets/gallery)
    ?eval=NAME&problem=ID&sample=0&left=sd&right=easd&lane=right&token=24
                                                                a problem of an eval folder the operator allowed
                                                                (NAME is the folder's name, as the Evaluation tab
                                                                lists it), its traces from `eval --traces`

Only what the operator allowed can be named: a gallery key from its index, a folder among --eval-dir's, a problem
read from that folder's traces/ and nowhere else. Anything else is one line on the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from easd.errors import SettingsError, shown
from easd.method.compare import DEFAULT_METHODS
from easd.render.html import Html, tag

SOURCES = ("run", "eval")  # the parameters that name a recorded run; a link has one of them
MAX_VALUE = 200  # characters of a parameter read: enough for any key, name or problem id
MAX_PLACE = 999_999_999  # the largest token or sample number a link may name: nine digits, more than any run holds
_WHOLE = re.compile(r"[0-9]{1,9}")  # ASCII digits only: str.isdigit() also takes "²", which int() refuses
_NAME = re.compile(r"[^\x00-\x1f\x7f]+")  # a key, folder name, problem id or method: text without control characters


@dataclass(frozen=True)
class Link:
    """What a link names: its source (the parameters that find the runs) and, optionally, a token."""

    source: dict[str, str]  # {"run": KEY} or {"eval": NAME, "problem": ID, "sample": S, "left": M, "right": M}
    lane: str | None = None
    token: int | None = None

    @staticmethod
    def read(query: dict[str, str]) -> Link | None:
        """The link in a page's query parameters, None when they name no recorded run; one line naming the first bad
        parameter, which parses by the very rule its message states."""
        if not any(name in query for name in SOURCES):
            return None
        values = {name: str(value)[:MAX_VALUE] for name, value in query.items()}
        if "run" in values:
            source = {"run": _name("run", values["run"], "the key of a recording in the gallery")}
        else:
            if not values.get("problem"):
                raise SettingsError("problem", "a link to an evaluation folder names a problem: add &problem=ID")
            source = {
                "eval": _name("eval", values["eval"], "the name of an evaluation folder this app may open"),
                "problem": _name("problem", values["problem"], "a problem id of that folder"),
                "sample": str(_whole("sample", values.get("sample", "0"))),
            }
            source |= {lane: _name(lane, values.get(lane, default), "a method") for lane, default in DEFAULT_METHODS.items()}
        lane = values.get("lane")
        if lane is not None and lane not in ("left", "right"):
            raise SettingsError("lane", f"must be left or right (got {shown(lane)})")
        token = _whole("token", values["token"]) if "token" in values else None
        return Link(source, lane or ("right" if token is not None else None), token)

    def to(self, lane: str, token: int) -> str:
        """The address (its query, relative to the page) of this link's runs with `lane`'s token `token` selected."""
        return "?" + urlencode({**self.source, "lane": lane, "token": token})


def link_html(link: Link | None, selected: tuple[str, int] | None) -> Html:
    """Under the inspector: a link to the selected token of recorded runs, and a button that copies it (the page's
    script, components.page); nothing for a live run, which lives only in its page."""
    if link is None or selected is None:
        return Html("")
    href = link.to(*selected)
    copy = tag("button", "🔗 copy link", class_="copy-link", type="button", data_href=href)
    return tag("p", copy, " ", tag("a", "a link to this token", href=href), class_="token-link")


def eval_folder(name: str, allowed: list[str]) -> Path:
    """The allowed eval folder named `name` (as the Evaluation tab lists it); one line if none is."""
    for folder in allowed:
        if folder_name(folder) == name:
            return Path(folder)
    raise SettingsError("eval", f"must be the name of an evaluation folder this app may open (got {shown(name)})")


def _whole(name: str, value: str) -> int:
    """A link's whole number (`token`, `sample`): ASCII digits, at most nine of them."""
    if not _WHOLE.fullmatch(value):
        raise SettingsError(name, f"must be a whole number from 0 to {MAX_PLACE:,} (got {shown(value)})")
    return int(value)


def _name(name: str, value: str, meaning: str) -> str:
    """A link's name of something (a gallery key, a folder, a problem, a method): text without control characters;
    whether it names something there is for its owner to say (`eval_folder`, the gallery, the folder's traces/)."""
    if not _NAME.fullmatch(value):
        raise SettingsError(name, f"must be {meaning}, as text without control characters (got {shown(value)})")
    return value


def folder_name(folder: str | Path) -> str:
    """An allowed eval folder as the browser knows it: its name, never its path (the Evaluation tab's list, links)."""
    return Path(folder).name or str(folder)
