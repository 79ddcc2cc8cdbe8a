"""Token lanes: a trace rendered as coloured, hoverable, clickable spans of escaped text.

Token text is model output, so every piece of it goes through `html.escape` before it
becomes HTML: the span text, the tooltip and the legend alike. Nothing here decides anything
about the method; it only draws what a trace (and `easd.core.whatif`) says.
"""

from __future__ import annotations

import html

import numpy as np

from easd.core.trace import TokenRecord, Trace

# Okabe–Ito colours, safe for the common forms of colour blindness; CSS classes in assets/style.css.
ORIGIN_LABELS = {
    "draft_accepted": "draft accepted",
    "target_resample": "target resampled",
    "bonus": "bonus (target)",
    "easd_penalty": "EASD penalty",
    "target": "target only",
    "draft": "draft only",
}
TITLES = {"sd": "SD", "easd": "EASD", "target": "target only", "draft": "draft only"}
_VISIBLE = {"\n": "↵\n", "\t": "⇥", "\r": "␍"}


def visible_text(text: str) -> str:
    """Token text with invisible characters made visible; the result still needs escaping."""
    if text == "":
        return "∅"
    return "".join(_VISIBLE.get(ch, ch if ch.isprintable() or ch == " " else f"\\x{ord(ch):02x}") for ch in text)


def legend_html() -> str:
    items = "".join(
        f'<span class="tok o-{origin}">{html.escape(label)}</span>'
        for origin, label in ORIGIN_LABELS.items()
        if origin not in ("target", "draft")
    )
    extra = (
        '<span class="tok fork-mark">fork› first difference</span><span class="tok whatif">would be penalized (what-if)</span>'
    )
    return f'<div class="legend">{items}{extra}</div>'


def lane_title(lane: str, trace: Trace | None) -> str:
    if trace is None:
        return TITLES[lane]
    settings = trace.settings
    rule = f", rule {settings.rule}" if settings.method == "easd" else ""
    return f"{TITLES.get(settings.method, settings.method)}{rule}"


def lane_html(
    lane: str,
    trace: Trace | None,
    *,
    selected: int | None = None,
    fork: int | None = None,
    whatif: np.ndarray | None = None,
    running: bool = False,
) -> str:
    """One lane: a span per token, with data-lane/data-pos for clicks and a tooltip per token.

    Only spans, no wrapper: while a run streams, each update then just *appends* to the last one,
    which Gradio sends as a small diff instead of the whole lane again.
    """
    if trace is None or not trace.records:
        return f'<span class="empty">{"generating…" if running else "no tokens yet"}</span>'
    marks = whatif if whatif is not None else np.zeros(len(trace.records), dtype=bool)
    return "".join(_span(lane, r, r.position == selected, r.position == fork, bool(m)) for r, m in zip(trace.records, marks))


def _span(lane: str, record: TokenRecord, selected: bool, fork: bool, whatif: bool) -> str:
    classes = ["tok", f"o-{record.origin}"]
    classes += ["sel"] * selected + ["fork"] * fork + ["whatif"] * whatif
    tip = html.escape(tooltip(record), quote=True)
    text = html.escape(visible_text(record.token_text))
    return f'<span class="{" ".join(classes)}" data-lane="{lane}" data-pos="{record.position}" title="{tip}">{text}</span>'


def tooltip(record: TokenRecord) -> str:
    """Plain text (escaped by the caller): origin, signals, p and q of the drafted token, both top-5."""
    lines = [f"#{record.position} {ORIGIN_LABELS.get(record.origin, record.origin)} (block {record.block})"]
    signals = [
        f"H_d {format_number(record.h_draft)}",
        f"H_t {format_number(record.h_target)}",
        f"overlap {format_number(record.overlap)}",
    ]
    lines.append(" · ".join(signals))
    if record.draft_token_id is not None:
        lines.append(
            f"drafted “{visible_text(record.draft_token_text or '')}”: q={format_number(record.p_draft)} p={format_number(record.p_target)}"
        )
    for side, candidates in (("draft", record.draft_top), ("target", record.target_top)):
        if candidates:
            lines.append(f"{side} top-5: " + ", ".join(f"“{visible_text(t)}” {p:.2f}" for _, t, p in candidates[:5]))
    return "\n".join(lines)


def format_number(value) -> str:
    return "–" if value is None else f"{value:.3f}"


def fork_position(sd: Trace | None, easd: Trace | None) -> int | None:
    """The first position where the two lanes' tokens differ (None while they agree)."""
    if sd is None or easd is None:
        return None
    for a, b in zip(sd.records, easd.records):
        if a.token_id != b.token_id:
            return a.position
    return None
