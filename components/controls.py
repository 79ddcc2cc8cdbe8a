"""The settings panel, and the one boundary where its values (or an API call's) become settings.

`FIELDS` says once, per setting, what the page calls it and the range its slider offers; the
sliders are built from it and every value that arrives (from the page or the `/compare` API) is
checked against the same ranges by type, so a crafted request gets no more than the page allows.
What passes becomes one validated object: `DecodeSettings` for a run, `RuleView` for re-reading
a finished trace. Defaults come from `DecodeSettings`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import gradio as gr

from easd.errors import SettingsError, shown
from easd.method.acceptance import rule_fires
from easd.method.settings import RULES, DecodeSettings, overlap_needed

from .lanes import TITLES

DEFAULTS = DecodeSettings()
WHATIF_TOP = 20  # candidates kept per token, so the what-if covers every n the slider offers
MAX_SEED = 2**63 - 1  # torch seeds are 64-bit signed


@dataclass(frozen=True)
class Slider:
    """One numeric setting as the page shows it: its label, what it means, and its slider's range."""

    label: str  # how the page names it, also in error messages
    meaning: str
    low: float
    high: float
    step: float
    integer: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        return f"{kind} from {self.low:g} to {self.high:g}" if self.high < MAX_SEED else f"{kind} from {self.low:g} to 2^63 − 1"


FIELDS: dict[str, Slider] = {
    "tau_h": Slider("τ_H", "entropy threshold (nats)", 0, 4, 0.05),
    "tau_o": Slider("τ_O", "overlap threshold", 0, 1, 0.05),
    "top_n": Slider("n", "top-n candidates compared", 1, WHATIF_TOP, 1, integer=True),
    "k": Slider("k", "draft tokens per block", 1, 12, 1, integer=True),
    "temperature": Slider("temperature", "0 = greedy", 0, 1.5, 0.05),
    "top_p": Slider("top-p", "nucleus mass", 0.05, 1, 0.05),
    "max_new_tokens": Slider("max new tokens", "per run", 1, DEFAULTS.max_new_tokens, 1, integer=True),  # high: the cap
    "seed": Slider("seed", "same for both runs", 0, MAX_SEED, 1, integer=True),
}
OTHER_LABELS = {
    "rule": "EASD rule",
    "prompt": "Prompt",
    "pair": "Model pair",
    "chat": "chat template",
    "left": "left lane",
    "right": "right lane",
    "search": "Find tokens",
    # a link's parameters (components.links), named as the address bar shows them
    **{name: f"the link's {name}=" for name in ("run", "eval", "problem", "sample", "lane", "token")},
}

WHATIF_FIELDS = ("rule", "tau_h", "tau_o", "top_n")  # the settings a finished trace can be re-read under


def fields(max_new_tokens_cap: int) -> dict[str, Slider]:
    """FIELDS with this app's cap on new tokens."""
    cap = replace(FIELDS["max_new_tokens"], high=max_new_tokens_cap, meaning=f"at most {max_new_tokens_cap} per run")
    return FIELDS | {"max_new_tokens": cap}


def page_words(err: SettingsError) -> str:
    """A settings error as the page says it: the slider's label, not a command-line flag."""
    label = FIELDS[err.setting].label if err.setting in FIELDS else OTHER_LABELS.get(err.setting, err.setting)
    return f"{label}: {err.message}"


def api_words(err: SettingsError) -> str:
    """A settings error as the API says it: the parameter's name."""
    return f"{err.setting}: {err.message}"


# --- checking values at the boundary --------------------------------------------------------------


