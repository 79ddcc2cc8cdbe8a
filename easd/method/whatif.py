"""What EASD, or a relaxed acceptance rule, would have done under other settings, read off a finished trace: no model
call.

An SD trace records both entropies and both top-candidate lists at every drafted position, so
the rule can be re-evaluated there for any τ_H, τ_O, rule, and any n up to the number of
candidates the trace kept. The rule itself is `acceptance.rule_fires`, the very function the
decoding loop uses, so the what-if and the real run cannot disagree on what "fires" means.

A greedy trace also records p(c), the target's probability of each drafted token, and the target's top candidates and
entropy: enough for a relaxed rule (typical acceptance, the relaxed family) to say, by its own `bar`, which drafts it
would have kept that SD's strict test refused (`would_keep`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from .acceptance import fragile_decisions, rule_fires
from .methods import METHODS, settings_values, with_values
from .methods.relaxing import BAR_TOP, Relaxing
from .origins import DRAFT_ACCEPTED
from .references import PROPOSED
from .settings import DecodeSettings, overlap_needed
from .trace import TokenRecord, Trace

DEFAULTS = DecodeSettings()
DEFAULT_VALUES = settings_values(DEFAULTS)  # by flat name, each method's own included


# EASD's rule's settings, then the relaxed rules' own (typical acceptance's ε and α; the relaxed rule, δ, λ and m):
# everything a finished greedy trace can be re-read under
EASD_FIELDS = ("rule", "tau_h", "tau_o", "top_n")
RELAXED_FIELDS = ("typical_threshold", "typical_alpha", "relaxed_rule", "relaxed_delta", "relaxed_ratio", "relaxed_top")


@dataclass(frozen=True)
class RuleView:
    """How a finished trace is re-read without regenerating (the what-if): as which method (`reads_as`: EASD, whose
    rule would refuse drafts SD kept, or a relaxed rule, which would keep drafts SD refused), at the page's sliders, or
    at the run's own settings (`of`). Its names are the settings', so `as_kwargs` passes EASD's rule whole."""

    rule: str = DEFAULTS.rule
    tau_h: float = DEFAULTS.tau_h
    tau_o: float = DEFAULTS.tau_o
    top_n: int = DEFAULTS.top_n
    typical_threshold: float = DEFAULT_VALUES["typical_threshold"]
    typical_alpha: float = DEFAULT_VALUES["typical_alpha"]
    relaxed_rule: str = DEFAULT_VALUES["relaxed_rule"]
    relaxed_delta: float = DEFAULT_VALUES["relaxed_delta"]
    relaxed_ratio: float = DEFAULT_VALUES["relaxed_ratio"]
    relaxed_top: int = DEFAULT_VALUES["relaxed_top"]
    reads_as: str = PROPOSED  # the method the what-if asks: EASD, or a relaxed rule (the other lane's: easd.method.compare)

    @classmethod
    def of(cls, settings: DecodeSettings, reads_as: str = PROPOSED) -> RuleView:
        """The settings a run used (a loaded trace's), to re-read it as it ran."""
        values = settings_values(settings)
        return cls(**{name: values[name] for name in (*EASD_FIELDS, *RELAXED_FIELDS)}, reads_as=reads_as)

    def as_kwargs(self) -> dict:
        """EASD's rule, as this module's functions take it."""
        return {name: value for name, value in asdict(self).items() if name in EASD_FIELDS}

    @property
    def relaxed(self) -> DecodeSettings | None:
        """The relaxed rule the what-if asks, at its sliders' settings; None where it asks EASD's."""
        if not isinstance(METHODS.get(self.reads_as), Relaxing):
            return None
        return with_values(DecodeSettings(method=self.reads_as), **{name: getattr(self, name) for name in RELAXED_FIELDS})

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
    return kept_drafts(trace) & would_fire(trace, rule, tau_h, tau_o, top_n)


def kept_drafts(trace: Trace) -> np.ndarray:
    """Rows whose drafted token the run kept.  -> [rows] bool"""
    return np.array([r.origin == DRAFT_ACCEPTED.name for r in trace.records], dtype=bool)


def would_keep(trace: Trace, settings: DecodeSettings) -> np.ndarray | None:
    """Rows of a greedy speculative trace whose drafts a relaxed rule would keep: the method `settings.method` (typical
    acceptance or a relaxed rule) at its own settings in `settings`, its bar read from each row's target candidates and
    entropy (`Relaxing.bar`, the loop's own), against p(c). Exact for the first row where it differs from what the run
    did; after it the text would diverge. None where the trace cannot say: a sampled run (its rules read p at its
    temperature, which the trace does not record), or a method that keeps no draft by a rule of its own."""
    if trace.settings.temperature != 0 or not isinstance(METHODS.get(settings.method), Relaxing):
        return None
    rows = [r for r in trace.records if readable(r)]
    keep = np.zeros(len(trace.records), dtype=bool)
    if not rows:
        return keep
    p_c, bar = bar_reading(rows, settings)
    index = {id(record): i for i, record in enumerate(trace.records)}
    for record, flag in zip(rows, METHODS[settings.method].keeps(p_c, bar).tolist()):
        keep[index[id(record)]] = flag
    return keep


def readable(record: TokenRecord) -> bool:
    """Whether a relaxed rule can be re-read at a row: a draft was examined there, with p(c) and the target's entropy."""
    return record.draft_token_id is not None and record.p_target is not None and record.h_target is not None


def bar_reading(rows: list[TokenRecord], settings: DecodeSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """(p(c), the rule's bar) at each of `rows` (each `readable`), for the relaxed rule `settings.method` at its settings:
    the bar from the row's kept target candidates and entropy, the loop's own `bar`.  -> [rows], [rows]"""
    top = torch.zeros(len(rows), BAR_TOP, dtype=torch.float64)  # missing candidates: probability 0, below any bar
    for i, record in enumerate(rows):
        probs = [p for _, _, p in record.target_top[:BAR_TOP]]
        top[i, : len(probs)] = torch.tensor(probs, dtype=torch.float64)
    entropy = torch.tensor([r.h_target for r in rows], dtype=torch.float64)
    p_c = torch.tensor([r.p_target for r in rows], dtype=torch.float64)
    return p_c, METHODS[settings.method].bar(top, entropy, settings)


@dataclass(frozen=True)
class Marks:
    """Where the what-if marks a finished SD run's tokens, and what a mark means (`kind`)."""

    rows: np.ndarray  # [rows] bool
    kind: str  # "refused": EASD would refuse the draft SD kept; "kept": the relaxed rule would keep the draft SD refused


def whatif_marks(trace: Trace, view: RuleView) -> Marks | None:
    """What the method the view reads as would have done otherwise on SD's finished run: EASD's refusals of drafts SD
    kept, or a relaxed rule's keeping of drafts SD refused (None where a sampled run cannot say)."""
    relaxed = view.relaxed
    if relaxed is None:
        return Marks(would_penalize(trace, **view.as_kwargs()), "refused")
    keep = would_keep(trace, relaxed)
    if keep is None:
        return None
    return Marks(keep & drafted_positions(trace) & ~kept_drafts(trace), "kept")


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
