"""The inspector: why the selected token was chosen, under the run's settings and the sliders'."""

from __future__ import annotations

import re

from ..method.acceptance import RULE_CONDITIONS, rule_conditions
from ..method.methods import METHODS, columns_of, origins
from ..method.methods.relaxing import Relaxing
from ..method.settings import overlap_needed
from ..method.spec_metrics import refused
from ..method.trace import Column, TokenRecord, Trace
from ..method.whatif import RuleView, bar_reading, readable, record_overlap
from .html import Html, join, number, tag
from .lanes import lane_title, origin_class, origin_label, visible_text

CONDITION_LABELS = {"draft_entropy": "H_draft ≥ τ_H", "target_entropy": "H_target ≥ τ_H", "overlap": "overlap ≥ τ_O"}


def inspector_html(lane: str, trace: Trace | None, record: TokenRecord | None, view: RuleView) -> Html:
    """Why `record` (a token of `lane`'s run `trace`) was chosen; a hint while none is selected."""
    if record is None or trace is None:
        return tag(
            "div",
            "Click or tap a token in either lane (or Tab to a lane and use the arrow keys) to see why it was chosen.",
            class_="inspector empty",
        )
    close = tag("button", "✕ close", class_="close", type="button", aria_label="Close the token details")
    method = METHODS.get(trace.settings.method)
    blocks = method is None or method.verifies  # a block is SD's draft-and-check; elsewhere only the batch's step count
    header = _header(lane_title(lane, trace), record, blocks)
    parts = [close, header, _decision(record, trace.settings.temperature == 0, method)]
    explained = method.explains(record, trace.settings) if method is not None else ""
    if explained:  # what the run's own method did here (MTI's guidance, RSD's step), in its words
        parts.append(tag("p", explained))
    if method is not None and record.own is not None:
        parts.append(_own(record, method.record))
    if record.draft_token_id is not None:
        parts.append(_signals(record, view) if view.relaxed is None else _relaxed_reading(trace, record, view.relaxed))
    if record.h_draft_margin is not None:
        parts.append(_margins(record))
    parts.append(_candidates(record, view.top_n, method.record if method is not None else None))
    return tag("div", *parts, class_="inspector")


def _code(text) -> Html:
    return tag("code", visible_text(text or ""))


def _header(title: str, record: TokenRecord, blocks: bool) -> Html:
    """The token, its lane and its origin; its block where the method decodes in SD's blocks (a reasoning step's or a
    particle's cycle is the method's own line below, not a block)."""
    origin = tag("span", origin_label(record.origin), class_=["tok", origin_class(record.origin)])
    return join(
        [
            tag("h4", f"Token #{record.position} in {title}: ", _code(record.token_text)),
            tag("p", origin, f" · block {record.block}") if blocks else tag("p", origin),
        ]
    )


def _decision(record: TokenRecord, greedy: bool, method) -> Html:
    """The origin's sentence (easd.method.origins), its tokens and odds filled in: sampled, the test's min(1, p/q);
    greedy, no such probability, and a word on what the greedy test asks instead."""
    origin = origins().get(record.origin) if isinstance(record.origin, str) else None
    if origin is None:
        return tag("p")
    odds = f"(q = {number(record.p_draft)}, p = {number(record.p_target)}"
    odds += ")" if greedy else f": kept with probability min(1, p/q) = {number(record.accept_prob)})"
    fills = {"drafted": _code(record.draft_token_text), "chosen": _code(record.token_text), "odds": odds}
    said = tag("p", *(fills.get(part, part) for part in re.split(r"\{(drafted|chosen|odds)\}", origin.says)))
    if not (greedy and "{odds}" in origin.says):
        return said
    strict = method is not None and not isinstance(method, Relaxing)
    test = "the test keeps a draft exactly where it is the target's likeliest token; " if strict else ""
    return join(
        [
            said,
            tag(
                "p",
                f"Greedy run: {test}where a draft is not kept, the target's likeliest token is emitted "
                "(min(1, p/q) is the sampled test's).",
                class_="greedy",
            ),
        ]
    )


def _own(record: TokenRecord, declared) -> Html:
    """The method's own record (its `record` dataclass), one line a column: its label and value."""
    lines = []
    for name, column in columns_of(declared).items():
        value = record.value(name)
        if column.kind == "candidates" or value is None:
            continue  # candidate lists are shown beside the target's (`_candidates`)
        lines.append(tag("tr", tag("td", column.label or name), tag("td", _shown(value, column.kind))))
    return tag("table", *lines, class_="own") if lines else join([])


