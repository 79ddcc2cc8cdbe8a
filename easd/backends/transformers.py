"""The transformers backend: PyTorch models from folders, hub ids or GGUF files, on a CPU or a GPU.

`HFModel` wraps a loaded transformers model, `HFCaches` holds its key/value caches for the rows
of a batch, and `HFTokenizer` wraps its tokenizer (easd.method.seam). `from_pretrained` reads a
model, `make_pair` pairs two, `with_int8` quantizes them for a CPU. In float32 a row's numbers
do not depend on the batch it is in: the exact regime the tests hold the other backend against.

The caches: rows of a batch are ragged (prompts differ in length, and each block every row keeps
a different number of its drafted tokens). Every row's keys and values sit in one tensor per
layer, [B, heads, L, head_dim], at slots 0..L-1. `used[b, s]` says whether slot s holds one of
row b's tokens; a rejected draft's slot is simply marked unused, and later passes mask it out of
attention. Position ids are given explicitly (a row's token at slot s has the position "number
of used slots before s"), so holes never shift a row's positions.

Waste is bounded: trailing slots no row uses are cut after every block, and when the slots in use
fall far behind L (`COMPACT_SLACK`), every row's used slots are gathered to the front. Keys and
values of committed tokens are never recomputed, only moved, so a row's numbers do not depend on
where its slots are. A row joins with the keys and values of its prefix computed alone, so its
prefill is the same computation whether it runs alone or in a batch; it leaves by being cut out of
the batch dimension.
"""

from __future__ import annotations

import dataclasses
import warnings
import weakref
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from ..errors import ModelLoadError
from ..method.pair import ModelPair, check_same_tokenizer
from . import DTYPES, INT8

INT8_EPS = 2.0**-7  # dynamic int8: 255 levels per tensor, about bfloat16's relative step
COMPACT_SLACK = 64  # unused slots tolerated per row before compacting: a copy of the cache costs about one pass

RowKV = list[tuple[torch.Tensor, torch.Tensor]]  # one (keys, values) per layer, each [1, heads, n, head_dim]


