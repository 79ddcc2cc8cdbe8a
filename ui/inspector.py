"""The inspector: why the selected token was chosen, under the run's settings and the sliders'."""

from __future__ import annotations

import html

from easd.core.acceptance import RULE_CONDITIONS, rule_conditions
from easd.core.settings import overlap_needed
from easd.core.trace import TokenRecord
from easd.core.whatif import record_overlap

from .lanes import ORIGIN_LABELS, TITLES, format_number, visible_text

CONDITION_LABELS = {"draft_entropy": "H_draft ≥ τ_H", "target_entropy": "H_target ≥ τ_H", "overlap": "overlap ≥ τ_O"}


def inspector_html(lane: str, record: TokenRecord | None, rule: str, tau_h: float, tau_o: float, top_n: int) -> str:
    if record is None:
        return '<div class="inspector empty">Click a token in either lane to inspect it.</div>'
    parts = [_header(lane, record), _decision(record)]
    if record.draft_token_id is not None:
        parts.append(_signals(record, rule, tau_h, tau_o, top_n))
    parts.append(_candidates(record, top_n))
    return f'<div class="inspector">{"".join(parts)}</div>'


def _esc(text: str | None) -> str:
    return html.escape(visible_text(text or ""))


def _header(lane: str, record: TokenRecord) -> str:
    origin = ORIGIN_LABELS.get(record.origin, record.origin)
    return (
        f"<h4>Token #{record.position} in {TITLES.get(lane, lane)}: <code>{_esc(record.token_text)}</code></h4>"
        f'<p><span class="tok o-{record.origin}">{html.escape(origin)}</span> · block {record.block}</p>'
    )


def _decision(record: TokenRecord) -> str:
    drafted = f"<code>{_esc(record.draft_token_text)}</code>"
    chosen = f"<code>{_esc(record.token_text)}</code>"
    odds = f"(q = {format_number(record.p_draft)}, p = {format_number(record.p_target)}, acceptance probability {format_number(record.accept_prob)})"
    explanations = {
        "draft_accepted": f"The draft proposed {drafted} {odds}; the target's test kept it.",
        "target_resample": f"The draft proposed {drafted} {odds}; the target's test rejected it, so {chosen} was drawn from the residual max(0, p − q).",
        "easd_penalty": f"The draft proposed {drafted} {odds} and the target's test accepted it, but both models were uncertain and agreed, so EASD <b>refused</b> it and the target chose {chosen} instead.",
        "bonus": f"All drafts of the block were kept, so the target added {chosen} from its own next-token distribution.",
        "target": f"The target alone chose {chosen}.",
        "draft": f"The draft alone chose {chosen}.",
    }
    return f"<p>{explanations.get(record.origin, '')}</p>"


def _signals(record: TokenRecord, rule: str, tau_h: float, tau_o: float, top_n: int) -> str:
    overlap = record_overlap(record, top_n)
    if overlap is None:
        return f"<p>This trace kept fewer than n = {top_n} candidates per token; lower n to see the rule.</p>"
    held = rule_conditions(record.h_draft, record.h_target, overlap, tau_h=tau_h, tau_o=tau_o, top_n=top_n)
    needed = overlap_needed(tau_o, top_n)
    values = {
        "draft_entropy": f"H_draft = {format_number(record.h_draft)} nats vs τ_H = {tau_h:g}",
        "target_entropy": f"H_target = {format_number(record.h_target)} nats vs τ_H = {tau_h:g}",
        "overlap": f"{overlap} of top-{top_n} shared vs at least {needed} (τ_O = {tau_o:g})",
    }
    rows = "".join(
        f'<tr class="{"used" if name in RULE_CONDITIONS[rule] else "unused"}"><td>{"✓" if held[name] else "✗"}</td>'
        f"<td>{CONDITION_LABELS[name]}</td><td>{values[name]}</td></tr>"
        for name in CONDITION_LABELS
    )
    fires = all(held[name] for name in RULE_CONDITIONS[rule])
    verdict = f"Rule <code>{rule}</code> at these settings: <b>{'fires' if fires else 'does not fire'}</b>"
    verdict += f" (during the run: {'fired' if record.triggered else 'did not fire'})."
    return f'<table class="conditions">{rows}</table><p>{verdict}</p>'


def _candidates(record: TokenRecord, top_n: int) -> str:
    n = max(top_n, 5)
    draft, target = record.draft_top[:n], record.target_top[:n]
    shared = {t for t, _, _ in draft} & {t for t, _, _ in target}
    rows = []
    for rank in range(max(len(draft), len(target))):
        cells = [f"<td>{rank + 1}</td>"]
        for candidates in (draft, target):
            cells.append(_candidate_cells(candidates[rank] if rank < len(candidates) else None, record, shared))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = "<tr><th>rank</th><th>draft token</th><th>q</th><th>target token</th><th>p</th></tr>"
    return f'<table class="candidates">{head}{"".join(rows)}</table><p class="hint">bold: in both top lists · ▸ drafted · ★ emitted</p>'


def _candidate_cells(candidate, record: TokenRecord, shared: set[int]) -> str:
    if candidate is None:
        return "<td></td><td></td>"
    token, text, prob = candidate
    marks = ("▸" if token == record.draft_token_id else "") + ("★" if token == record.token_id else "")
    style = ' class="shared"' if token in shared else ""
    return f"<td{style}>{marks}<code>{_esc(text)}</code></td><td>{prob:.3f}</td>"
