"""Step-through for teaching: a finished run walked block by block.

Each block shows what the draft proposed, which drafts the target kept, where and why the
block ended, and the token emitted there. JSON traces keep every drafted token; a CSV trace
only holds drafts up to the first refusal, and the later ones are shown as unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..method.methods import origins
from ..method.trace import TokenRecord, Trace
from .html import Html, join, number, tag
from .lanes import visible_text

ALONE = "the method's step ended here"  # why a block ended where its last token's origin says no more
STATUSES = {"accepted": ("kept", "✓ kept"), "rejected": ("rejected", "✗ rejected"), "refused": ("refused", "⚠ refused")}


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
    origin = _origin(record.origin)
    status, mark = STATUSES.get(origin.role, ("unseen", "·")) if origin is not None else ("unseen", "·")
    return (status, f"{mark}: {origin.label}") if origin is not None and origin.role == "refused" else (status, mark)


def _origin(name):
    return origins().get(name) if isinstance(name, str) else None


def _ending(view: BlockView) -> Html:
    last, end = view.records[-1], _origin(view.end)
    reason = (end.ended or ALONE) if end is not None else str(view.end)
    role = getattr(_origin(last.origin), "role", None)
    detail: list = []
    if role == "refused":
        signals = f" H_draft = {number(last.h_draft, '.2f')}, H_target = {number(last.h_target, '.2f')}, overlap = {number(last.overlap, '.2f')}; "
        detail = [signals, "instead of ", _code(last.draft_token_text or ""), " the target chose ", _code(last.token_text), "."]
    elif role == "rejected":
        detail = [" The target resampled ", _code(last.token_text), " from max(0, p − q)."]
    why = tag("p", tag("b", "Why it ended:"), f" {reason}.", *detail)
    return join([why, tag("p", "Emitted: ", *(_code(r.token_text) for r in view.records))])