@dataclass(eq=False)
class HFModel:
    """A transformers model as the loop sees it (easd.method.seam.Model); `module` is the model itself."""

    module: PreTrainedModel
    name: str
    pad_id: int  # fills the padding of ragged passes (masked out)
    backend: str = field(default="transformers", init=False)
    shift: float = field(default=0.0, init=False)  # beyond rounding, a row's logits do not depend on the pass's shape
    max_rows: int = field(default=2**31 - 1, init=False)  # as many as memory holds
    has_attention: bool = field(default=True, init=False)

    @property
    def device(self) -> torch.device:
        return self.module.device

    @property
    def dtype(self) -> str:
        return "int8" if self.int8 else str(self.module.dtype).removeprefix("torch.")

    @property
    def int8(self) -> bool:
        """Dynamic int8 Linear layers (whose head has no weight tensor)."""
        return not isinstance(getattr(self.module.get_output_embeddings(), "weight", None), torch.Tensor)

    @property
    def eps(self) -> float:
        """Machine epsilon of the weights: their dtype's, or INT8_EPS for int8 weights."""
        return INT8_EPS if self.int8 else torch.finfo(self.module.dtype).eps

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes one token takes: keys and values, every layer, every KV head."""
        config = self.module.config.get_text_config(decoder=True)
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        element = self.module.get_input_embeddings().weight.element_size()  # int8 layers still cache float activations
        return 2 * config.num_hidden_layers * heads * head_dim * element

    def caches(self, vocab_size: int, use_cache: bool = True) -> HFCaches:
        return HFCaches(self.module, vocab_size, self.pad_id, use_cache)

    @torch.no_grad()
    def attention_rows(self, tokens: list[int], start: int, layers: int) -> torch.Tensor:
        """easd.method.seam.Model.attention_rows: the context before `start` computed once, then the rest with its
        attention weights, which only the eager attention gives (switched to for this pass, then back)."""
        device, module = self.device, self.module
        cache = DynamicCache(config=module.config)
        module(input_ids=torch.tensor([tokens[:start]], device=device), cache=cache, use_cache=True)
        kind = module.config._attn_implementation
        module.set_attn_implementation("eager")
        try:
            out = module(input_ids=torch.tensor([tokens[start:]], device=device), cache=cache, output_attentions=True)
        finally:
            module.set_attn_implementation(kind)
        return torch.stack([layer[0].float().mean(0) for layer in out.attentions[-layers:]]).cpu()  # [layers, n, T]


@dataclass(eq=False)
class HFTokenizer:
    """A transformers tokenizer as the loop sees it (easd.method.seam.Tokenizer)."""

    tokenizer: PreTrainedTokenizerBase

    @property
    def chat_template(self) -> str | None:
        return self.tokenizer.chat_template

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )

    def text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def vocab(self) -> dict[str, int]:
        return self.tokenizer.get_vocab()


def prefill(model: PreTrainedModel, tokens: list[int]) -> RowKV | None:
    """Keys and values of `tokens` for one row, computed alone (None for no tokens)."""
    if not tokens:
        return None
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model.get_decoder()(input_ids=torch.tensor([tokens], device=model.device), cache=cache, use_cache=True)
    return [(layer.keys, layer.values) for layer in cache.layers]


_FLOAT32_HEADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its lm_head in float32


def float32_head(model: PreTrainedModel) -> torch.nn.Module:
    """The model's lm_head computing in float32 (docs/method.md, "Fragile decisions").

    A float32 head (and an int8 one, whose output is float32) is used as it is; a bfloat16 or
    float16 head gets a float32 copy of its weights, made once per model. It costs vocabulary ×
    hidden × 4 bytes (0.9 GB for the 1.5B target) and a float32 matrix product per pass.
    """
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dtype == torch.float32:
        return head
    if model not in _FLOAT32_HEADS:
        copy = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None, device=weight.device)
        with torch.no_grad():
            copy.weight.copy_(weight)
            if head.bias is not None:
                copy.bias.copy_(head.bias)
        _FLOAT32_HEADS[model] = copy.requires_grad_(False)
    return _FLOAT32_HEADS[model]


class HFCaches:
    """One model's caches for the rows of a batch, and the forward pass that reads and extends them
    (easd.method.seam.Caches). `use_cache=False` keeps nothing and recomputes every row from its
    first token on each pass; tests compare both."""

    def __init__(self, model, vocab_size: int, pad_id: int, use_cache: bool = True):
        self.model = model
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.use_cache = use_cache
        self.layers: RowKV = []  # [B, heads, L, head_dim] per layer; empty while no slot exists
        self.used = torch.zeros(0, 0, dtype=torch.bool, device=model.device)  # [B, L]

    # --- rows ---------------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        return self.used.shape[0]

    @property
    def slots(self) -> int:
        return self.used.shape[1]

    def length(self, row: int) -> int:
        """How many of the row's tokens the cache holds."""
        return int(self.used[row].sum())

    def add_row(self, tokens: list[int], room: int, start: RowKV | None = None) -> None:
        """Append a row (as the last one) holding `tokens`: prefilled alone, or the first of `start`'s keys and values."""
        if not self.use_cache:
            tokens = []
        kv = (
            [(k[:, :, : len(tokens)], v[:, :, : len(tokens)]) for k, v in start]
            if start and tokens
            else prefill(self.model, tokens)
        )
        n = len(tokens)
        width = max(self.slots, n)
        self._widen(width)
        row_used = torch.zeros(1, width, dtype=torch.bool, device=self.used.device)
        row_used[0, :n] = True
        if n and not self.layers:  # the rows already here hold no slots yet: give them empty ones of this shape
            self.layers = [
                (
                    _pad_slots(k[:, :, :0].expand(self.rows, -1, -1, -1), width),
                    _pad_slots(v[:, :, :0].expand(self.rows, -1, -1, -1), width),
                )
                for k, v in kv
            ]
        if self.layers:
            row_layers = kv if n else [(torch.zeros_like(k[:1]), torch.zeros_like(v[:1])) for k, v in self.layers]
            self.layers = [
                (torch.cat([k, _pad_slots(rk, width)]), torch.cat([v, _pad_slots(rv, width)]))
                for (k, v), (rk, rv) in zip(self.layers, row_layers)
            ]
        self.used = torch.cat([self.used, row_used])

    def keep_rows(self, rows: list[int]) -> None:
        """Keep only these rows, in this order (the others leave the batch)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.used.device)
        self.layers = [(k[index], v[index]) for k, v in self.layers]
        self.used = self.used[index]
        self.tidy()

    def save_row(self, row: int) -> RowKV | None:
        """A copy of the row's keys and values, for another run to start from."""
        if not self.length(row):
            return None
        slots = self.used[row].nonzero().squeeze(-1)
        return [(k[row : row + 1, :, slots].clone(), v[row : row + 1, :, slots].clone()) for k, v in self.layers]

    # --- the forward pass ---------------------------------------------------------------------

    @torch.no_grad()
    def logits(
        self, sequences: dict[int, list[int]], last: dict[int, int], precise: Collection[int] = ()
    ) -> dict[int, torch.Tensor]:
        """One forward pass over the tokens of each row in `sequences` that the cache has not seen.

        `sequences[row]` is the row's whole sequence; rows not in it take no part (their slots
        in this pass stay unused). Returns, per row, the logits at its last `last[row]` positions,
        cut to the shared vocabulary, as float32; rows in `precise` get them from a float32
        lm_head, the others from the model's own.  -> {row: [last[row], V]}
        """
        if not self.use_cache:
            self.layers, self.used = [], torch.zeros(self.rows, 0, dtype=torch.bool, device=self.used.device)
        seen = self.used.sum(dim=1).tolist()  # [B]
        fresh = {row: sequence[seen[row] :] for row, sequence in sequences.items()}
        width = max(len(tokens) for tokens in fresh.values())  # T
        device = self.used.device
        input_ids = torch.full((self.rows, width), self.pad_id, dtype=torch.long, device=device)  # [B, T]
        new_used = torch.zeros(self.rows, width, dtype=torch.bool, device=device)  # [B, T]
        for row, tokens in fresh.items():
            input_ids[row, : len(tokens)] = torch.tensor(tokens, device=device)
            new_used[row, : len(tokens)] = True
        positions = torch.tensor(seen, device=device)[:, None] + torch.arange(width, device=device)  # [B, T]
        cache = DynamicCache(ddp_cache_data=self.layers) if self.layers else DynamicCache(config=self.model.config)
        attention_mask = torch.cat([self.used, new_used], dim=1).long()  # [B, L + T]
        hidden = self.model.get_decoder()(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, cache=cache, use_cache=True
        ).last_hidden_state  # [B, T, H]
        self.layers = [(layer.keys, layer.values) for layer in cache.layers]
        self.used = torch.cat([self.used, new_used], dim=1)
        rows = list(fresh)
        picks = [(row, j) for row in rows for j in range(len(fresh[row]) - last[row], len(fresh[row]))]
        chosen = hidden[[r for r, _ in picks], [j for _, j in picks]]  # [sum(last), H]
        in_float32 = torch.tensor([row in precise for row, _ in picks], device=device)  # [sum(last)]
        logits = torch.empty(len(picks), self.vocab_size, device=device)  # [sum(last), V] float32
        if in_float32.any():
            logits[in_float32] = float32_head(self.model)(chosen[in_float32].float())[:, : self.vocab_size]
        if not in_float32.all():
            logits[~in_float32] = self.model.get_output_embeddings()(chosen[~in_float32])[:, : self.vocab_size].float()
        return dict(zip(rows, logits.split([last[row] for row in rows])))

    # --- keeping the cache small ----------------------------------------------------------------

    def truncate(self, row: int, length: int) -> None:
        """Forget the row's tokens from position `length` on (rejected drafts)."""
        slots = self.used[row].nonzero().squeeze(-1)
        self.used[row, slots[length:]] = False

    def tidy(self) -> None:
        """Cut trailing slots no row uses; gather each row's slots to the front once too many are wasted."""
        in_use = self.used.any(dim=0).nonzero()
        end = int(in_use[-1]) + 1 if len(in_use) else 0
        if end < self.slots:
            self.layers = [(k[:, :, :end], v[:, :, :end]) for k, v in self.layers]
            self.used = self.used[:, :end]
        lengths = self.used.sum(dim=1)
        longest = int(lengths.max()) if self.rows else 0
        if self.slots > longest + COMPACT_SLACK:
            self._compact(lengths, longest)

    def _compact(self, lengths: torch.Tensor, longest: int) -> None:
        order = torch.argsort((~self.used).to(torch.int8), dim=1, stable=True)[:, :longest]  # used slots first, in order
        self.layers = [(_gather_slots(k, order), _gather_slots(v, order)) for k, v in self.layers]
        self.used = torch.arange(longest, device=self.used.device)[None, :] < lengths[:, None]

    def _widen(self, width: int) -> None:
        if width > self.slots:
            self.layers = [(_pad_slots(k, width), _pad_slots(v, width)) for k, v in self.layers]
            self.used = torch.nn.functional.pad(self.used, (0, width - self.slots))


