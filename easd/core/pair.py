"""A model pair as the engine sees it: two loaded models, their shared tokenizer and vocabulary.

How a pair is found and loaded (folders, GGUF files, hub ids, the embedded and tiny pairs, and
which backend runs them) is `easd.pairs`' business; the engine only needs this object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .acceptance import Rounding
from .seam import Model, Tokenizer


@dataclass
class ModelPair:
    """A draft and a target that share a tokenizer, on one backend; read-only once loaded."""

    draft: Model
    target: Model
    tokenizer: Tokenizer
    draft_name: str
    target_name: str
    vocab_size: int  # logits of both models are cut to this shared size
    eos_ids: frozenset[int]
    context_length: int  # the shorter of the two models' position limits
    note: str = ""  # shown to users, e.g. that the tiny random pair writes gibberish
    info: dict = field(default_factory=dict)  # revisions, dtype, backend and precision, for trace headers

    @property
    def backend(self) -> str:
        return self.target.backend

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def rounding(self) -> Rounding:
        """How far each model's logits may move without meaning anything (docs/method.md, "Fragile decisions")."""
        return Rounding(
            draft=self.draft.eps, target=self.target.eps, draft_shift=self.draft.shift, target_shift=self.target.shift
        )

    def describe(self) -> str:
        """What runs, in one line: "draft A → target B (llama.cpp, GGUF Q4_K_M, cpu)"."""
        return f"draft {self.draft_name} → target {self.target_name} ({self.backend}, {self.target.dtype}, {self.device})"
