"""Step-through for teaching: a finished run walked block by block.

Each block shows what the draft proposed, which drafts the target kept, where and why the
block ended, and the token emitted there. JSON traces keep every drafted token; a CSV trace
only holds drafts up to the first refusal, and the later ones are shown as unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..method.trace import TokenRecord, Trace
from .html import Html, join, number, tag
from .lanes import visible_text

END_REASONS = {  # by the origin of the block's last token
    "target_resample": "the target's standard test rejected a draft",
    "easd_penalty": "EASD refused a draft the standard test had accepted",
    "bonus": "every draft was accepted, so the target added a bonus token",
    "draft_accepted": "the run ended inside the block (an end token, or the token limit)",
    "target": "one model, one token per step",
    "draft": "one model, one token per step",
}


@dataclass
class BlockView:
    index: int
    drafted: list[tuple[int, str]]  # what the draft proposed (possibly only the examined part)
    records: list[TokenRecord]  # what the block emitted
    end: str  # the origin of the token that ended the block
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
    return records[-1].origin


def stepper_html(lane_title: str, views: list[BlockView], step: int) -> Html:
    if not views:
        return tag("div", "Finish or load a run to step through its blocks.", class_="stepper empty")
    step = min(max(step, 0), len(views) - 1)
    view = views[step]
    head = tag("h4", f"{lane_title}: block {view.index} ({step + 1} of {len(views)})")  # numbered as in the trace and inspector
    return tag("div", head, _drafts(view), _ending(view), class_="stepper")


def _code(text) -> Html:
    return tag("code", visible_text(text))


def _drafts(view: BlockView) -> Html:
    if not view.drafted:
        return tag("p", "No drafts in this block.")
    cells = []
    for i, (_, text) in enumerate(view.drafted):
        record = view.records[i] if i < len(view.records) and view.records[i].draft_token_id is not None else None
        status, mark = _draft_status(record)
        cells.append(tag("span", f"{mark} ", _code(text), class_=["draft", status]))
    if not view.complete:
        cells.append(tag("span", "… later drafts are not kept in CSV traces", class_="draft unknown"))
    return join([tag("p", f"The draft proposed {len(view.drafted)} token(s):"), tag("div", *cells, class_="drafts")])


def _draft_status(record: TokenRecord | None) -> tuple[str, str]:
    if record is None:
        return "unseen", "· never examined"
    statuses = {
        "draft_accepted": ("kept", "✓ kept"),
        "target_resample": ("rejected", "✗ rejected"),
        "easd_penalty": ("refused", "⚠ refused by EASD"),
    }
    return statuses.get(record.origin, ("unseen", "·")) if isinstance(record.origin, str) else ("unseen", "·")


def _ending(view: BlockView) -> Html:
    last = view.records[-1]
    reason = END_REASONS.get(view.end, view.end) if isinstance(view.end, str) else str(view.end)
    detail: list = []
    if last.origin == "easd_penalty":
        signals = f" H_draft = {number(last.h_draft, '.2f')}, H_target = {number(last.h_target, '.2f')}, overlap = {number(last.overlap, '.2f')}; "
        detail = [signals, "instead of ", _code(last.draft_token_text or ""), " the target chose ", _code(last.token_text), "."]
    elif last.origin == "target_resample":
        detail = [" The target resampled ", _code(last.token_text), " from max(0, p − q)."]
    why = tag("p", tag("b", "Why it ended:"), f" {reason}.", *detail)
    return join([why, tag("p", "Emitted: ", *(_code(r.token_text) for r in view.records))])