def _signals(record: TokenRecord, view: RuleView) -> Html:
    if not all(_is_real(value) for value in (record.h_draft, record.h_target)):
        return tag("p", "This row does not record both entropies, so the rule cannot be re-read here.")
    overlap = record_overlap(record, view.top_n)
    if overlap is None:
        return tag("p", f"This trace kept fewer than n = {view.top_n} candidates per token; lower n to see the rule.")
    held = rule_conditions(record.h_draft, record.h_target, overlap, tau_h=view.tau_h, tau_o=view.tau_o, top_n=view.top_n)
    values = {
        "draft_entropy": f"H_draft = {number(record.h_draft)} nats vs τ_H = {view.tau_h:g}",
        "target_entropy": f"H_target = {number(record.h_target)} nats vs τ_H = {view.tau_h:g}",
        "overlap": f"{overlap} of top-{view.top_n} shared vs at least {overlap_needed(view.tau_o, view.top_n)} (τ_O = {view.tau_o:g})",
    }
    rows = [
        tag(
            "tr",
            tag("td", "✓" if held[name] else "✗"),
            tag("td", label),
            tag("td", values[name]),
            class_="used" if name in RULE_CONDITIONS[view.rule] else "unused",
        )
        for name, label in CONDITION_LABELS.items()
    ]
    fires = view.fires(record.h_draft, record.h_target, overlap)
    verdict = tag(
        "p",
        "Rule ",
        tag("code", view.rule),
        " at these settings: ",
        tag("b", "fires" if fires else "does not fire"),
        f" (during the run: {'fired' if record.triggered else 'did not fire'}).",
    )
    return join([tag("table", *rows, class_="conditions"), verdict])


def _relaxed_reading(trace: Trace, record: TokenRecord, settings) -> Html:
    """The what-if as a relaxed rule (the other lane's) at the sliders' settings: would it keep this draft, by its bar?"""
    method = METHODS[settings.method]
    if trace.settings.temperature != 0:
        return tag(
            "p",
            f"This run sampled: {method.title} reads p at its temperature, which a trace does not record, "
            "so the what-if cannot re-read it here.",
        )
    if not readable(record):
        return tag("p", "This row does not record p(c) and the target's entropy, so the rule cannot be re-read here.")
    p_c, bar = (float(x[0]) for x in bar_reading([record], settings))
    keeps = bool(method.keeps(p_c, bar))
    test = "exceed" if method.strict else "reach"
    return tag(
        "p",
        f"What-if: {method.lane_title(settings)}, at the sliders, ",
        tag("b", "would keep" if keeps else "would not keep"),
        " the draft ",
        _code(record.draft_token_text),
        f" here: p = {number(p_c)} against its bar {number(bar)}, which p must {test} (p at temperature 1, as the rule "
        "reads a greedy run).",
    )


def _margins(record: TokenRecord) -> Html:
    """How far the run's decision was from flipping (docs/method.md, "Fragile decisions"), from the trace's margin columns."""
    fired = bool(record.triggered)
    rows = [
        tag("tr", tag("td", "H_draft − τ_H"), tag("td", f"{number(record.h_draft_margin, '+.4f')} nats")),
        tag("tr", tag("td", "H_target − τ_H"), tag("td", f"{number(record.h_target_margin, '+.4f')} nats")),
        tag("tr", tag("td", "draft's n-th − (n+1)-th logit"), tag("td", number(record.draft_gap, ".4f"))),
        tag("tr", tag("td", "target's n-th − (n+1)-th logit"), tag("td", number(record.target_gap, ".4f"))),
        tag("tr", tag("td", "swapping a boundary pair changes the overlap"), tag("td", "yes" if record.overlap_swap else "no")),
    ]
    flips = []
    for name, margin in (("H_draft", record.h_draft_margin), ("H_target", record.h_target_margin)):
        if _is_real(margin) and (margin >= 0) == fired:
            flips.append(f"{name} had been more than {abs(margin):.4f} nats {'lower' if fired else 'higher'}")
    if record.overlap_swap:
        flips.append("a model's n-th and (n+1)-th candidates had swapped places")
    if refused(record):
        what = "this penalty would not have fired"
    else:
        what = f"the rule would {'not ' if fired else ''}have fired"
    changes = " or ".join(flips) if flips else "its signals had moved further"
    lead = f"During the run, {what} if {changes} (only the conditions of the run's rule count)."
    if record.fragile is None:
        verdict = "Fragility is unknown for this row (copied from an SD run under other thresholds)."
    elif record.fragile:
        verdict = "≈ Fragile: a perturbation at the models' numeric precision could flip this decision."
    else:
        verdict = "Robust: no perturbation at the models' numeric precision flips this decision."
    return join([tag("table", *rows, class_="margins"), tag("p", lead), tag("p", tag("b", verdict))])