def _pad_slots(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Zero slots appended to [B, heads, L, head_dim] up to `width`."""
    return torch.nn.functional.pad(tensor, (0, 0, 0, width - tensor.shape[2]))


def _gather_slots(tensor: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """tensor[b, :, order[b], :] for every row b.  [B, h, L, d], [B, L'] -> [B, h, L', d]"""
    index = order[:, None, :, None].expand(-1, tensor.shape[1], -1, tensor.shape[3])
    return tensor.gather(2, index)


# --- loading a pair -----------------------------------------------------------------------------------


def resolve_dtype(name: str, device: str = "cpu") -> torch.dtype:
    """auto → bfloat16 where the hardware does it natively (CUDA, or CPUs with AVX512-BF16/AMX), else float32."""
    if name not in DTYPES:
        raise ModelLoadError(f"--dtype: must be one of {', '.join(DTYPES)} (got {name!r})")
    if name != "auto":
        return getattr(torch, name)
    return torch.bfloat16 if _native_bf16(device) else torch.float32


def _native_bf16(device: str) -> bool:
    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def from_pretrained(
    where: str | Path, dtype: torch.dtype, device: str, **options
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) from a folder or hub id, as transformers' `from_pretrained` reads it with `options`
    (`gguf_file`, `local_files_only`). Remote code is never run."""
    tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=False, **options)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, trust_remote_code=False, **options)
    return model.to(device), tokenizer


