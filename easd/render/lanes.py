"""Token lanes: a trace rendered as coloured, hoverable, clickable spans of escaped text.

Token text is model output and a loaded trace may hold anything in any field, so every span is
built with `easd.render.html` (text and attributes escaped by construction), and the CSS class of an
origin comes from a fixed table, never from the trace. Nothing here decides anything about the
method; it only draws what a trace (and `easd.method.whatif`) says.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..method.compare import reads_as, shows_rule
from ..method.methods import METHODS, origins
from ..method.origins import ALONE
from ..method.references import PROPOSED
from ..method.spec_metrics import refused
from ..method.trace import TokenRecord, Trace
from ..method.whatif import Marks
from .html import Html, join, number, tag

# Each origin's colour and words are its method's declaration (easd.method.origins: Okabe–Ito colours, safe for the
# common forms of colour blindness); `origin_css` makes the lanes' style sheet of them, an origin no method here has
# gets "o-unknown" (assets/style.css).
_VISIBLE = {"\n": "↵\n", "\t": "⇥", "\r": "␍"}
MAX_LANE_TOKENS = 2000  # spans drawn per lane: a huge loaded trace is shown as a window around the selection
# a what-if mark's class by its kind (easd.method.whatif.Marks): a wavy line where EASD would refuse SD's kept draft,
# a double one where a relaxed rule would keep the draft SD refused (lines, not colour alone)
WHATIF_CLASS = {"refused": "whatif", "kept": "whatif-kept"}
MAX_KEPT_SPANS = 50_000  # spans a page keeps rendered (about 20 MB): 16 users' two lanes of 1,000 tokens, and more


def visible_text(text) -> str:
    """Token text with invisible characters made visible; the result still needs escaping."""
    if text is None or text == "":
        return "∅"
    text = str(text)  # a loaded file may hold a number where text belongs
    return "".join(_VISIBLE.get(ch, ch if ch.isprintable() or ch == " " else f"\\x{ord(ch):02x}") for ch in text)


def origin_class(origin) -> str:
    return f"o-{origin}" if isinstance(origin, str) and origin in origins() else "o-unknown"


def origin_label(origin) -> str:
    known = origins().get(origin) if isinstance(origin, str) else None
    return known.label if known is not None else str(origin)


def origin_css() -> str:
    """The lanes' colours: a rule for each origin of the methods' table, from its declaration."""
    return "\n".join(origin.css() for origin in origins().values())


def legend_html(methods: Iterable[str]) -> Html:
    """What the lanes running `methods` may show: their methods' origins (a model alone's are plain grey, and left out),
    then the marks that can fall on them: the fork, the what-if's (on an SD lane: EASD's refusals, or beside a relaxed
    rule its keeps), the search's, and a refusal rounding could flip (beside a method that refuses)."""
    shown = [METHODS[name] for name in dict.fromkeys(methods) if name in METHODS]
    named = {origin.name: origin for method in shown for origin in method.origins if origin.name not in ALONE}
    items = [tag("span", origin.label, class_=["tok", origin_class(name)]) for name, origin in named.items()]
    items.append(tag("span", "fork› first difference", class_="tok fork-mark"))
    names = [method.name for method in shown]
    if any(shows_rule(name) for name in names):
        kept = reads_as(names) != PROPOSED
        items.append(
            tag("span", "draft would be kept (what-if)", class_="tok whatif-kept")
            if kept
            else tag("span", "would be penalized (what-if)", class_="tok whatif")
        )
    items.append(tag("span", "found by the search", class_="tok found"))
    refusal = next((name for name, origin in named.items() if origin.role == "refused"), None)
    if refusal is not None:
        items.append(tag("span", "refusal rounding could flip", class_=["tok", origin_class(refusal), "fragile"]))
    return tag("div", *items, class_="legend")


def lane_title(lane: str, trace: Trace | None) -> str:
    """Plain text (escaped where it is shown): the lane's run's method as its table entry names such a run (EASD with
    its rule), or the lane's name while it has none."""
    if trace is None:
        return f"{lane} lane"
    method = METHODS.get(trace.settings.method) if isinstance(trace.settings.method, str) else None
    return method.lane_title(trace.settings) if method is not None else str(trace.settings.method)


def title(method) -> str:
    """How a lane names a run's method: its title in the methods' table, else the name as it is (a hand-made file's)."""
    return METHODS[method].title if isinstance(method, str) and method in METHODS else str(method)


