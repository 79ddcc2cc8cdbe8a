"""The seam between the decoding loop and a model's runtime: what the loop asks of a loaded model.

The loop (easd.method.step) never touches weights or caches. It asks each model of the pair
for `Caches` (the key/value caches of one batch's rows) and the pair for a `Tokenizer`. Two
backends implement them (easd/backends): transformers (PyTorch: folders, hub ids, GPUs, and the
exact float32 regime) and llama.cpp (GGUF files, quantized, fast on a CPU).

Words, defined once:
  row     one Generation's place in a batch: row i of the draft's caches and of the target's
  seen    the tokens of a row that a model's cache holds; between blocks, every committed token but
          the last, whose logits the next pass computes
  state   a copy of a row's cache that a later batch can start from (easd.method.prefix)
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

import torch

RowState = Any  # a backend's own copy of a row's cache: transformers' key/value tensors, llama.cpp's sequence bytes


class Caches(Protocol):
    """The caches of one model for the rows of a batch, and the forward pass that reads and extends them."""

    @property
    def rows(self) -> int: ...

    def length(self, row: int) -> int:
        """How many of the row's tokens the cache has seen."""

    def add_row(self, tokens: list[int], room: int, start: RowState | None = None) -> None:
        """Append a row (as the last one) whose cache holds `tokens`: computed alone, as in a solo run, or
        restored from `start`, a state of exactly those tokens. The row will hold at most `room` tokens."""

    def keep_rows(self, rows: list[int]) -> None:
        """Keep only these rows, in this order (the others leave the batch)."""

    def logits(
        self, sequences: dict[int, list[int]], last: dict[int, int], precise: Collection[int] = ()
    ) -> dict[int, torch.Tensor]:
        """One forward pass over the tokens of each row in `sequences` that the cache has not seen.

        `sequences[row]` is the row's whole sequence; rows not in it take no part. Returns, per row,
        the float32 logits at its last `last[row]` positions, cut to the pair's shared vocabulary;
        rows in `precise` get them from a float32 output layer where the backend has a choice.
        -> {row: [last[row], V]}
        """

    def truncate(self, row: int, length: int) -> None:
        """Forget the row's tokens from position `length` on (rejected drafts)."""

    def tidy(self) -> None:
        """Between steps: give back room that no row needs any more."""

    def save_row(self, row: int) -> RowState | None:
        """A copy of the row's cache as it is now (None if it holds nothing), for `add_row(start=…)`."""


class Model(Protocol):
    """One loaded model as the loop sees it."""

    name: str
    backend: str  # "transformers" | "llama.cpp"
    device: torch.device  # where the loop's tensors and random generators live
    dtype: str  # what it computes in, as a trace header says it: "float32", "bfloat16", "GGUF Q4_K_M"
    eps: float  # relative precision of its logits: one rounding step at a logit z is about eps·|z|
    shift: float  # the most a logit was measured to move with the pass's shape (llama.cpp); 0 where it cannot
    bytes_per_token: int  # KV-cache memory one token of one row takes
    max_rows: int  # the most rows its caches hold at once (llama.cpp: 256 sequences a context)

    def caches(self, vocab_size: int, use_cache: bool = True) -> Caches:
        """Empty caches for a new batch; `use_cache=False` recomputes every row from its first token on each pass."""

    @property
    def has_attention(self) -> bool:
        """Whether the runtime exposes attention weights (transformers does, llama.cpp does not)."""

    def attention_rows(self, tokens: list[int], start: int, layers: int) -> torch.Tensor:
        """The attention weights of the tokens from `start` on, over every token up to each, in the last `layers`
        layers, averaged over heads: [layers, len(tokens) - start, len(tokens)]. One pass of those tokens after the
        context, outside any batch. Only where `has_attention`."""


class RewardModel(Protocol):
    """A process reward model, which RSD asks to score each reasoning step (easd.backends.prm)."""

    name: str

    def reward(self, question: str, steps: list[str]) -> float:
        """The reward in (0, 1) for the newest of `steps`, given the question and the steps before it."""

    def input_ids(self, question: str, steps: list[str]) -> list[int]:
        """The token ids the reward is computed on."""


class Tokenizer(Protocol):
    """Token ids and texts as the pair's models know them, and the chat template."""

    chat_template: str | None
    pad_id: int  # what pads a ragged batch (never attended to)

    def encode(self, text: str) -> list[int]:
        """The text's token ids, special tokens written in it included, none added."""

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The chat template applied to `messages`, as text."""

    def text(self, token_id: int) -> str:
        """One token's text as a trace shows it (special tokens included; a partial character as U+FFFD)."""

    def decode(self, token_ids: list[int]) -> str:
        """The text of a sequence, special tokens left out."""

    def vocab(self) -> dict[str, int]:
        """Every token's string (as the tokenizer stores it) and id: two models pair only if these agree."""


def follow(caches: Caches, parents: list[int], contexts: list[list[int]], room: int) -> list[int]:
    """Make the rows of `caches` hold, in a new order, copies of the rows `parents` names (row i's new content is
    what row parents[i] held): a parent named once keeps its row, one named again gets a copy of it (its state, not
    recomputed). `contexts[i]` is what row parents[i] holds (its tokens but the newest, which the next pass computes).
    -> for each row of the new order, the index into `parents` it came from (beam search's beams, SMC's particles
    are reordered to match)."""
    kept = list(dict.fromkeys(parents))  # first uses, in order
    copies = [(i, parent) for i, parent in enumerate(parents) if parents.index(parent) != i]
    states = {parent: caches.save_row(parent) for _, parent in copies}
    caches.keep_rows(kept)
    for i, parent in copies:
        caches.add_row(contexts[i], room, start=states[parent])
    return [parents.index(parent) for parent in kept] + [i for i, _ in copies]


ROW_SLACK = 256  # tokens of room a row's cache may take beyond its tokens (llama.cpp rounds a row's cells up to 256)


def row_bytes(models: Collection[Model], tokens: int) -> int:
    """KV-cache bytes one row of up to `tokens` tokens takes in all of `models`, with the slack a cache allows."""
    return (tokens + ROW_SLACK) * sum(model.bytes_per_token for model in models)


def free_memory(device: torch.device) -> int:
    """Bytes this process could still allocate on `device` (the GPU's free memory, or the OS's MemAvailable)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    return int(fields["MemAvailable"].split()[0]) * 1024