def check_number(name: str, value, field: Slider) -> int | float:
    """`value` if it is a finite number in the field's range (a whole one where the field counts)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and field.integer:
        ok = isinstance(value, int) or value.is_integer()
        value = int(value) if ok else value
    if not (ok and field.low <= value <= field.high):
        raise SettingsError(name, f"must be {field.describe()} (got {shown(value)})")
    return value


def check_rule(value) -> str:
    if not (isinstance(value, str) and value in RULES):
        raise SettingsError("rule", f"must be one of {', '.join(RULES)} (got {shown(value)})")
    return value


def check_prompt(value) -> str:
    if not isinstance(value, str):
        raise SettingsError("prompt", f"must be text (got {shown(value)})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SettingsError(
            "prompt", "holds characters that are not valid text (lone surrogates); retype or paste it again"
        ) from None
    return value


def check_method(lane: str, value) -> str:
    """A lane's method (`lane` is "left" or "right", as the API's parameters are named)."""
    if not (isinstance(value, str) and value in TITLES):
        raise SettingsError(lane, f"must be one of {', '.join(TITLES)} (got {shown(value)})")
    return value


def check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(name, f"must be true or false (got {shown(value)})")
    return value


@dataclass(frozen=True)
class RuleView:
    """The settings a finished trace is re-read under without regenerating (the what-if), checked.

    Slider names match `easd.method.whatif`'s keyword arguments, so `**view.as_kwargs()` passes it whole.
    """

    rule: str = DEFAULTS.rule
    tau_h: float = DEFAULTS.tau_h
    tau_o: float = DEFAULTS.tau_o
    top_n: int = DEFAULTS.top_n

    @classmethod
    def read(cls, values: dict[str, object]) -> RuleView:
        """From raw values by setting name; raises SettingsError naming the first bad one."""
        numbers = {name: check_number(name, values[name], FIELDS[name]) for name in WHATIF_FIELDS[1:]}
        return cls(rule=check_rule(values["rule"]), **numbers)

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


def read_settings(values: dict[str, object], max_new_tokens_cap: int) -> DecodeSettings:
    """A run's settings from raw values by setting name (missing ones take their defaults, within the
    cap as on the page), checked against the page's ranges; raises SettingsError naming the first bad one."""
    limits = fields(max_new_tokens_cap)
    given = {name: values.get(name, min(getattr(DEFAULTS, name), field.high)) for name, field in limits.items()}
    numbers = {name: check_number(name, given[name], field) for name, field in limits.items()}
    rule = check_rule(values.get("rule", DEFAULTS.rule))
    return DecodeSettings(rule=rule, record_top=WHATIF_TOP, **numbers).validate()


# --- the panel ------------------------------------------------------------------------------------


@dataclass
class Controls:
    """The settings' components, by setting name (see `settings`), plus the τ_O reading and the chat box."""

    tau_h: gr.Slider
    tau_o: gr.Slider
    tau_o_meaning: gr.Markdown
    top_n: gr.Slider
    k: gr.Slider
    temperature: gr.Slider
    top_p: gr.Slider
    max_new_tokens: gr.Slider
    rule: gr.Dropdown
    seed: gr.Number
    chat: gr.Checkbox

    def settings(self) -> dict[str, gr.components.Component]:
        """Every run setting's component, by setting name."""
        return {name: getattr(self, name) for name in (*FIELDS, "rule")}

    def whatif(self) -> dict[str, gr.components.Component]:
        return {name: getattr(self, name) for name in WHATIF_FIELDS}

    def read_settings(self, values: dict, max_new_tokens_cap: int) -> DecodeSettings:
        """The run's settings from an event's input values (keyed by component)."""
        return read_settings({name: values[c] for name, c in self.settings().items()}, max_new_tokens_cap)

    def read_view(self, values: dict) -> RuleView:
        return RuleView.read({name: values[c] for name, c in self.whatif().items()})

    def show(self, settings: DecodeSettings, max_new_tokens_cap: int) -> dict:
        """Every control moved to a run's settings (a loaded trace's), so the inspector and the
        what-if start from what the run used; values beyond a slider's range stop at its end."""
        limits = fields(max_new_tokens_cap)
        shown = {
            c: min(max(getattr(settings, name), limits[name].low), limits[name].high)
            for name, c in self.settings().items()
            if name in limits
        }
        return shown | {self.rule: settings.rule, self.tau_o_meaning: RuleView.of(settings).overlap_meaning()}


def build_controls(max_new_tokens_cap: int) -> Controls:
    limits = fields(max_new_tokens_cap)

    def slider(name: str, **extra) -> gr.Slider:
        f = limits[name]
        value = min(getattr(DEFAULTS, name), f.high)
        return gr.Slider(f.low, f.high, value=value, step=f.step, label=f"{f.label}: {f.meaning}", elem_id=name, **extra)

    with gr.Group():
        tau_h = slider("tau_h")
        tau_o = slider("tau_o")
        tau_o_meaning = gr.Markdown(RuleView().overlap_meaning(), elem_id="tau_o_meaning")  # under its slider, full width
        top_n = slider("top_n")
        k = slider("k")
        rule = gr.Dropdown(list(RULES), value=DEFAULTS.rule, label="EASD rule (full, or the paper's ablations)", elem_id="rule")
    with gr.Accordion("Sampling and length", open=False, elem_id="sampling"):
        temperature = slider("temperature")
        top_p = slider("top_p")
        max_new_tokens = slider("max_new_tokens")
        # no precision or bounds here: Gradio would round or refuse in its own words; read_settings checks it
        seed = gr.Number(value=DEFAULTS.seed, label=f"seed ({FIELDS['seed'].meaning})", elem_id="seed")
        chat = gr.Checkbox(value=True, label="use the chat template", elem_id="chat")
    return Controls(
        tau_h=tau_h,
        tau_o=tau_o,
        tau_o_meaning=tau_o_meaning,
        top_n=top_n,
        k=k,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        rule=rule,
        seed=seed,
        chat=chat,
    )