def lane_window(trace: Trace, selected: int | None, limit: int | None = MAX_LANE_TOKENS) -> range:
    """The indices of the records a lane draws: all of them, or `limit` around the selection (None: no limit)."""
    count = len(trace.records)
    if limit is None or count <= limit:
        return range(count)
    start = min(max((selected or 0) - limit // 2, 0), count - limit)
    return range(start, start + limit)


class Spans:
    """Token spans, each rendered once: a record never changes once emitted, so its span is kept by the record
    itself (its identity), its lane and place, and its marks. A lane that streams then costs what is new per update,
    not the whole lane again, and every page showing the same run (same-request users, a room's viewers: they hold
    the same records) shares the renders. At most `max_spans` are kept; past that the memo starts afresh."""

    def __init__(self, max_spans: int = MAX_KEPT_SPANS):
        self.max_spans = max_spans
        self._kept: dict[tuple, tuple[TokenRecord, Html]] = {}

    def span(self, lane: str, index: int, record: TokenRecord, marks: tuple[bool, ...]) -> Html:
        key = (id(record), lane, index, marks)
        kept = self._kept.get(key)
        if kept is not None and kept[0] is record:  # the record it was made for (it holds it, so its id is not reused)
            return kept[1]
        html = _span(lane, index, record, *marks)
        if len(self._kept) >= self.max_spans:
            self._kept = {}
        self._kept[key] = (record, html)
        return html


def lane_html(
    lane: str,
    trace: Trace | None,
    *,
    selected: int | None = None,
    fork: int | None = None,
    whatif: Marks | None = None,
    found: set[int] | None = None,
    running: bool = False,
    spans: Spans | None = None,
    limit: int | None = MAX_LANE_TOKENS,
) -> Html:
    """One lane: a span per token, with data-lane/data-pos for clicks and a tooltip per token (from `spans`, where
    each is rendered once, if given); `whatif` marks what EASD would refuse or a relaxed rule keep, `found` the tokens
    a search matched.
    The page draws at most `limit` tokens, around the selection, and moves the window as the selection moves; a file
    that opens without a server (easd.render.export) draws them all (None).

    Only spans, no wrapper: while a run streams, each update then just *appends* to the last one,
    which Gradio sends as a small diff instead of the whole lane again.
    """
    if trace is None or not trace.records:
        return tag("span", "generating…" if running else "no tokens yet", class_="empty")
    marks = whatif.rows if whatif is not None else np.zeros(len(trace.records), dtype=bool)
    mark = WHATIF_CLASS[whatif.kind] if whatif is not None else None
    window = lane_window(trace, selected, limit)
    # one token of the lane is in the Tab order (the selected one, else the first); the arrow keys reach the rest
    entry = selected if selected in window else window.start
    spans = spans or Spans(len(window))
    found = found or set()
    drawn = [
        spans.span(lane, i, trace.records[i], (i == selected, i == fork, marks[i] and mark, i == entry, i in found))
        for i in window
    ]
    if len(window) < len(trace.records):
        note = (
            f"showing tokens {window.start}–{window.stop - 1} of {len(trace.records):,}; click a token near an end to move on ›"
        )
        drawn.insert(0, tag("span", note, class_="empty"))
    return join(drawn)


def _span(
    lane: str, index: int, record: TokenRecord, selected: bool, fork: bool, whatif, entry: bool, found: bool = False
) -> Html:
    """`whatif`: the what-if's mark's class here, or a false value."""
    fragile = record.fragile is True and refused(record)  # marked by "≈" and a dashed frame, not colour alone
    classes = [
        "tok",
        origin_class(record.origin),
        selected and "sel",
        fork and "fork",
        whatif or None,
        fragile and "fragile",
        found and "found",
    ]
    return tag(
        "span",
        visible_text(record.token_text),
        class_=classes,
        data_lane=lane,
        data_pos=index,
        title=tooltip(record),
        role="button",
        tabindex=0 if entry else -1,
        aria_pressed="true" if selected else "false",
    )


def tooltip(record: TokenRecord) -> str:
    """Plain text (escaped by the caller): origin, signals, p and q of the drafted token, both top-5."""
    lines = [f"#{record.position} {origin_label(record.origin)} (block {record.block})"]
    signals = [f"H_d {number(record.h_draft)}", f"H_t {number(record.h_target)}", f"overlap {number(record.overlap)}"]
    lines.append(" · ".join(signals))
    if record.fragile is not None:
        lines.append(
            "fragile: a rounding step could flip the rule here" if record.fragile else "the rule's decision here is robust"
        )
    if record.draft_token_id is not None:
        drafted = visible_text(record.draft_token_text or "")
        lines.append(f"drafted “{drafted}”: q={number(record.p_draft)} p={number(record.p_target)}")
    for side, candidates in (("draft", record.draft_top), ("target", record.target_top)):
        if candidates:
            lines.append(f"{side} top-5: " + ", ".join(f"“{visible_text(t)}” {number(p, '.2f')}" for _, t, p in candidates[:5]))
    return "\n".join(lines)
