"""MTI, minimal test-time intervention (Yang et al., 2025): target-only, but where the target is unsure it is guided.

Where the target's entropy exceeds τ, the batch (decoding.Batch._guide) asks the target once more, after the
context followed by a negative prompt, and the token is drawn from log p_u + ω (log p_c − log p_u) (classifier-free
guidance: acceptance.guided_logits). These are MTI's own parts; the table entry is methods.METHODS["mti"].
"""

from __future__ import annotations

import torch

from ..errors import SettingsError
from . import acceptance as acc
from .methods import METHODS
from .pair import ModelPair
from .settings import DecodeSettings


def negative_prompt(pair: ModelPair, settings: DecodeSettings, prompt_length: int) -> list[int]:
    """MTI's negative prompt as token ids (no special tokens added), or [] for the other methods;
    SettingsError if it leaves the prompt no room in the context."""
    if not METHODS[settings.method].guides:
        return []
    ids = pair.tokenizer.encode(settings.mti_negative)
    if prompt_length + len(ids) >= pair.context_length:
        raise SettingsError(
            "mti_negative",
            f"is {len(ids):,} tokens; after the prompt's {prompt_length:,} the model's context of {pair.context_length:,} "
            "tokens has no room left for it and a new token: shorten one of them",
        )
    return ids


def unsure(p_logits: torch.Tensor, settings: DecodeSettings) -> bool:
    """Whether MTI guides this token: the target's entropy (nats, temperature 1) exceeds τ.  p_logits: [1, V]"""
    return bool(acc.mti_intervenes(acc.entropy_of_probs(acc.raw_probs(p_logits)), settings.mti_tau))


def guided(p_logits: torch.Tensor, u_logits: torch.Tensor | None, settings: DecodeSettings) -> torch.Tensor | None:
    """The guided logits for a token the target was unsure of (u_logits: after the negative prompt), else None.
    [1, V] -> [1, V]"""
    return None if u_logits is None else acc.guided_logits(p_logits, u_logits, settings.mti_omega)
