"""The only way the app builds HTML: escaping by construction.

Everything a trace holds (token text, origins, positions, block ends, settings, file and model
names) may come from an uploaded file, so it is hostile until escaped. The helpers here make
escaping the default: `text` escapes anything, `tag` escapes its text content and *every*
attribute value, and only an `Html` value (a fragment these helpers built) passes through
unescaped. A field added later cannot be forgotten: the one way to put it into the page escapes it.

    tag("span", record.token_text, class_=["tok", "sel"], data_pos=record.position)
    → <span class="tok sel" data-pos="3">&lt;img …&gt;</span>
"""

from __future__ import annotations

import html
import math
import re

_NAME = re.compile(r"[a-z][a-z0-9-]*")  # tag and attribute names are written in code, never taken from data


class Html(str):
    """A fragment built by these helpers, safe to put into the page as it is."""


def text(value) -> Html:
    """Any value as escaped HTML text (None as nothing)."""
    if isinstance(value, Html):
        return value
    return Html("" if value is None else html.escape(str(value), quote=True))


def join(parts, separator: str = "") -> Html:
    """Fragments and text, each escaped unless it is already `Html`."""
    return Html(text(separator).join(text(part) for part in parts))


def tag(name: str, *content, **attributes) -> Html:
    """<name attributes>content</name>. Attribute names are Python keywords with `_` for `-` and a
    trailing `_` dropped (class_ → class, data_pos → data-pos); None or False leaves an attribute
    out, True writes it bare, a list is joined with spaces. Every value is escaped, quotes included."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a tag name: {name!r}")
    opening = name + "".join(_attribute(key, value) for key, value in attributes.items())
    return Html(f"<{opening}>{join(content)}</{name}>")


def _attribute(key: str, value) -> str:
    name = key.rstrip("_").replace("_", "-")
    if not _NAME.fullmatch(name):
        raise ValueError(f"not an attribute name: {key!r}")
    if value is None or value is False:
        return ""
    if value is True:
        return f" {name}"
    if isinstance(value, (list, tuple)):
        value = " ".join(str(v) for v in value if v)
    return f' {name}="{html.escape(str(value), quote=True)}"'


def number(value, spec: str = ".3f") -> str:
    """A number for display: "–" when missing, and a foreign value (from a hand-made file) shown
    as it is rather than crashing the page; the caller still escapes the result."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    try:
        return format(value, spec)
    except ValueError:  # an integer spec given a float, or the reverse
        return str(value)
