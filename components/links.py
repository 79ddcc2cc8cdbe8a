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

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from easd.errors import SettingsError

from .html import Html, tag

SOURCES = ("run", "eval")  # the parameters that name a recorded run; a link has one of them
MAX_VALUE = 200  # characters of a parameter read: enough for any key, name or problem id


@dataclass(frozen=True)
class Link:
    """What a link names: its source (the parameters that find the runs) and, optionally, a token."""

    source: dict[str, str]  # {"run": KEY} or {"eval": NAME, "problem": ID, "sample": S, "left": M, "right": M}
    lane: str | None = None
    token: int | None = None

    @staticmethod
    def read(query: dict[str, str]) -> Link | None:
        """The link in a page's query parameters, None when they name no recorded run; one line for a bad value."""
        if not any(name in query for name in SOURCES):
            return None
        values = {name: str(value)[:MAX_VALUE] for name, value in query.items()}
        if "run" in values:
            source = {"run": values["run"]}
        else:
            if not values.get("problem"):
                raise SettingsError("problem", "a link to an evaluation folder names a problem: add &problem=ID")
            source = {"eval": values["eval"], "problem": values["problem"], "sample": values.get("sample", "0")}
            source |= {lane: values.get(lane, default) for lane, default in (("left", "sd"), ("right", "easd"))}
            if not source["sample"].isdigit():
                raise SettingsError("sample", f"must be a whole number from 0 (got {source['sample'][:40]!r})")
        lane = values.get("lane")
        if lane is not None and lane not in ("left", "right"):
            raise SettingsError("lane", f"must be left or right (got {lane[:40]!r})")
        token = values.get("token")
        if token is not None and not token.isdigit():
            raise SettingsError("token", f"must be a whole number from 0 (got {token[:40]!r})")
        return Link(source, lane or ("right" if token is not None else None), int(token) if token is not None else None)

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
    raise SettingsError("eval", f"must be the name of an evaluation folder this app may open (got {name[:40]!r})")


def folder_name(folder: str | Path) -> str:
    """An allowed eval folder as the browser knows it: its name, never its path (the Evaluation tab's list, links)."""
    return Path(folder).name or str(folder)
