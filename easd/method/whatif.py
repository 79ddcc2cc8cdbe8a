"""What EASD would have done under other settings, read off a finished trace: no model call.

An SD trace records both entropies and both top-candidate lists at every drafted position, so
the rule can be re-evaluated there for any τ_H, τ_O, rule, and any n up to the number of
candidates the trace kept. The rule itself is `acceptance.rule_fires`, the very function the
decoding loop uses, so the what-if and the real run cannot disagree on what "fires" means.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from .acceptance import fragile_decisions, rule_fires
from .methods import METHODS
from .methods.relaxing import BAR_TOP
from .origins import DRAFT_ACCEPTED
from .settings import DecodeSettings, overlap_needed
from .trace import TokenRecord, Trace

DEFAULTS = DecodeSettings()


@dataclass(frozen=True)
class RuleView:
    """The rule a finished trace is re-read under without regenerating (the what-if): the page's sliders, or the
    run's own settings (`of`). Its names match this module's keyword arguments, so `**view.as_kwargs()` passes it whole."""

    rule: str = DEFAULTS.rule
    tau_h: float = DEFAULTS.tau_h
    tau_o: float = DEFAULTS.tau_o
    top_n: int = DEFAULTS.top_n

    @classmethod
    def of(cls, settings: DecodeSettings) -> RuleView:
        """The rule a run used (a loaded trace's), to re-read it as it ran."""
        return cls(rule=settings.rule, tau_h=settings.tau_h, tau_o=settings.tau_o, top_n=settings.top_n)

    def as_kwargs(self) -> dict:
        return asdict(self)

    def fires(self, h_draft, h_target, overlap):
        """Whether the rule fires for these signals: the loop's own `rule_fires`."""
        return rule_fires(self.rule, h_draft, h_target, overlap, tau_h=self.tau_h, tau_o=self.tau_o, top_n=self.top_n)

    def overlap_meaning(self) -> str:
        return f"= at least **{overlap_needed(self.tau_o, self.top_n)} of {self.top_n}** shared"


def record_overlap(record: TokenRecord, top_n: int) -> int | None:
    """|top-n(q) ∩ top-n(p)| from one row's kept candidates; None if either list is shorter than n."""
    if len(record.draft_top) < top_n or len(record.target_top) < top_n:
        return None
    draft_ids = {token for token, _, _ in record.draft_top[:top_n]}
    return sum(token in draft_ids for token, _, _ in record.target_top[:top_n])


def overlap_counts(trace: Trace, top_n: int) -> np.ndarray:
    """The overlap count per row, NaN where unknown.

    At the run's own n this is the count the loop computed (recorded as `overlap`); at another n
    it comes from the kept candidate lists.
    """
    if top_n == trace.settings.top_n:
        return np.array([np.nan if r.overlap is None else round(r.overlap * top_n) for r in trace.records], dtype=float)
    counts = [record_overlap(record, top_n) for record in trace.records]
    return np.array([np.nan if c is None else c for c in counts], dtype=float)


def would_fire(trace: Trace, rule: str, tau_h: float, tau_o: float, top_n: int) -> np.ndarray:
    """Whether the rule fires at each row (False where nothing was drafted or n exceeds what was kept)."""
    h_draft, h_target = signal_column(trace, "h_draft"), signal_column(trace, "h_target")
    fires = rule_fires(rule, h_draft, h_target, overlap_counts(trace, top_n), tau_h=tau_h, tau_o=tau_o, top_n=top_n)
    return np.asarray(fires) & drafted_positions(trace)  # never at bonus tokens, as in the loop


def would_be_fragile(trace: Trace, rule: str, tau_h: float, tau_o: float) -> np.ndarray:
    """Whether a rounding step could flip the rule's decision at each row, under these settings (the trace's n).

    Read from the tolerances the run recorded (docs/method.md, "Fragile decisions"); None where a row
    has none (no draft, or a file written before they existed).
    """
    top_n = trace.settings.top_n
    known = np.array([r.h_draft_tol is not None and r.draft_token_id is not None for r in trace.records], dtype=bool)
    fragile = fragile_decisions(
        signal_column(trace, "h_draft"),
        signal_column(trace, "h_target"),
        overlap_counts(trace, top_n),
        signal_column(trace, "h_draft_tol"),
        signal_column(trace, "h_target_tol"),
        _counts(trace, "overlap_low", top_n),
        _counts(trace, "overlap_high", top_n),
        rule=rule,
        tau_h=tau_h,
        tau_o=tau_o,
        top_n=top_n,
    )
    return np.where(known, np.asarray(fragile), None)


def entropy_margins(trace: Trace, tau_h: float) -> tuple[np.ndarray, np.ndarray]:
    """h − τ_H per row for draft and target, in float32 as the loop computes them (NaN where missing)."""
    return signal_column(trace, "h_draft") - tau_h, signal_column(trace, "h_target") - tau_h


def _counts(trace: Trace, name: str, top_n: int) -> np.ndarray:
    return np.array([np.nan if getattr(r, name) is None else round(getattr(r, name) * top_n) for r in trace.records], dtype=float)


def would_penalize(trace: Trace, rule: str, tau_h: float, tau_o: float, top_n: int) -> np.ndarray:
    """Rows of an SD trace that EASD with these settings would refuse: kept drafts where the rule fires.

    Exact for the first one; after it the EASD text diverges, so later marks say "here too,
    had the text stayed the same".
    """
    kept = np.array([r.origin == DRAFT_ACCEPTED.name for r in trace.records], dtype=bool)
    return kept & would_fire(trace, rule, tau_h, tau_o, top_n)


def would_keep(trace: Trace, settings: DecodeSettings) -> np.ndarray | None:
    """Rows of a greedy speculative trace whose drafts a relaxed rule would keep: the method `settings.method` (typical
    acceptance or a relaxed rule) at its own settings in `settings`, its bar read from each row's target candidates and
    entropy (`Relaxing.bar`, the loop's own), against p(c). Exact for the first row where it differs from what the run
    did; after it the text would diverge. None where the trace cannot say: a sampled run (its rules read p at its
    temperature, which the trace does not record), or a method that keeps no draft by a rule of its own."""
    method = METHODS.get(settings.method)
    if trace.settings.temperature != 0 or not hasattr(method, "bar"):
        return None
    rows = [r for r in trace.records if r.draft_token_id is not None and r.p_target is not None and r.h_target is not None]
    keep = np.zeros(len(trace.records), dtype=bool)
    if not rows:
        return keep
    top = torch.zeros(len(rows), BAR_TOP, dtype=torch.float64)  # missing candidates: probability 0, below any bar
    for i, record in enumerate(rows):
        probs = [p for _, _, p in record.target_top[:BAR_TOP]]
        top[i, : len(probs)] = torch.tensor(probs, dtype=torch.float64)
    entropy = torch.tensor([r.h_target for r in rows], dtype=torch.float64)
    bar = method.bar(top, entropy, settings)
    kept = method.keeps(torch.tensor([r.p_target for r in rows], dtype=torch.float64), bar)
    index = {id(record): i for i, record in enumerate(trace.records)}
    for record, flag in zip(rows, kept.tolist()):
        keep[index[id(record)]] = flag
    return keep


def first_penalty_block(trace: Trace, rule: str, tau_h: float, tau_o: float) -> int | None:
    """In an SD trace, the block where EASD with these settings (and the trace's n) would first
    refuse a draft SD kept; None if it never would."""
    marks = would_penalize(trace, rule, tau_h, tau_o, trace.settings.top_n)
    return trace.records[int(np.argmax(marks))].block if marks.any() else None


def drafted_positions(trace: Trace) -> np.ndarray:
    return np.array([r.draft_token_id is not None for r in trace.records], dtype=bool)


def fire_share_grid(trace: Trace, rule: str, tau_hs, tau_os, top_n: int) -> np.ndarray:
    """Share of drafted positions where the rule fires, for every (τ_H, τ_O).  -> [len(tau_hs), len(tau_os)]

    The paper's sensitivity figure, computed from one finished trace.
    """
    drafted = drafted_positions(trace)
    grid = np.full((len(tau_hs), len(tau_os)), np.nan)
    if not drafted.any():
        return grid
    h_draft, h_target, overlap = signal_column(trace, "h_draft"), signal_column(trace, "h_target"), overlap_counts(trace, top_n)
    for i, tau_h in enumerate(tau_hs):
        for j, tau_o in enumerate(tau_os):
            fires = rule_fires(rule, h_draft, h_target, overlap, tau_h=tau_h, tau_o=tau_o, top_n=top_n)
            grid[i, j] = fires[drafted].mean()
    return grid


def signal_column(trace: Trace, name: str) -> np.ndarray:
    """An entropy (or tolerance) column in float32, the precision the loop compared it in against τ_H."""
    return np.array([np.nan if getattr(r, name) is None else getattr(r, name) for r in trace.records], dtype=np.float32)
