"""The trace: one typed record per emitted token, and the run's settings, counts and drafts.

What a generation writes as it decodes; its files (CSV and JSON in and out, every field checked) are easd.traces'.
The fields are those of the README's "The trace" section. Values that do not exist for a row (draft fields of a bonus
token, every draft field of a target-only run) are None.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .acceptance import Margins
from .settings import DecodeSettings

# stopped: its user asked (Stop, Clear); left: its client went away (the tab closed, the call's connection ended);
# unread: its client took nothing of what it was sent for a while; quota: the user's ZeroGPU time ran out
STOP_REASONS = ("eos", "max_new_tokens", "context", "stopped", "left", "unread", "quota", "error", "max_steps")
MARGIN_COLUMNS = [f.name for f in fields(Margins)]  # a record's margin fields are the fields of acceptance.Margins
SIGNAL_FIELDS = ("h_draft", "h_target", "overlap", "triggered")  # EASD's rule at a drafted position (methods that show it)

Candidate = tuple[int, str, float]  # (token id, token text, probability at temperature 1); a method's own list may
# hold (its own number, a text, a score) instead: SpecGuard's candidate steps, SMC-SD's particles (Column.ids)


@dataclass(frozen=True)
class Column:
    """A trace column of a method's own record (`recorded`): its kind and range, which the trace's schema checks, and
    its label and help, which the inspector, Find tokens and the docs show."""

    help: str
    kind: str  # int | float | bool | text | candidates (a list of (id, text, probability), one column triple each)
    low: float | None = None
    high: float | None = None
    label: str = ""  # the inspector's name for it; the field's name where empty
    beside: str = "target token"  # a candidate list: the inspector's header of the model's list shown beside it
    values: str = "p̃"  # a candidate list: the inspector's header of its third entries (a probability, a weight)
    ids: bool = True  # a candidate list's first entries are token ids (MTI's), not numbers of the method's own
    marks: str = ""  # a list of the method's own: the record's field holding the number of the entry the token came from


def recorded(help: str, kind: str, **declared):  # noqa: A002 (a column's help is its help)
    """A field of a method's own record dataclass (`Method.record`), declared as a trace column. Its default is None
    (a list for candidates): a row where the method has nothing to say leaves it empty."""
    default = {"default_factory": list} if kind == "candidates" else {"default": None}
    return dataclasses.field(**default, metadata={"column": Column(help, kind, **declared)})


def columns_of(record_class) -> dict[str, Column]:
    """The columns a method's own record declares, by field name (its trace column's name), in order."""
    return {f.name: f.metadata["column"] for f in dataclasses.fields(record_class)} if record_class else {}


@dataclass
class TokenRecord:
    position: int  # 0-based among generated tokens
    block: int  # the SD round (or single-model step) the token came from
    token_id: int
    token_text: str
    origin: str  # one of its method's origins (easd.method.origins)
    draft_token_id: int | None = None  # c_i, the drafted token examined at this position
    draft_token_text: str | None = None
    p_draft: float | None = None  # q(c_i) at temperature 1
    p_target: float | None = None  # p(c_i) at temperature 1
    accept_prob: float | None = None  # min(1, p̃(c_i)/q̃(c_i)) used by the standard test
    h_draft: float | None = None  # H(q) in nats
    h_target: float | None = None  # H(p) in nats
    overlap: float | None = None  # |top-n(q) ∩ top-n(p)| / n
    triggered: bool | None = None  # the EASD rule fired here (recorded in SD runs too)
    draft_top: list[Candidate] = field(default_factory=list)
    target_top: list[Candidate] = field(default_factory=list)
    # How far that decision was from flipping (docs/method.md, "Fragile decisions"); None where a file lacks them;
    # last, so that positional construction of the fields above still works
    h_draft_margin: float | None = None  # h_draft − τ_H
    h_target_margin: float | None = None  # h_target − τ_H
    draft_gap: float | None = None  # the draft's n-th minus (n+1)-th logit
    target_gap: float | None = None  # the target's n-th minus (n+1)-th logit
    overlap_swap: bool | None = None  # swapping either model's n-th and (n+1)-th candidates changes the overlap
    h_draft_tol: float | None = None  # how far h_draft can move when the logits move by one rounding step
    h_target_tol: float | None = None
    overlap_low: float | None = None  # the lowest overlap (/ n) swaps within rounding can reach
    overlap_high: float | None = None  # the highest
    fragile: bool | None = None  # a perturbation at the models' precision could flip the decision
    own: Any = None  # what its method records of its own (its `record` dataclass: MTI's guided candidates, RSD's step)

    def value(self, name: str):
        """A field of the record, or of its method's own record, by its column's name; None where it has none."""
        if name in _FIELDS:
            return getattr(self, name)
        return getattr(self.own, name, None)


_FIELDS = {f.name for f in fields(TokenRecord)} - {"own"}


@dataclass
class BlockInfo:
    """One SD/EASD block as drafted: the rows show drafts up to the first refusal, this shows all k."""

    index: int
    drafted: list[tuple[int, str]]  # (id, text) of c_1..c_k
    end: str  # the origin of the token that ended the block (a rejection's, a refusal's or the bonus token's)


@dataclass
class RunStats:
    prompt_tokens: int | None = None
    seconds: float | None = None  # wall time of the whole run, prefill included
    target_calls: int | None = None  # target forward passes
    draft_calls: int | None = None  # draft forward passes
    # wall time of the passes it took part in (with other rows of its batch): what SD's speed is made of (easd.method.speed)
    target_seconds: float | None = None
    draft_seconds: float | None = None
    # rows those passes served, summed (÷ calls: the batch it ran in), so that their time is read against a target
    # pass over as many rows (easd.method.speed.PassCost); None in traces from before they were counted
    target_rows: int | None = None
    draft_rows: int | None = None
    # passes outside the batch that score what was written (SpecGuard's attention pass, RSD's reward model): their
    # count and wall time (also inside `seconds`); None in traces from before they were counted
    scoring_calls: int | None = None
    scoring_seconds: float | None = None
    stop_reason: str | None = None  # one of easd.method.trace.STOP_REASONS ("stopped" while it goes on)


@dataclass
class Trace:
    settings: DecodeSettings
    draft_model: str = ""
    target_model: str = ""
    records: list[TokenRecord] = field(default_factory=list)
    prompt: str = ""
    system: str = ""  # the system prompt the prompt was asked under ("" for none)
    stats: RunStats = field(default_factory=RunStats)
    info: dict = field(default_factory=dict)  # versions and model revisions
    blocks: list[BlockInfo] = field(default_factory=list)  # JSON only: CSV rows cannot hold it

    @property
    def token_ids(self) -> list[int]:
        return [r.token_id for r in self.records]

    @property
    def text(self) -> str:
        return "".join(r.token_text for r in self.records)

    def snapshot(self) -> Trace:
        """A copy that later tokens do not change: records and blocks are shared, their lists are not.

        The shared worker (easd.serving.worker) takes one for a user after each block, in its own
        thread, so the user's thread never reads a trace while the worker appends to it.
        """
        return replace(self, records=list(self.records), blocks=list(self.blocks), stats=replace(self.stats))


def software_versions() -> dict:
    """Versions that shape a trace's numbers, for its JSON header."""
    import torch
    import transformers

    from .._version import __version__

    return {"easd": __version__, "torch": torch.__version__, "transformers": transformers.__version__}
