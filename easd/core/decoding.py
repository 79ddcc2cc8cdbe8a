"""The decoding loop: target-only, draft-only, SD and EASD, streamed block by block.

Layers, bottom-up (as in gpt-fast's generate.py):
  CachedModel.logits   one forward pass over the tokens its KV cache has not seen yet
  draft_tokens         the draft proposes c_1..c_k, one pass each
  judge_block          pure decision for one block, given q_1..q_k and p_1..p_{k+1}
  speculative_blocks   SD and EASD: draft, one target pass, judge, roll caches back
  single_model_blocks  plain autoregressive decoding with one model
  Generation           a run: prompt checks, stop handling, timing, the trace

SD and EASD share every line but one: in `judge_block`, EASD also ends the block where the
rule fires on a token the standard test accepted.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from ..errors import SettingsError
from . import acceptance as acc
from .pair import ModelPair
from .settings import DecodeSettings
from .trace import BlockInfo, RunStats, TokenRecord, Trace, software_versions

MAX_PROMPT_CHARS_PER_TOKEN = 32  # a prompt longer than this × context cannot fit; refuse before tokenizing


# --- one model and its cache ----------------------------------------------------------------------


class CachedModel:
    """A model plus the KV cache of a prefix of the sequence.

    Invariant between blocks: the cache holds every committed token but the last, whose
    logits are computed by the next call. `use_cache=False` recomputes from scratch each
    call; the tests compare both to prove the cache roll-back right.
    """

    def __init__(self, model, vocab_size: int, use_cache: bool = True):
        self.model = model
        self.vocab_size = vocab_size
        self.cache = DynamicCache(config=model.config) if use_cache else None
        self.calls = 0

    @property
    def seen(self) -> int:
        return self.cache.get_seq_length() if self.cache is not None else 0

    @torch.inference_mode()
    def logits(self, tokens: list[int], last: int) -> torch.Tensor:
        """Logits at the last `last` positions of `tokens`, cut to the shared vocabulary.  -> [last, V]"""
        fresh = torch.tensor([tokens[self.seen :]], device=self.model.device)  # [1, T]
        out = self.model(input_ids=fresh, cache=self.cache, use_cache=self.cache is not None, logits_to_keep=last)
        self.calls += 1
        return out.logits[0, -last:, : self.vocab_size].float()

    def rollback(self, length: int) -> None:
        """Forget cached positions from `length` on (rejected drafts)."""
        if self.cache is not None and self.seen > length:
            self.cache.crop(length - self.seen)  # transformers 5: a negative count of positions to drop

    def cache_as_of(self, length: int) -> DynamicCache | None:
        """A copy of the cache as it was when it held `length` positions.

        Committed positions are never recomputed, so cutting today's cache back gives exactly the
        earlier one: bit for bit the numbers a run from scratch would have there.
        """
        if self.cache is None:
            return None
        earlier = copy.deepcopy(self.cache)
        if earlier.get_seq_length() > length:
            earlier.crop(length - earlier.get_seq_length())
        return earlier


# --- what a block produced ------------------------------------------------------------------------


@dataclass
class Block:
    """One round of the loop, as streamed to a UI: the drafts and the tokens emitted."""

    index: int
    drafted: list[int]  # c_1..c_k proposed by the draft (empty for single-model runs)
    records: list[TokenRecord]  # the tokens emitted, in order
    end: str  # rejected | penalty | bonus | single (a single-model step)


BLOCK_END = {"target_resample": "rejected", "easd_penalty": "penalty", "bonus": "bonus"}


@dataclass
class Verdict:
    """The decision for one SD/EASD block: accept drafts [0, n_accepted), then emit `token`."""

    n_accepted: int
    token: int
    origin: str  # target_resample | easd_penalty | bonus
    accept_prob: torch.Tensor  # [k]
    q_probs: torch.Tensor  # [k, V] q at temperature 1 (for the trace)
    p_probs: torch.Tensor  # [k+1, V] p at temperature 1
    h_draft: torch.Tensor  # [k]
    h_target: torch.Tensor  # [k+1]
    overlap: torch.Tensor  # [k] integer counts
    triggered: torch.Tensor  # [k] bool


def judge_block(
    draft_logits: torch.Tensor,  # [k, V] q_1..q_k
    target_logits: torch.Tensor,  # [k+1, V] p_1..p_{k+1}
    drafted: torch.Tensor,  # [k] c_1..c_k
    settings: DecodeSettings,
    generator: torch.Generator | None,
) -> Verdict:
    """Steps 3–4 of one block (README, "The method"). Pure apart from the random numbers it draws."""
    k, T, top_p = len(drafted), settings.temperature, settings.top_p
    p_tilde = acc.sampling_probs(target_logits, T, top_p)  # [k+1, V]
    q_tilde = acc.sampling_probs(draft_logits, T, top_p)  # [k, V]
    accept_prob = acc.accept_probability(p_tilde[:k], q_tilde, drafted)  # [k]
    uniforms = torch.rand(k, generator=generator, device=drafted.device)
    accepted = acc.standard_accept(accept_prob, uniforms)  # [k]

    q_probs, p_probs = acc.raw_probs(draft_logits), acc.raw_probs(target_logits)  # signals use temperature 1
    h_draft, h_target = acc.entropy_of_probs(q_probs), acc.entropy_of_probs(p_probs)
    overlap = acc.overlap_count(draft_logits, target_logits[:k], settings.top_n)
    triggered = acc.rule_fires(
        settings.rule, h_draft, h_target[:k], overlap, tau_h=settings.tau_h, tau_o=settings.tau_o, top_n=settings.top_n
    )
    penalized = accepted & triggered if settings.method == "easd" else torch.zeros_like(accepted)  # the one EASD line

    ends = (~accepted | penalized).nonzero()
    n = int(ends[0]) if len(ends) else k
    if n == k:
        probs, origin = p_tilde[k:], "bonus"
    elif not accepted[n]:
        probs, origin = acc.residual_probs(p_tilde[n : n + 1], q_tilde[n : n + 1]), "target_resample"
    else:
        probs, origin = acc.penalty_probs(target_logits[n : n + 1], drafted[n : n + 1], T, top_p), "easd_penalty"
    token = int(acc.draw(probs, generator, settings.greedy))
    return Verdict(n, token, origin, accept_prob, q_probs, p_probs, h_draft, h_target, overlap, triggered)


# --- the loops --------------------------------------------------------------------------------------


def draft_tokens(
    draft: CachedModel, tokens: list[int], k: int, settings: DecodeSettings, generator
) -> tuple[list[int], torch.Tensor]:
    """The draft proposes k tokens autoregressively.  -> (c_1..c_k, q logits [k, V])"""
    sequence, logits = list(tokens), []
    for _ in range(k):
        step_logits = draft.logits(sequence, last=1)  # [1, V]
        probs = acc.sampling_probs(step_logits, settings.temperature, settings.top_p)
        sequence.append(int(acc.draw(probs, generator, settings.greedy)))
        logits.append(step_logits)
    if not logits:  # k = 0: the block is just the target's token (the run's last one)
        return [], torch.empty(0, draft.vocab_size, device=draft.model.device)
    return sequence[len(tokens) :], torch.cat(logits)


def speculative_blocks(gen: Generation) -> Iterator[Block]:
    """SD and EASD: draft k, one target pass over them, judge, roll both caches back."""
    tokens, settings = gen.tokens, gen.settings
    for index in itertools.count(gen.first_block):
        if gen.room() < 1:
            return
        k = min(settings.k, gen.room() - 1)  # a block emits up to k + 1 tokens
        drafted, q_logits = draft_tokens(gen.draft, tokens, k, settings, gen.generator)
        p_logits = gen.target.logits(tokens + drafted, last=k + 1)  # [k+1, V]: the one target call
        verdict = judge_block(q_logits, p_logits, torch.tensor(drafted, device=p_logits.device), settings, gen.generator)
        records = gen.recorder.block_records(index, len(tokens) - gen.prompt_length, drafted, verdict)
        tokens.extend(r.token_id for r in records)
        gen.target.rollback(len(tokens) - 1)
        gen.draft.rollback(len(tokens) - 1)
        yield Block(index, drafted, records, BLOCK_END[verdict.origin])


def single_model_blocks(gen: Generation) -> Iterator[Block]:
    """Target-only or draft-only: one token per step, drawn from that model's p̃."""
    model = gen.target if gen.settings.method == "target" else gen.draft
    tokens, settings = gen.tokens, gen.settings
    for index in itertools.count(gen.first_block):
        if gen.room() < 1:
            return
        logits = model.logits(tokens, last=1)  # [1, V]
        token = int(acc.draw(acc.sampling_probs(logits, settings.temperature, settings.top_p), gen.generator, settings.greedy))
        record = gen.recorder.single_record(index, len(tokens) - gen.prompt_length, token, logits)
        tokens.append(token)
        yield Block(index, [], [record], "single")


