"""The settings of one generation run, with their defaults and allowed ranges.

Every field has a default taken from the paper (docs/method.md, "The method") or from what runs well on a
2-core CPU. `validate()` checks them all and names the first bad one
(`SettingsError.setting`), which the CLI shows as its flag and the app as its slider's label.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from ..errors import SettingsError
from .methods import METHODS  # what each method is

SIGNALS = ("float32", "model")
RULES = ("full", "no_overlap", "no_draft_entropy", "target_entropy_only")
MAX_K = 64  # more drafted tokens than this only wastes draft passes: acceptance decays geometrically
MAX_TOP_N = 100  # top-n lists are stored per token in the trace; 100 columns is already a lot
# Below these, logits / T overflows float32 (T = 1e-38 gave inf - inf = NaN) and a nucleus of
# top_p = 5e-324 rounds to 0 in float32 and keeps no token: both would make NaN probabilities.
MIN_TEMPERATURE = 1e-3  # a temperature > 0 is at least this; 0 means greedy
MIN_TOP_P = 1e-3
MAX_RSD_DELIMITER_CHARS = 16  # a step delimiter is a few characters ("\n\n")
MAX_MTI_NEGATIVE_CHARS = 1_000  # the negative prompt is a short instruction; its tokens take cache room at every guided position


@dataclass(frozen=True)
class DecodeSettings:
    method: str = "easd"  # target | draft | sd | easd | mti | rsd
    rule: str = "full"  # which EASD trigger rule (docs/method.md, "The method"); SD runs still record it
    # Draft tokens per block. The paper gives no k; 4 suits a draft a third of the target's size (Leviathan et al.'s
    # acceptance argument). Greedy EASD's text depends on k, since a block's bonus token is never judged
    # (docs/benchmarks.md measures k = 2, 4, 8).
    k: int = 4
    # Entropy threshold in nats, applied to draft and target alike. 1.0 is the middle of the paper's grid, not a
    # calibration: `calibrate` gives the embedded pair's target 1.5 on GSM8K (docs/evaluation.md, "calibrate").
    tau_h: float = 1.0
    tau_o: float = 0.8  # top-n overlap threshold: 0.8 with n=5 means at least 4 of 5 shared
    top_n: int = 5  # size of the top-n candidate sets compared by the overlap test
    temperature: float = 0.0  # 0 means greedy, which makes SD exactly equal to the target
    top_p: float = 1.0  # nucleus sampling mass; 1 keeps the whole distribution
    max_new_tokens: int = 128  # long enough for a short answer, short enough for a CPU demo
    seed: int = 0  # one seed per run: SD and EASD with the same seed agree until the first penalty
    record_top: int = 0  # top candidates kept per token in the trace; 0 means max(top_n, 5)
    # The lm_head in float32 even for bfloat16 weights, so that rounding of the logits does not
    # decide the rule (docs/method.md, "Fragile decisions"); "model" uses the model's own logits, in its dtype.
    signals: str = "float32"
    # MTI (docs/method.md, "The paper's baselines"): where the target's entropy exceeds mti_tau, the next token comes from
    # log p_u + ω (log p_c − log p_u), p_u being the target's distribution after the negative prompt; ω = 1 is plain
    # target-only. MTI's reference code sets neither default; the EASD paper searches an "intervention scale β" in
    # {0.5, 1.0, 1.5, 2.0}, which may be τ or ω − 1: `sweep --grid mti` sweeps both (docs/method.md).
    mti_tau: float = 1.0
    mti_omega: float = 1.5
    mti_negative: str = "OUTPUT ERROR"
    # RSD (docs/method.md, "The paper's baselines"): the draft writes a step (text up to rsd_delimiter), a process reward
    # model scores it, and a step scored below rsd_delta is written again by the target. δ above 1 keeps no step.
    rsd_delta: float = 0.7
    rsd_delimiter: str = "\n\n"

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def trace_top(self) -> int:
        """How many top candidates each trace row keeps (README, "The trace": at least max(n, 5))."""
        return max(self.record_top, self.top_n, 5)

    def validate(self) -> DecodeSettings:
        """Raise SettingsError naming the first setting out of range; else return self."""
        for check in _CHECKS:
            check(self)
        return self

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> DecodeSettings:
        """Build settings from a dict that may hold extra keys (a trace header, a CSV row)."""
        known = {f.name: f.type for f in fields(cls)}
        return cls(**{name: _coerce(cls, name, values[name]) for name in known if name in values})


def overlap_needed(tau_o: float, top_n: int) -> int:
    """The integer count of shared top-n tokens that τ_O asks for: ceil(τ_O·n), robust to 0.8·5=4.000…01."""
    return math.ceil(tau_o * top_n - 1e-9)


def _coerce(cls: type, name: str, value):
    default = getattr(cls, name)
    if isinstance(default, bool) or value is None:
        return value
    if isinstance(default, int):
        return int(float(value))
    if isinstance(default, float):
        return float(value)
    return str(value)


def _require(condition: bool, name: str, allowed: str, value) -> None:
    if not condition:
        raise SettingsError(name, f"must be {allowed} (got {value!r})")


def _check_choices(s: DecodeSettings) -> None:
    _require(s.method in METHODS, "method", "one of " + ", ".join(METHODS), s.method)
    _require(s.rule in RULES, "rule", "one of " + ", ".join(RULES), s.rule)
    _require(s.signals in SIGNALS, "signals", "one of " + ", ".join(SIGNALS), s.signals)


def _check_counts(s: DecodeSettings) -> None:
    _require(_is_int(s.k) and 1 <= s.k <= MAX_K, "k", f"an integer from 1 to {MAX_K}", s.k)
    _require(_is_int(s.top_n) and 1 <= s.top_n <= MAX_TOP_N, "top_n", f"an integer from 1 to {MAX_TOP_N}", s.top_n)
    _require(_is_int(s.max_new_tokens) and s.max_new_tokens >= 1, "max_new_tokens", "an integer ≥ 1", s.max_new_tokens)
    _require(_is_int(s.seed) and s.seed >= 0, "seed", "an integer ≥ 0", s.seed)
    _require(_is_int(s.record_top) and 0 <= s.record_top <= MAX_TOP_N, "record_top", f"from 0 to {MAX_TOP_N}", s.record_top)


def _check_thresholds(s: DecodeSettings) -> None:
    _require(_is_real(s.tau_h) and s.tau_h >= 0, "tau_h", "a number of nats ≥ 0", s.tau_h)
    _require(_is_real(s.tau_o) and 0 <= s.tau_o <= 1, "tau_o", "a number in [0, 1]", s.tau_o)
    _require(
        _is_real(s.temperature) and (s.temperature == 0 or s.temperature >= MIN_TEMPERATURE),
        "temperature",
        f"0 (greedy) or a number ≥ {MIN_TEMPERATURE:g}",
        s.temperature,
    )
    _require(_is_real(s.top_p) and MIN_TOP_P <= s.top_p <= 1, "top_p", f"a number from {MIN_TOP_P:g} to 1", s.top_p)
    _require(_is_real(s.mti_tau) and s.mti_tau >= 0, "mti_tau", "a number of nats ≥ 0", s.mti_tau)
    # ω < 1 would pull towards the negative prompt; past 10 the guidance swamps the model's own distribution
    _require(_is_real(s.mti_omega) and 1 <= s.mti_omega <= 10, "mti_omega", "a number from 1 to 10", s.mti_omega)
    _require(_is_real(s.rsd_delta) and s.rsd_delta >= 0, "rsd_delta", "a reward ≥ 0 (above 1 keeps no draft step)", s.rsd_delta)
    _require(
        isinstance(s.rsd_delimiter, str) and 0 < len(s.rsd_delimiter) <= MAX_RSD_DELIMITER_CHARS,
        "rsd_delimiter",
        f"a text of 1 to {MAX_RSD_DELIMITER_CHARS} characters",
        s.rsd_delimiter if not isinstance(s.rsd_delimiter, str) else s.rsd_delimiter[:20],
    )
    _require(
        isinstance(s.mti_negative, str) and s.mti_negative.strip() != "" and len(s.mti_negative) <= MAX_MTI_NEGATIVE_CHARS,
        "mti_negative",
        f"a text of 1 to {MAX_MTI_NEGATIVE_CHARS:,} characters",
        s.mti_negative if not isinstance(s.mti_negative, str) else s.mti_negative[:40],
    )


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_CHECKS = (_check_choices, _check_counts, _check_thresholds)
