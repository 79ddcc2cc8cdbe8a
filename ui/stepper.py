"""Step-through for teaching: a finished run walked block by block.

Each block shows what the draft proposed, which drafts the target kept, where and why the
block ended, and the token emitted there. JSON traces keep every drafted token; a CSV trace
only holds drafts up to the first refusal, and the later ones are shown as unknown.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from easd.core.decoding import BLOCK_END
from easd.core.trace import TokenRecord, Trace

from .lanes import visible_text

END_REASONS = {
    "rejected": "the target's standard test rejected a draft",
    "penalty": "EASD refused a draft the standard test had accepted",
    "bonus": "every draft was accepted, so the target added a bonus token",
    "single": "one model, one token per step",
}


@dataclass
class BlockView:
    index: int
    drafted: list[tuple[int, str]]  # what the draft proposed (possibly only the examined part)
    records: list[TokenRecord]  # what the block emitted
    end: str
    complete: bool  # False when later drafts are unknown (CSV traces)


def block_views(trace: Trace | None) -> list[BlockView]:
    if trace is None:
        return []
    records_by_block: dict[int, list[TokenRecord]] = {}
    for record in trace.records:
        records_by_block.setdefault(record.block, []).append(record)
    infos = {info.index: info for info in trace.blocks}
    views = []
    for index, records in records_by_block.items():
        info = infos.get(index)
        if info is not None:
            views.append(BlockView(index, info.drafted, records, info.end, True))
        else:
            drafted = [(r.draft_token_id, r.draft_token_text or "") for r in records if r.draft_token_id is not None]
            views.append(BlockView(index, drafted, records, _end_of(records), False))
    return views


def _end_of(records: list[TokenRecord]) -> str:
    return BLOCK_END.get(records[-1].origin, "single")


def stepper_html(lane_title: str, views: list[BlockView], step: int) -> str:
    if not views:
        return '<div class="stepper empty">Finish or load a run to step through its blocks.</div>'
    step = min(max(step, 0), len(views) - 1)
    view = views[step]
    head = f"<h4>{html.escape(lane_title)}: block {step + 1} of {len(views)}</h4>"
    return f'<div class="stepper">{head}{_drafts(view)}{_ending(view)}</div>'


def _drafts(view: BlockView) -> str:
    if not view.drafted:
        return "<p>No drafts in this block.</p>"
    cells = []
    for i, (_, text) in enumerate(view.drafted):
        record = view.records[i] if i < len(view.records) and view.records[i].draft_token_id is not None else None
        status, mark = _draft_status(record)
        cells.append(f'<span class="draft {status}">{mark} <code>{html.escape(visible_text(text))}</code></span>')
    if not view.complete:
        cells.append('<span class="draft unknown">… later drafts are not kept in CSV traces</span>')
    return f'<p>The draft proposed {len(view.drafted)} token(s):</p><div class="drafts">{"".join(cells)}</div>'


def _draft_status(record: TokenRecord | None) -> tuple[str, str]:
    if record is None:
        return "unseen", "· never examined"
    return {
        "draft_accepted": ("kept", "✓ kept"),
        "target_resample": ("rejected", "✗ rejected"),
        "easd_penalty": ("refused", "⚠ refused by EASD"),
    }.get(record.origin, ("unseen", "·"))


def _ending(view: BlockView) -> str:
    last = view.records[-1]
    emitted = "".join(f"<code>{html.escape(visible_text(r.token_text))}</code>" for r in view.records)
    reason = END_REASONS.get(view.end, view.end)
    detail = ""
    if last.origin == "easd_penalty":
        detail = (
            f" H_draft = {last.h_draft:.2f}, H_target = {last.h_target:.2f}, overlap = {last.overlap:.2f}; "
            f"instead of <code>{html.escape(visible_text(last.draft_token_text or ''))}</code> the target chose "
            f"<code>{html.escape(visible_text(last.token_text))}</code>."
        )
    elif last.origin == "target_resample":
        detail = f" The target resampled <code>{html.escape(visible_text(last.token_text))}</code> from max(0, p − q)."
    return f"<p><b>Why it ended:</b> {reason}.{detail}</p><p>Emitted: {emitted}</p>"