def _shown(value, kind: str) -> str:
    """A method's own value as the inspector shows it: a count as a count, a flag as yes or no."""
    if kind == "bool":
        return "yes" if value is True else "no" if value is False else str(value)
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return number(value) if _is_real(value) else str(value)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _candidates(record: TokenRecord, top_n: int, declared) -> Html:
    """The token's top candidates side by side: the draft's and the target's, or, where the method recorded a list of
    tokens of its own (MTI's guided distribution), the target's beside that one. A list of other things (SpecGuard's
    candidate steps, SMC-SD's particles) is a table of its own above them, its entry this token came from marked: it is
    what the method decided by."""
    n = max(top_n, 5)
    own = _own_candidates(record, declared)
    if own is not None and own[0].ids:
        column, candidates = own
        origin = origins().get(record.origin) if isinstance(record.origin, str) else None
        writer = record.draft_top if origin is not None and origin.writer == "draft" else record.target_top
        lists = [(column.beside, "p", writer[:n]), (column.label, column.values, candidates[:n])]
    else:
        lists = [("draft token", "q", record.draft_top[:n]), ("target token", "p", record.target_top[:n])]
    lists = [entry for entry in lists if entry[2]] or lists[-1:]  # a model that kept no candidates here: its column goes
    shared = {t for t, _, _ in lists[0][2]} & {t for t, _, _ in lists[-1][2]} if len(lists) > 1 else set()
    head = tag("tr", tag("th", "rank"), *(tag("th", name) for token, prob, _ in lists for name in (token, prob)))
    rows = [head]
    for rank in range(max(len(candidates) for _, _, candidates in lists)):
        cells = [tag("td", rank + 1)]
        for _, _, candidates in lists:
            cells += _candidate_cells(candidates[rank] if rank < len(candidates) else None, record, shared)
        rows.append(tag("tr", *cells))
    both = "bold: in both top lists · " if len(lists) > 1 else ""
    tokens = join([tag("table", *rows, class_="candidates"), tag("p", f"{both}▸ drafted · ★ emitted", class_="hint")])
    if own is None or own[0].ids:
        return tokens
    return join([_own_list(record, *own), tokens])


def _own_list(record: TokenRecord, column: Column, entries: list) -> Html:
    """A method's own list (its steps, its particles): number, text and value, the entry this token came from marked ◆."""
    mine = record.value(column.marks) if column.marks else None
    head = tag("tr", tag("th", "#"), tag("th", column.label), tag("th", column.values))
    rows = [head]
    for key, text, value in entries:
        marked = mine is not None and key == mine
        rows.append(
            tag(
                "tr",
                tag("td", ("◆ " if marked else "") + str(key)),
                tag("td", _code(text)),
                tag("td", number(value)),
                class_="mine" if marked else None,
            )
        )
    hint = tag("p", "◆ this token's", class_="hint") if mine is not None else join([])
    return join([tag("table", *rows, class_="own-list"), hint])


def _own_candidates(record: TokenRecord, declared) -> tuple[Column, list] | None:
    """(its declaration, the list) of a candidate list the record's method (its record dataclass `declared`)
    recorded of its own, where the record holds one."""
    for name, column in columns_of(declared).items():
        value = record.value(name)
        if column.kind == "candidates" and value:
            return column, value
    return None


def _candidate_cells(candidate, record: TokenRecord, shared: set) -> list[Html]:
    """A candidate token's text (marked where it is the drafted or the emitted token, bold where both lists hold it)
    and its probability."""
    if candidate is None:
        return [tag("td"), tag("td")]
    key, text, value = candidate
    marks = ("▸" if key == record.draft_token_id else "") + ("★" if key == record.token_id else "")
    return [tag("td", marks, _code(text), class_="shared" if key in shared else None), tag("td", number(value))]
