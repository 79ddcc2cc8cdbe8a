"""The settings panel, and the one boundary where its values (or an API call's) become settings.

Every setting whose declaration has a page control (easd.method.knobs: its `control`, DecodeSettings' or a method's
own) is a component here, built from that declaration: its label, what it means, its range. Every value that
arrives, from the page or the API (components.api), is checked against the same ranges by type, so a crafted request
gets no more than the page allows. What passes becomes one validated object: `DecodeSettings` for a run, `RuleView`
for re-reading a finished trace.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import gradio as gr

from easd.errors import SettingsError, shown
from easd.method.compare import DEFAULT_METHODS
from easd.method.knobs import Control, Knob, finite, is_utf8
from easd.method.methods import METHODS, knobs, make_settings, owner, settings_values
from easd.method.settings import MAX_SEED, WHATIF_TOP, DecodeSettings
from easd.method.whatif import EASD_FIELDS, RELAXED_FIELDS, RuleView

DEFAULTS = DecodeSettings()
OTHER_LABELS = {
    "prompt": "Prompt",
    "pair": "Model pair",
    "chat": "chat template",
    "left": "left lane",
    "right": "right lane",
    "search": "Find tokens",
    # a link's parameters (components.links), named as the address bar shows them
    **{name: f"the link's {name}=" for name in ("run", "eval", "problem", "sample", "lane", "token")},
}
WHATIF_FIELDS = (*EASD_FIELDS, *RELAXED_FIELDS)  # the settings a finished trace can be re-read under


def page_knobs(max_new_tokens_cap: int) -> dict[str, Knob]:
    """Every setting the page shows, by flat name, in declaration order, with this app's cap on new tokens."""
    found = {name: knob for name, knob in knobs().items() if knob.control is not None}
    tokens = found["max_new_tokens"]
    cap = replace(tokens.control, high=max_new_tokens_cap)
    return found | {"max_new_tokens": replace(tokens, control=cap, short=f"at most {max_new_tokens_cap} per run")}


def label(name: str, knob: Knob) -> str:
    """A control's label: its name on the page and what it means ("τ_H: entropy threshold (nats)")."""
    return f"{knob.label or name}: {knob.short}" if knob.short else knob.label or name


def page_name(setting: str) -> str:
    """A setting as the page names it: its control's label ("τ_O"), not a command-line flag."""
    knob = knobs().get(setting)
    return (knob.label or setting) if knob is not None else OTHER_LABELS.get(setting, setting)


def page_words(err: SettingsError) -> str:
    """A settings error as the page says it."""
    return f"{page_name(err.setting)}: {err.message}"


def api_words(err: SettingsError) -> str:
    """A settings error as the API says it: the parameter's name."""
    return f"{err.setting}: {err.message}"


# --- checking values at the boundary --------------------------------------------------------------


def check_value(name: str, value, knob: Knob):
    """`value` if the page could have sent it for this setting: within its control's range (a whole number where it
    counts), one of its choices, or a text it accepts; SettingsError naming it otherwise."""
    control = knob.control
    if control.kind in ("slider", "number"):
        return check_number(name, value, knob)
    knob.check(name, value)
    return value


def check_number(name: str, value, knob: Knob) -> int | float:
    """`value` if it is a finite number in the control's range (a whole one where the setting counts)."""
    control = knob.control
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)
    if ok and knob.kind == "int":
        ok = isinstance(value, int) or value.is_integer()
        value = int(value) if ok else value
    if not (ok and control.low <= value <= control.high):
        raise SettingsError(name, f"must be {describe(control, knob)} (got {shown(value)})")
    return value


def describe(control: Control, knob: Knob) -> str:
    kind = "a whole number" if knob.kind == "int" else "a number"
    high = "2^63 − 1" if control.high >= MAX_SEED else f"{control.high:g}"
    return f"{kind} from {control.low:g} to {high}"


def check_prompt(value) -> str:
    if not isinstance(value, str):
        raise SettingsError("prompt", f"must be text (got {shown(value)})")
    if not is_utf8(value):
        raise SettingsError("prompt", "holds characters that are not valid text (lone surrogates); retype or paste it again")
    return value


def check_method(lane: str, value) -> str:
    """A lane's method (`lane` is "left" or "right", as the API's parameters are named): one the batch decodes."""
    if not (isinstance(value, str) and value in METHODS):
        raise SettingsError(lane, f"must be one of {', '.join(METHODS)} (got {shown(value)})")
    return value


def check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(name, f"must be true or false (got {shown(value)})")
    return value


def read_view(values: dict[str, object]) -> RuleView:
    """The rule a finished trace is re-read under, from raw values by setting name; SettingsError naming the first
    bad one."""
    declared = knobs()
    return RuleView(**{name: check_value(name, values[name], declared[name]) for name in WHATIF_FIELDS})


def read_settings(values: dict[str, object], max_new_tokens_cap: int) -> DecodeSettings:
    """A run's settings from raw values by setting name (missing ones take their defaults, within the cap as on the
    page), each checked against its control's range; raises SettingsError naming the first bad one."""
    defaults = settings_values(DEFAULTS)
    checked = {}
    for name, knob in page_knobs(max_new_tokens_cap).items():
        default = min(defaults[name], knob.control.high) if knob.control.kind == "slider" else defaults[name]
        checked[name] = check_value(name, values.get(name, default), knob)
    return make_settings(checked, record_top=WHATIF_TOP).validate()