# --- turning decisions into trace records -------------------------------------------------------


class Recorder:
    """Builds TokenRecords: token text, the signals and both top-candidate lists."""

    def __init__(self, pair: ModelPair, settings: DecodeSettings):
        self.settings = settings
        self.tokenizer = pair.tokenizer
        self.texts: dict[int, str] = {}  # decode each token id once

    def text(self, token_id: int) -> str:
        if token_id not in self.texts:
            self.texts[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return self.texts[token_id]

    def top(self, probs: torch.Tensor) -> list[list[tuple[int, str, float]]]:
        """Top candidates per row.  [B, V] -> B lists of (id, text, prob)"""
        probs, ids = probs.topk(self.settings.trace_top, dim=-1)
        return [
            [(i, self.text(i), p) for i, p in zip(row_ids, row_probs)] for row_ids, row_probs in zip(ids.tolist(), probs.tolist())
        ]

    def block_records(self, block: int, start: int, drafted: list[int], verdict: Verdict) -> list[TokenRecord]:
        """Records of one SD/EASD block: n accepted drafts, then the verdict's token."""
        n, k = verdict.n_accepted, len(drafted)
        emitted = drafted[:n] + [verdict.token]
        p_top = self.top(verdict.p_probs[: n + 1])
        records = [
            TokenRecord(
                start + i,
                block,
                token,
                self.text(token),
                "draft_accepted" if i < n else verdict.origin,
                h_target=float(verdict.h_target[i]),
                target_top=p_top[i],
            )
            for i, token in enumerate(emitted)
        ]
        examined = min(n + 1, k)  # drafted positions the test looked at; a bonus token has none
        drafts = torch.tensor(drafted[:examined], device=verdict.q_probs.device)[:, None]  # [m, 1]
        p_draft = verdict.q_probs[:examined].gather(-1, drafts).squeeze(-1).tolist()
        p_target = verdict.p_probs[:examined].gather(-1, drafts).squeeze(-1).tolist()
        q_top = self.top(verdict.q_probs[:examined])
        accept_prob, h_draft, overlap, triggered = (
            t[:examined].tolist() for t in (verdict.accept_prob, verdict.h_draft, verdict.overlap, verdict.triggered)
        )
        for i in range(examined):
            record = records[i]
            record.draft_token_id, record.draft_token_text = drafted[i], self.text(drafted[i])
            record.p_draft, record.p_target, record.accept_prob = p_draft[i], p_target[i], accept_prob[i]
            record.h_draft, record.overlap, record.triggered = h_draft[i], overlap[i] / self.settings.top_n, triggered[i]
            record.draft_top = q_top[i]
        return records

    def single_record(self, block: int, position: int, token: int, logits: torch.Tensor) -> TokenRecord:
        method = self.settings.method
        record = TokenRecord(position, block, token, self.text(token), method)
        # a target run fills the target's columns (h_target, target_top), a draft run the draft's
        probs = acc.raw_probs(logits)
        setattr(record, f"h_{method}", float(acc.entropy_of_probs(probs)[0]))
        setattr(record, f"{method}_top", self.top(probs)[0])
        return record


# --- a run ----------------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    """The state of a run as a block starts: enough to start another run there (see `resume_at`)."""

    block: int
    position: int  # tokens generated before this block
    draft_seen: int  # positions in the draft's cache as the block starts
    target_seen: int  # positions in the target's cache
    rng_state: torch.Tensor
    seconds: float
    target_calls: int
    draft_calls: int


@dataclass
class Generation:
    """One run. Iterate it for Blocks as they are decoded; `trace` holds what was emitted so far.

    Stop it at any time with `stop()` (from any thread) or by leaving the loop: the trace
    keeps every token emitted before that.
    """

    pair: ModelPair
    prompt: str
    settings: DecodeSettings
    chat: bool = True
    use_cache: bool = True
    trace: Trace = field(init=False)
    checkpoints: list[Checkpoint] = field(init=False, default_factory=list)  # one per block started
    first_block: int = field(init=False, default=0)

    def __post_init__(self):
        self.settings.validate()
        self.prompt_ids = encode_prompt(self.pair, self.prompt, self.chat)
        self.prompt_length = len(self.prompt_ids)
        self.tokens = list(self.prompt_ids)
        self.draft = CachedModel(self.pair.draft, self.pair.vocab_size, self.use_cache)
        self.target = CachedModel(self.pair.target, self.pair.vocab_size, self.use_cache)
        self.generator = torch.Generator(device=self.pair.device).manual_seed(self.settings.seed)
        self.recorder = Recorder(self.pair, self.settings)
        self.trace = Trace(
            self.settings,
            self.pair.draft_name,
            self.pair.target_name,
            prompt=self.prompt,
            info={**self.pair.info, **software_versions()},
        )
        self.trace.stats = RunStats(prompt_tokens=self.prompt_length, seconds=0.0, target_calls=0, draft_calls=0)
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def room(self) -> int:
        """How many more tokens this run may emit (max_new_tokens and the context both count)."""
        generated = len(self.tokens) - self.prompt_length
        return min(self.settings.max_new_tokens - generated, self.pair.context_length - len(self.tokens))

    def __iter__(self) -> Iterator[Block]:
        blocks = single_model_blocks(self) if self.settings.method in ("target", "draft") else speculative_blocks(self)
        stats = self.trace.stats
        stats.stop_reason = "stopped"
        try:
            while not self._stop.is_set():
                self._checkpoint()
                started = time.perf_counter()
                block = next(blocks, None)
                stats.seconds += time.perf_counter() - started  # engine time only, not the consumer's
                stats.target_calls, stats.draft_calls = self.target.calls, self.draft.calls
                if block is None:
                    stats.stop_reason = self._finish_reason()
                    return
                block.records = self._cut_at_eos(block.records)
                self.trace.records.extend(block.records)
                if self.settings.method in ("sd", "easd"):
                    drafted = [(token, self.recorder.text(token)) for token in block.drafted]
                    self.trace.blocks.append(BlockInfo(block.index, drafted, block.end))
                yield block
                if self.trace.records and self.trace.records[-1].token_id in self.pair.eos_ids:
                    stats.stop_reason = "eos"
                    return
        finally:
            blocks.close()

    def run(self) -> Trace:
        """Decode to the end and return the trace."""
        for _ in self:
            pass
        return self.trace

    def _checkpoint(self) -> None:
        stats = self.trace.stats
        self.checkpoints.append(
            Checkpoint(
                self.first_block + len(self.checkpoints),
                len(self.tokens) - self.prompt_length,
                self.draft.seen,
                self.target.seen,
                self.generator.get_state(),
                stats.seconds,
                self.target.calls,
                self.draft.calls,
            )
        )

    def resume_at(self, checkpoint: Checkpoint, settings: DecodeSettings) -> Generation:
        """A new run with other settings that starts where this one started `checkpoint.block`.

        It takes this run's tokens and records before that block, its KV caches as they were
        then, its random state, and its counts and time so far. Where the two settings make the
        same decisions up to that block (SD and EASD before EASD's first penalty), the result
        equals a run from scratch, bit for bit, without decoding the shared prefix again. (A fresh
        prefill of the prefix would not: in bfloat16 it rounds differently from the block-by-block
        cache, enough to move an entropy across τ_H.) The copied records keep this run's
        `triggered`; `easd.prefix` recomputes it for other rules.
        """
        resumed = Generation(self.pair, self.prompt, settings, chat=self.chat, use_cache=self.use_cache)
        shared = checkpoint.position
        resumed.tokens.extend(self.tokens[self.prompt_length : self.prompt_length + shared])
        resumed.trace.records = [dataclasses.replace(r) for r in self.trace.records[:shared]]
        resumed.trace.blocks = [dataclasses.replace(b) for b in self.trace.blocks if b.index < checkpoint.block]
        resumed.draft.cache = self.draft.cache_as_of(checkpoint.draft_seen)
        resumed.target.cache = self.target.cache_as_of(checkpoint.target_seen)
        resumed.generator.set_state(checkpoint.rng_state)
        resumed.first_block = checkpoint.block
        resumed.trace.stats.seconds = checkpoint.seconds
        resumed.target.calls, resumed.draft.calls = checkpoint.target_calls, checkpoint.draft_calls
        return resumed

    def _cut_at_eos(self, records: list[TokenRecord]) -> list[TokenRecord]:
        for i, record in enumerate(records):
            if record.token_id in self.pair.eos_ids:
                return records[: i + 1]
        return records

    def _finish_reason(self) -> str:
        generated = len(self.tokens) - self.prompt_length
        return "max_new_tokens" if generated >= self.settings.max_new_tokens else "context"


def encode_prompt(pair: ModelPair, prompt: str, chat: bool) -> list[int]:
    """Token ids of the prompt, through the chat template when asked and when there is one."""
    if not prompt or not prompt.strip():
        raise SettingsError("prompt", "is empty; give the text the models should continue or answer")
    if len(prompt) > pair.context_length * MAX_PROMPT_CHARS_PER_TOKEN:
        raise SettingsError(
            "prompt", f"is {len(prompt):,} characters, more than the model's context of {pair.context_length:,} tokens can hold"
        )
    tokenizer = pair.tokenizer
    if chat and tokenizer.chat_template:
        messages = [{"role": "user", "content": prompt}]
        ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
    else:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if len(ids) >= pair.context_length:
        raise SettingsError(
            "prompt", f"is {len(ids):,} tokens; the model's context is {pair.context_length:,} tokens, so shorten it"
        )
    return ids
