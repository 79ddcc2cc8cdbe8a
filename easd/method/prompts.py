"""A prompt as the models read it: token ids, through the chat template where asked, checked against the context."""

from __future__ import annotations

from ..errors import SettingsError
from .pair import ModelPair

MAX_PROMPT_CHARS_PER_TOKEN = 32  # a prompt longer than this × context cannot fit; refuse before tokenizing


def encode_prompt(pair: ModelPair, prompt: str, chat: bool, system: str = "") -> list[int]:
    """Token ids of the prompt, through the chat template when asked and when there is one; a `system` prompt is
    the template's system turn, or the text's first paragraph without a template."""
    if not prompt or not prompt.strip():
        raise SettingsError("prompt", "is empty; give the text the models should continue or answer")
    if len(prompt) > pair.context_length * MAX_PROMPT_CHARS_PER_TOKEN:
        raise SettingsError(
            "prompt", f"is {len(prompt):,} characters, more than the model's context of {pair.context_length:,} tokens can hold"
        )
    tokenizer = pair.tokenizer
    turns = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    if chat and tokenizer.chat_template:
        text = tokenizer.render_chat(turns)
    else:
        text = f"{system}\n\n{prompt}" if system else prompt
    ids = tokenizer.encode(text)
    if len(ids) >= pair.context_length:
        raise SettingsError(
            "prompt", f"is {len(ids):,} tokens; the model's context is {pair.context_length:,} tokens, so shorten it"
        )
    return ids