# --- the panel ------------------------------------------------------------------------------------


@dataclass
class Controls:
    """Every setting's component by its flat name (`settings`), the τ_O reading and the chat box."""

    components: dict[str, gr.components.Component]
    tau_o_meaning: gr.Markdown
    chat: gr.Checkbox
    own: gr.Accordion  # the lanes' methods' own settings

    def __getitem__(self, name: str) -> gr.components.Component:
        return self.components[name]

    def settings(self) -> dict[str, gr.components.Component]:
        """Every run setting's component, by setting name."""
        return dict(self.components)

    def whatif(self) -> dict[str, gr.components.Component]:
        return {name: self.components[name] for name in WHATIF_FIELDS}

    def read_settings(self, values: dict, max_new_tokens_cap: int) -> DecodeSettings:
        """The run's settings from an event's input values (keyed by component)."""
        return read_settings({name: values[c] for name, c in self.components.items()}, max_new_tokens_cap)

    def own_outputs(self) -> list:
        """What `follow` updates: the accordion and every method's own setting."""
        return [self.own, *(c for name, c in self.components.items() if owner(name)[0] is not None)]

    def follow(self, methods) -> dict:
        """The own settings of the lanes' `methods` shown, open, under their names; every other method's hidden (they
        keep their values)."""
        return follow_methods(self.components, self.own, methods)

    def read_view(self, values: dict) -> RuleView:
        return read_view({name: values[c] for name, c in self.whatif().items()})

    def show(self, settings: DecodeSettings, max_new_tokens_cap: int) -> dict:
        """Every control moved to a run's settings (a loaded trace's), so the inspector and the what-if start from what
        the run used; values beyond a slider's range stop at its end."""
        values, declared = settings_values(settings), page_knobs(max_new_tokens_cap)
        shown = {}
        for name, component in self.components.items():
            control, value = declared[name].control, values[name]
            shown[component] = min(max(value, control.low), control.high) if control.kind == "slider" else value
        return shown | {self.tau_o_meaning: RuleView.of(settings).overlap_meaning()}


def build_controls(max_new_tokens_cap: int) -> Controls:
    """The settings every method reads, then, folded, sampling and length, and each method's own."""
    declared, defaults = page_knobs(max_new_tokens_cap), settings_values(DEFAULTS)
    made: dict[str, gr.components.Component] = {}

    def add(names, shown=None) -> None:
        for name in names:
            made[name] = _component(name, declared[name], defaults[name])
            if shown is not None:  # before the page is built: Gradio reads it then
                made[name].visible = name in shown

    with gr.Group():
        add(("tau_h", "tau_o"))
        tau_o_meaning = gr.Markdown(RuleView().overlap_meaning(), elem_id="tau_o_meaning")  # under its slider, full width
        add(("top_n", "k", "rule"))
    with gr.Accordion("Sampling and length", open=False, elem_id="sampling"):
        add(("temperature", "top_p", "max_new_tokens", "seed"))
        chat = gr.Checkbox(value=True, label="use the chat template", elem_id="chat")
    own = [name for name in declared if owner(name)[0] is not None]
    shown = own_settings_of(DEFAULT_METHODS.values())
    with gr.Accordion(**_own_accordion(DEFAULT_METHODS.values()), elem_id="method_settings") as accordion:
        add(own, shown)
    common = [name for name in declared if name not in made]  # a setting every method reads, added to the table later
    add(common)
    components = {name: made[name] for name in declared}
    return Controls(components=components, tau_o_meaning=tau_o_meaning, chat=chat, own=accordion)


def own_settings_of(methods) -> set[str]:
    """The flat names of the own settings of `methods` (the page's controls' names)."""
    chosen = set(methods)
    return {name for name in knobs() if (method := owner(name)[0]) is not None and method.name in chosen}


def _own_accordion(methods) -> dict:
    """The own settings' accordion for lanes running `methods`: named after the methods that have some, open where
    there are some (a lane's method's settings in view), hidden where none has any (SD | EASD: EASD's are the first)."""
    having = [METHODS[name].title for name in dict.fromkeys(methods) if name in METHODS and METHODS[name].settings]
    if not having:
        return dict(label="Each method's own settings", open=False, visible=False)
    return dict(label=f"{' and '.join(having)}: own settings", open=True, visible=True)


def follow_methods(components: dict, accordion: gr.Accordion, methods) -> dict:
    shown = own_settings_of(methods)
    updates = {c: gr.update(visible=name in shown) for name, c in components.items() if owner(name)[0] is not None}
    return updates | {accordion: gr.Accordion(**_own_accordion(methods))}


def _component(name: str, knob: Knob, default) -> gr.components.Component:
    """The page's control for a setting, as its declaration says."""
    control, text = knob.control, label(name, knob)
    if control.kind == "slider":
        value = min(default, control.high)
        return gr.Slider(control.low, control.high, value=value, step=control.step, label=text, elem_id=name)
    if control.kind == "number":  # no precision or bounds here: Gradio would round or refuse in its own words
        return gr.Number(value=default, label=f"{knob.label or name} ({knob.short})", elem_id=name)
    if control.kind == "choice":
        return gr.Dropdown(list(knob.choices), value=default, label=f"{knob.label or name} ({knob.short})", elem_id=name)
    return gr.Textbox(value=default, label=text, max_lines=1, elem_id=name)