def make_pair(draft, target, draft_tokenizer, target_tokenizer, draft_name: str, target_name: str, note: str = "") -> ModelPair:
    """Pair two loaded transformers models after checking their tokenizers agree."""
    tokenizer = HFTokenizer(target_tokenizer)
    check_same_tokenizer(HFTokenizer(draft_tokenizer), tokenizer)
    vocab_size = min(draft.get_input_embeddings().num_embeddings, target.get_input_embeddings().num_embeddings)
    return ModelPair(
        draft=HFModel(draft.eval(), draft_name, tokenizer.pad_id),
        target=HFModel(target.eval(), target_name, tokenizer.pad_id),
        tokenizer=tokenizer,
        draft_name=draft_name,
        target_name=target_name,
        vocab_size=vocab_size,
        eos_ids=_eos_ids(target, target_tokenizer),
        context_length=min(_context_length(draft), _context_length(target)),
        note=note,
        info={
            "draft_revision": _revision(draft),
            "target_revision": _revision(target),
            "dtype": str(target.dtype),
            "backend": "transformers",
        },
    )


def _eos_ids(model, tokenizer) -> frozenset[int]:
    ids = model.generation_config.eos_token_id if model.generation_config is not None else None
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return frozenset(ids)


def _context_length(model) -> int:
    return int(getattr(model.config, "max_position_embeddings", None) or 2048)


def _revision(model) -> str:
    return str(getattr(model.config, "_commit_hash", None) or "")


def with_int8(pair: ModelPair, which: str) -> ModelPair:
    """Quantize the draft, the target or both to dynamic int8 (CPU only).

    A quantized draft only changes which tokens get proposed: SD still emits exactly the
    target's distribution, just with a different acceptance rate. A quantized target *is* a
    different model, so its outputs differ from the unquantized target's.
    """
    if which not in INT8:
        raise ModelLoadError(f"--int8: must be one of {', '.join(INT8)} (got {which!r})")
    if which == "none":
        return pair
    if pair.backend != "transformers":
        raise ModelLoadError("--int8: quantizes transformers models; llama.cpp runs the GGUF's own quantization")
    if pair.device.type != "cpu":
        raise ModelLoadError("--int8: dynamic int8 quantization runs on the CPU only; drop --int8 on a GPU")
    draft = _int8(pair.draft) if which in ("draft", "both") else pair.draft
    target = _int8(pair.target) if which in ("target", "both") else pair.target
    names = {
        "draft_name": pair.draft_name + (" [int8]" if draft is not pair.draft else ""),
        "target_name": pair.target_name + (" [int8]" if target is not pair.target else ""),
    }
    return dataclasses.replace(pair, draft=draft, target=target, info={**pair.info, "int8": which}, **names)


def _int8(model: HFModel) -> HFModel:
    """Every Linear layer to int8 weights with float32 activations (what quantize_dynamic supports)."""
    with warnings.catch_warnings():  # torch warns that the quantized tensor API will move; it works in 2.13
        warnings.simplefilter("ignore")
        module = torch.ao.quantization.quantize_dynamic(model.module.float(), {torch.nn.Linear}, dtype=torch.qint8)
    return HFModel(module, model.name + " [int8]", model.pad_id)
