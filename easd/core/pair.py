"""A model pair as the engine sees it: two loaded models, their shared tokenizer and vocabulary.

How a pair is found and loaded (folders, GGUF files, hub ids, the embedded and tiny pairs) is
`easd.pairs`' business; the engine only needs this object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .acceptance import Rounding

INT8_EPS = 2.0**-7  # dynamic int8: 255 levels per tensor, about bfloat16's relative step


@dataclass
class ModelPair:
    """A draft and a target that share a tokenizer; read-only once loaded."""

    draft: PreTrainedModel
    target: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    draft_name: str
    target_name: str
    vocab_size: int  # logits of both models are cut to this shared size
    eos_ids: frozenset[int]
    context_length: int  # the shorter of the two models' position limits
    note: str = ""  # shown to users, e.g. that the tiny random pair writes gibberish
    info: dict = field(default_factory=dict)  # revisions, dtype and device, for trace headers

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def dtype(self) -> torch.dtype:
        return self.target.dtype

    @property
    def rounding(self) -> Rounding:
        """Each model's relative precision, for the fragility of the rule's decisions (README, "Fragile decisions")."""
        return Rounding(draft=relative_precision(self.draft), target=relative_precision(self.target))

    def describe(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"draft {self.draft_name} → target {self.target_name} ({dtype}, {self.device})"


def relative_precision(model: PreTrainedModel) -> float:
    """Machine epsilon of the model's weights: its dtype's, or INT8_EPS for int8 weights (whose head has no weight tensor)."""
    if not isinstance(getattr(model.get_output_embeddings(), "weight", None), torch.Tensor):
        return INT8_EPS
    return torch.finfo(model.dtype).eps
