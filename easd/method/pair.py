"""A model pair as the engine sees it: two loaded models, their shared tokenizer and vocabulary.

How a pair is found and loaded (folders, GGUF files, hub ids, the embedded and tiny pairs, and
which backend runs them) is `easd.pairs`' business; the engine only needs this object, and each
runtime's loader checks with `check_same_tokenizer` that its two models can be paired.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import ModelLoadError
from .acceptance import Rounding
from .seam import Model, RewardModel, Tokenizer


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
    prm: RewardModel | None = None  # the process reward model RSD asks, where the operator loaded one (--prm)

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
        prm = f", PRM {self.prm.name}" if self.prm is not None else ""
        return f"draft {self.draft_name} → target {self.target_name}{prm} ({self.backend}, {self.target.dtype}, {self.device})"


def check_same_tokenizer(draft_tokenizer: Tokenizer, target_tokenizer: Tokenizer) -> None:
    """Refuse a pair whose tokenizers map some string to different ids, naming the first one."""
    draft_vocab, target_vocab = draft_tokenizer.vocab(), target_tokenizer.vocab()
    for token, token_id in sorted(target_vocab.items(), key=lambda item: item[1]):
        if draft_vocab.get(token) != token_id:
            where = "is missing" if token not in draft_vocab else f"is id {draft_vocab[token]}"
            raise ModelLoadError(
                f"the tokenizers differ: {token!r} is id {token_id} in the target but {where} in the draft; "
                "speculative decoding needs a draft and target with the same tokenizer (e.g. one model family)"
            )
    extra = sorted(set(draft_vocab) - set(target_vocab), key=draft_vocab.get)
    if extra:
        raise ModelLoadError(
            f"the tokenizers differ: {extra[0]!r} (id {draft_vocab[extra[0]]}) exists in the draft but not in the target; "
            "speculative decoding needs a draft and target with the same tokenizer"
        )


# Loads a pair when it is first needed. The app's are functools.partials of module-level functions, so that they pickle:
# a ZeroGPU call simulated in a spawned process receives one and loads its own copy (easd.serving.zerogpu).
PairLoader = Callable[[], ModelPair]
