"""The settings panel: sliders and fields, returned as handles, plus their mapping to DecodeSettings."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from easd.core.settings import RULES, DecodeSettings, overlap_needed

WHATIF_TOP = 20  # candidates kept per token, so the what-if covers every n the slider offers


@dataclass
class Controls:
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

    def inputs(self) -> list:
        """In the order `settings_from` takes them."""
        return [
            self.tau_h,
            self.tau_o,
            self.top_n,
            self.k,
            self.temperature,
            self.top_p,
            self.max_new_tokens,
            self.rule,
            self.seed,
        ]

    def whatif_inputs(self) -> list:
        """The settings a finished trace can be re-read under without regenerating."""
        return [self.tau_h, self.tau_o, self.top_n, self.rule]


def build_controls(max_new_tokens_cap: int) -> Controls:
    d = DecodeSettings()
    with gr.Group():
        tau_h = gr.Slider(0, 4, value=d.tau_h, step=0.05, label="τ_H: entropy threshold (nats)", elem_id="tau_h")
        with gr.Row():
            tau_o = gr.Slider(0, 1, value=d.tau_o, step=0.05, label="τ_O: overlap threshold", elem_id="tau_o", scale=3)
            tau_o_meaning = gr.Markdown(overlap_meaning(d.tau_o, d.top_n), elem_id="tau_o_meaning")
        top_n = gr.Slider(1, WHATIF_TOP, value=d.top_n, step=1, label="n: top-n candidates compared", elem_id="top_n")
        k = gr.Slider(1, 12, value=d.k, step=1, label="k: draft tokens per block", elem_id="k")
        rule = gr.Dropdown(list(RULES), value=d.rule, label="EASD rule (full, or the paper's ablations)", elem_id="rule")
    with gr.Accordion("Sampling and length", open=False, elem_id="sampling"):
        temperature = gr.Slider(0, 1.5, value=d.temperature, step=0.05, label="temperature (0 = greedy)", elem_id="temperature")
        top_p = gr.Slider(0.05, 1, value=d.top_p, step=0.05, label="top-p", elem_id="top_p")
        cap = max_new_tokens_cap
        max_new_tokens = gr.Slider(
            1, cap, value=min(d.max_new_tokens, cap), step=1, label=f"max new tokens (≤ {cap})", elem_id="max_new_tokens"
        )
        seed = gr.Number(value=d.seed, precision=0, minimum=0, label="seed (same for both runs)", elem_id="seed")
        chat = gr.Checkbox(value=True, label="use the chat template", elem_id="chat")
    return Controls(tau_h, tau_o, tau_o_meaning, top_n, k, temperature, top_p, max_new_tokens, rule, seed, chat)


def overlap_meaning(tau_o: float, top_n: int) -> str:
    return f"= at least **{overlap_needed(tau_o, int(top_n))} of {int(top_n)}** shared"


def settings_from(tau_h, tau_o, top_n, k, temperature, top_p, max_new_tokens, rule, seed) -> DecodeSettings:
    """The sliders' values as validated settings (raises SettingsError naming the bad one)."""
    return DecodeSettings(
        rule=rule,
        k=int(k),
        tau_h=float(tau_h),
        tau_o=float(tau_o),
        top_n=int(top_n),
        temperature=float(temperature),
        top_p=float(top_p),
        max_new_tokens=int(max_new_tokens),
        seed=int(seed or 0),
        record_top=WHATIF_TOP,
    ).validate()
