"""The settings of one generation run: every setting with its default and allowed range, declared once (`knob`).

Every default is taken from the paper (docs/method.md, "The method") or from what runs well on a 2-core CPU.
`validate()` checks them all and names the first bad one (`SettingsError.setting`), which the CLI shows as its flag
and the app as its slider's label. The settings every method reads are fields here; a method's own (MTI's τ and ω,
RSD's δ) are a dataclass in its module (easd.method.methods), held here in `own` and named `<method>_<field>`
everywhere outside it. Whether `method` names a method is the methods' table's to say (easd.method.methods.lookup).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import SettingsError
from . import knobs
from .knobs import Control, knob
from .references import PROPOSED

SIGNALS = ("float32", "model")
ENTROPIES = ("temperature-1", "sampling")
RULES = ("full", "no_overlap", "no_draft_entropy", "target_entropy_only")
MAX_K = 64  # more drafted tokens than this only wastes draft passes: acceptance decays geometrically
MAX_TOP_N = 100  # top-n lists are stored per token in the trace; 100 columns is already a lot
# Below these, logits / T overflows float32 (T = 1e-38 gave inf - inf = NaN) and a nucleus of
# top_p = 5e-324 rounds to 0 in float32 and keeps no token: both would make NaN probabilities.
MIN_TEMPERATURE = 1e-3  # a temperature > 0 is at least this; 0 means greedy
MIN_TOP_P = 1e-3
WHATIF_TOP = 20  # candidates the page keeps per token, so its what-if covers every n its slider offers
MAX_SEED = 2**63 - 1  # torch seeds are 64-bit signed
PAGE_TOKENS = 128  # the page's default, and its slider's end unless the operator sets the cap (app.py --max-new-tokens-cap)


@dataclass(frozen=True)
class DecodeSettings:
    method: str = knob(PROPOSED, "the decoding method: a name in the methods' table (python -m easd methods)")
    tau_h: float = knob(
        1.0,
        "entropy threshold τ_H in nats: EASD refuses a drafted token only where both models' entropies reach it",
        low=0,
        unit="nats",
        label="τ_H",
        short="entropy threshold (nats)",
        control=Control("slider", 0, 4, 0.05),
        sweep=(1.0, 1.5, 2.0),
    )  # the paper's grid is {1, 1.5, 2}; `calibrate` gives the embedded pair's target 1.5 on GSM8K (docs/evaluation.md)
    tau_o: float = knob(
        0.8,
        "overlap threshold τ_O from 0 to 1: the share of the two models' top-n candidates that must be shared",
        low=0,
        high=1,
        expects="a number in [0, 1]",
        label="τ_O",
        short="overlap threshold",
        control=Control("slider", 0, 1, 0.05),
        sweep=(0.2, 0.4, 0.6, 0.8, 1.0),  # the paper's grid
    )  # 0.8 with n = 5 means at least 4 of 5 shared
    top_n: int = knob(
        5,
        "n: how many top candidates of each model the overlap compares",
        low=1,
        high=MAX_TOP_N,
        label="n",
        short="top-n candidates compared",
        control=Control("slider", 1, WHATIF_TOP, 1),
    )
    # The paper gives no k; 4 suits a draft a third of the target's size (Leviathan et al.'s acceptance argument).
    # Greedy EASD's text depends on k, since a block's bonus token is never judged (docs/benchmarks.md: k = 2, 4, 8).
    k: int = knob(
        4,
        "k: tokens the draft proposes per block",
        low=1,
        high=MAX_K,
        label="k",
        short="draft tokens per block",
        control=Control("slider", 1, 12, 1),
    )
    temperature: float = knob(
        0.0,
        "sampling temperature: 0 is greedy (SD then equals the target exactly), above 0 samples",
        low=MIN_TEMPERATURE,
        zero=True,
        expects=f"0 (greedy) or a number ≥ {MIN_TEMPERATURE:g}",
        label="temperature",
        short="0 = greedy",
        control=Control("slider", 0, 1.5, 0.05),
        per_request=True,
    )
    top_p: float = knob(
        1.0,
        "nucleus sampling mass: 1 keeps the whole distribution",
        low=MIN_TOP_P,
        high=1,
        label="top-p",
        short="nucleus mass",
        control=Control("slider", 0.05, 1, 0.05),
        per_request=True,
    )
    max_new_tokens: int = knob(
        PAGE_TOKENS,
        "the most tokens to generate (long enough for a short answer, short enough for a CPU demo)",
        low=1,
        label="max new tokens",
        short="per run",
        control=Control("slider", 1, PAGE_TOKENS, 1),  # its end: the app's cap (components.controls)
        per_request=True,
    )
    rule: str = knob(
        "full",
        "EASD's trigger rule: full, or one of the paper's ablations (SD runs record it too)",
        choices=RULES,
        label="EASD rule",
        short="full, or the paper's ablations",
        control=Control("choice"),
    )
    seed: int = knob(
        0,
        "random seed: SD and EASD with the same seed agree until EASD's first penalty",
        low=0,
        high=MAX_SEED,
        label="seed",
        short="same for both runs",
        control=Control("number", 0, MAX_SEED, 1),
    )
    record_top: int = knob(0, "top candidates kept per token in the trace; 0 means max(n, 5)", low=0, high=MAX_TOP_N)
    # The lm_head in float32 even for bfloat16 weights, so that rounding of the logits does not decide the rule
    # (docs/method.md, "Fragile decisions"); "model" uses the model's own logits, in its dtype.
    signals: str = knob("float32", "the logits the rule reads: float32, or the model's own dtype", choices=SIGNALS)
    # The paper measures H on the models' own distributions, softmax(z) (temperature 1). A sampled run draws tokens
    # from softmax(z / T) within top-p, whose entropy is lower at T < 1: "sampling" lets the rule (and the trace's
    # h_draft and h_target, which calibrate and the what-if read) measure that one instead (docs/method.md).
    entropy: str = knob(
        "temperature-1",
        "the distribution whose entropy H the rule reads: temperature-1 (the paper's), or sampling (softmax(z/T) within "
        "top-p, as tokens are drawn; needs a temperature above 0)",
        choices=ENTROPIES,
    )
    # Each method's own settings (easd.method.methods) where they differ from its defaults, as (method name, its
    # settings dataclass) pairs in name order: two settings that decode alike are equal, and hash alike.
    own: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        kept = tuple(sorted((name, value) for name, value in self.own if value != type(value)()))
        object.__setattr__(self, "own", kept)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def trace_top(self) -> int:
        """How many top candidates each trace row keeps (README, "The trace": at least max(n, 5))."""
        return max(self.record_top, self.top_n, 5)

    def with_own(self, method: str, settings: Any) -> DecodeSettings:
        """These settings with method `method`'s own settings replaced by `settings` (its dataclass)."""
        kept = tuple((name, value) for name, value in self.own if name != method)
        return replace(self, own=(*kept, (method, settings)))

    def own_settings(self, method: str, defaults: Any) -> Any:
        """Method `method`'s own settings: those held here, else `defaults` (its dataclass as declared)."""
        return dict(self.own).get(method, defaults)

    def validate(self) -> DecodeSettings:
        """Raise SettingsError naming the first setting out of range (a method's own by its flat name); else self."""
        knobs.check(self)
        if self.entropy == "sampling" and self.greedy:
            raise SettingsError("entropy", "sampling needs a temperature above 0: at 0 the sampling distribution is one token")
        for method, settings in self.own:
            knobs.check(settings, prefix=f"{method}_")
        return self

    def as_dict(self) -> dict:
        """The settings every method reads, by name (a method's own: easd.method.methods.settings_values)."""
        return {name: value for name, value in asdict(self).items() if name != "own"}


def overlap_needed(tau_o: float, top_n: int) -> int:
    """The integer count of shared top-n tokens that τ_O asks for: ceil(τ_O·n), robust to 0.8·5=4.000…01."""
    return math.ceil(tau_o * top_n - 1e-9)
