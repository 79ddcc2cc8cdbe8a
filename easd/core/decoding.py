"""The decoding loop: target-only, draft-only, SD and EASD for B ≥ 1 rows at once, streamed block by block.

Layers, bottom-up (as in gpt-fast's generate.py):
  KVSlots.logits   one forward pass over the tokens each row's cache has not seen (easd/core/kv.py)
  judge_block      pure decision for one row's block, given q_1..q_k and p_1..p_{k+1}
  Batch._draft     every drafting row proposes c_1..c_k: one draft pass per drafted position, all rows in it
  Batch._step      draft, ONE target pass for all rows, judge each row, roll its caches back
  Batch            rows join and leave at block boundaries; blocks are streamed, each naming its row
  Generation       one row: prompt checks, its own random numbers, stop handling, its trace

A row is decoded exactly as if it ran alone: it has its own random generator, drawn in the same
order as a solo run, its own settings (method, rule, thresholds, k, sampling, length), and the
batch only shares the forward passes. A Generation iterated on its own is a batch of one.
SD and EASD share every line but one: in `judge_block`, EASD also ends the block where the rule
fires on a token the standard test accepted.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch

from ..errors import SettingsError
from . import acceptance as acc
from .kv import KVSlots, RowKV, prefill
from .pair import ModelPair
from .settings import DecodeSettings
from .trace import BlockInfo, RunStats, TokenRecord, Trace, software_versions

MAX_PROMPT_CHARS_PER_TOKEN = 32  # a prompt longer than this × context cannot fit; refuse before tokenizing
SPECULATIVE = ("sd", "easd")


# --- what a block produced ------------------------------------------------------------------------


@dataclass
class Block:
    """One round of the loop, as streamed to a UI: the drafts and the tokens emitted."""

    index: int
    drafted: list[int]  # c_1..c_k proposed by the draft (empty for single-model runs)
    records: list[TokenRecord]  # the tokens emitted, in order
    end: str  # rejected | penalty | bonus | single (a single-model step)
    generation: Generation | None = None  # the row it belongs to


BLOCK_END = {"target_resample": "rejected", "easd_penalty": "penalty", "bonus": "bonus"}
# trace column -> acceptance.Margins field
MARGIN_FIELDS = {
    "h_draft_margin": "h_draft",
    "h_target_margin": "h_target",
    "draft_gap": "draft_gap",
    "target_gap": "target_gap",
    "overlap_swap": "overlap_swap",
    "h_draft_tol": "h_draft_tol",
    "h_target_tol": "h_target_tol",
    "overlap_low": "overlap_low",
    "overlap_high": "overlap_high",
    "fragile": "fragile",
}


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
    margins: acc.Margins  # [k] each: how far the rule's decision was from flipping


def judge_block(
    draft_logits: torch.Tensor,  # [k, V] q_1..q_k
    target_logits: torch.Tensor,  # [k+1, V] p_1..p_{k+1}
    drafted: torch.Tensor,  # [k] c_1..c_k
    settings: DecodeSettings,
    generator: torch.Generator | None,
    rounding: acc.Rounding = acc.EXACT,  # the models' precision, for the margins' fragile flag
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
    rule = {"rule": settings.rule, "tau_h": settings.tau_h, "tau_o": settings.tau_o, "top_n": settings.top_n}
    triggered = acc.rule_fires(h_draft=h_draft, h_target=h_target[:k], overlap=overlap, **rule)
    margins = acc.decision_margins(draft_logits, target_logits[:k], h_draft, h_target[:k], overlap, rounding=rounding, **rule)
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
    return Verdict(n, token, origin, accept_prob, q_probs, p_probs, h_draft, h_target, overlap, triggered, margins)


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
        margins = {name: getattr(verdict.margins, name)[:examined].tolist() for name in MARGIN_FIELDS.values()}
        for name in ("overlap_low", "overlap_high"):  # counts, stored as fractions of n like `overlap`
            margins[name] = [count / self.settings.top_n for count in margins[name]]
        for i in range(examined):
            record = records[i]
            record.draft_token_id, record.draft_token_text = drafted[i], self.text(drafted[i])
            record.p_draft, record.p_target, record.accept_prob = p_draft[i], p_target[i], accept_prob[i]
            record.h_draft, record.overlap, record.triggered = h_draft[i], overlap[i] / self.settings.top_n, triggered[i]
            record.draft_top = q_top[i]
            for column, name in MARGIN_FIELDS.items():
                setattr(record, column, margins[name][i])
        return records

    def single_record(self, block: int, position: int, token: int, logits: torch.Tensor) -> TokenRecord:
        method = self.settings.method
        record = TokenRecord(position, block, token, self.text(token), method)
        # a target run fills the target's columns (h_target, target_top), a draft run the draft's
        probs = acc.raw_probs(logits)
        setattr(record, f"h_{method}", float(acc.entropy_of_probs(probs)[0]))
        setattr(record, f"{method}_top", self.top(probs)[0])
        return record


# --- one row --------------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    """The state of a row as a block starts: enough to start another run there (see `resume_at`)."""

    block: int
    position: int  # tokens generated before this block
    draft_seen: int  # the row's tokens in the draft's cache as the block starts
    target_seen: int  # the row's tokens in the target's cache
    rng_state: torch.Tensor
    seconds: float
    target_calls: int
    draft_calls: int


@dataclass(eq=False)  # a row is itself: two runs with the same prompt and settings are still two rows
class Generation:
    """One run (one row of a batch). Iterate it for its Blocks; `trace` holds what was emitted so far.

    Stop it at any time with `stop()` (from any thread) or by leaving the loop: the trace keeps
    every token emitted before that. `keep_kv` keeps the row's caches when it ends, so that other
    runs can start from its checkpoints (`resume_at`, used by easd.core.prefix).
    """

    pair: ModelPair
    prompt: str
    settings: DecodeSettings
    chat: bool = True
    use_cache: bool = True  # False recomputes every pass from the first token (tests compare both)
    keep_kv: bool = False
    trace: Trace = field(init=False)
    checkpoints: list[Checkpoint] = field(init=False, default_factory=list)  # one per block started
    first_block: int = field(init=False, default=0)

    def __post_init__(self):
        self.settings.validate()
        self.prompt_ids = encode_prompt(self.pair, self.prompt, self.chat)
        self.prompt_length = len(self.prompt_ids)
        self.tokens = list(self.prompt_ids)
        self.generator = torch.Generator(device=self.pair.device).manual_seed(self.settings.seed)
        self.recorder = Recorder(self.pair, self.settings)
        self.trace = Trace(
            self.settings,
            self.pair.draft_name,
            self.pair.target_name,
            prompt=self.prompt,
            info={**self.pair.info, **software_versions()},
        )
        self.trace.stats = RunStats(
            prompt_tokens=self.prompt_length, seconds=0.0, target_calls=0, draft_calls=0, stop_reason="stopped"
        )
        self.start_kv: tuple[RowKV | None, RowKV | None] | None = None  # (draft, target) caches to start from
        self.final_kv: tuple[RowKV | None, RowKV | None] | None = None  # kept when the row ends, if keep_kv
        self.done = False
        self._stop = threading.Event()

    @property
    def uses_draft(self) -> bool:
        return self.settings.method != "target"

    @property
    def uses_target(self) -> bool:
        return self.settings.method != "draft"

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def room(self) -> int:
        """How many more tokens this run may emit (max_new_tokens and the context both count)."""
        generated = len(self.tokens) - self.prompt_length
        return min(self.settings.max_new_tokens - generated, self.pair.context_length - len(self.tokens))

    def __iter__(self) -> Iterator[Block]:
        return iter(Batch(self.pair, [self], use_cache=self.use_cache))

    def run(self) -> Trace:
        """Decode to the end and return the trace."""
        for _ in self:
            pass
        return self.trace

    def resume_at(self, checkpoint: Checkpoint, settings: DecodeSettings) -> Generation:
        """A new run with other settings that starts where this one (finished, with keep_kv) started `checkpoint.block`.

        It takes this run's tokens and records before that block, its KV caches as they were
        then, its random state, and its counts and time so far. Where the two settings make the
        same decisions up to that block (SD and EASD before EASD's first penalty), the result
        equals a run from scratch without decoding the shared prefix again. (A fresh prefill of
        the prefix would not: in bfloat16 it rounds differently from the block-by-block cache,
        enough to move an entropy across τ_H.) The copied records keep this run's `triggered`;
        `easd.core.prefix` recomputes it for other rules.
        """
        if self.final_kv is None:
            raise ValueError("resume_at needs a finished run that kept its caches (Generation(..., keep_kv=True))")
        resumed = Generation(self.pair, self.prompt, settings, chat=self.chat, use_cache=self.use_cache)
        shared = checkpoint.position
        resumed.tokens.extend(self.tokens[self.prompt_length : self.prompt_length + shared])
        resumed.trace.records = [dataclasses.replace(r) for r in self.trace.records[:shared]]
        resumed.trace.blocks = [dataclasses.replace(b) for b in self.trace.blocks if b.index < checkpoint.block]
        draft_kv, target_kv = self.final_kv
        resumed.start_kv = (_first(draft_kv, checkpoint.draft_seen), _first(target_kv, checkpoint.target_seen))
        resumed.generator.set_state(checkpoint.rng_state)
        resumed.first_block = checkpoint.block
        stats = resumed.trace.stats
        stats.seconds, stats.target_calls, stats.draft_calls = checkpoint.seconds, checkpoint.target_calls, checkpoint.draft_calls
        return resumed

    def _finish_reason(self) -> str | None:
        """Why this row ends after its latest block, or None while it goes on."""
        if self.trace.records and self.trace.records[-1].token_id in self.pair.eos_ids:
            return "eos"
        if self.room() < 1:
            generated = len(self.tokens) - self.prompt_length
            return "max_new_tokens" if generated >= self.settings.max_new_tokens else "context"
        return "stopped" if self.stopped else None


def _first(kv: RowKV | None, length: int) -> RowKV | None:
    return None if kv is None or length == 0 else [(k[:, :, :length], v[:, :, :length]) for k, v in kv]


# --- the batch ------------------------------------------------------------------------------------


class Batch:
    """Rows decoded together: per step, one draft pass per drafted position and ONE target pass for all rows.

    Rows wait in line until a slot is free (`max_rows`), join at a block boundary with their
    prefix computed alone, and leave as soon as they end (EOS, their max_new_tokens, the context,
    or `stop()`), so the batch never waits for its slowest row. Iterate for Blocks; each names its
    row in `block.generation`. `add()` may be called from another thread while iterating.
    """

    def __init__(
        self,
        pair: ModelPair,
        generations: Iterable[Generation] = (),
        max_rows: int | None = None,
        use_cache: bool = True,
        at_boundary: Callable[[Batch], None] | None = None,
    ):
        if max_rows is not None and max_rows < 1:
            raise SettingsError("--batch-size", f"must be ≥ 1 (got {max_rows})")
        self.pair = pair
        self.max_rows = max_rows
        self.at_boundary = at_boundary  # called between steps, when every block so far has been yielded (a scheduler's hook)
        self.rows: list[Generation] = []  # row i of both caches
        self.waiting: deque[Generation] = deque(generations)
        pad = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else 0
        self.draft = KVSlots(pair.draft, pair.vocab_size, pad, use_cache)
        self.target = KVSlots(pair.target, pair.vocab_size, pad, use_cache)
        self.rounding = pair.rounding  # the models' precision, once: the pair is read-only
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def add(self, generation: Generation, first: bool = False) -> None:
        """Put a row in line (at its head with `first`); it joins at the next block boundary with a free slot."""
        with self._lock:
            if first:
                self.waiting.appendleft(generation)
            else:
                self.waiting.append(generation)

    @property
    def load(self) -> int:
        """Rows still decoding or waiting to join."""
        return sum(not g.done for g in self.rows) + len(self.waiting)

    def stop(self) -> None:
        """Stop every row, running or waiting, at the next block boundary."""
        self._stop.set()

    def __iter__(self) -> Iterator[Block]:
        try:
            while not self._stop.is_set():
                if self.at_boundary is not None:
                    self.at_boundary(self)
                self._leave([g for g in self.rows if g.stopped])
                self._join()
                if not self.rows:
                    return
                yield from self._step()
                self._leave([g for g in self.rows if g.done])
        finally:
            for generation in self.rows + list(self.waiting):
                generation.done = True  # a run left unfinished keeps stop_reason "stopped"

    def run(self) -> list[Trace]:
        """Decode every row to the end; the traces in the order the rows were given."""
        everyone = list(self.waiting) + self.rows
        for _ in self:
            pass
        return [g.trace for g in everyone]

    # --- rows joining and leaving ---------------------------------------------------------------

    def _join(self) -> None:
        while self.waiting and (self.max_rows is None or len(self.rows) < self.max_rows):
            with self._lock:
                generation = self.waiting.popleft()
            if generation.stopped:
                generation.done = True
                continue
            started = time.perf_counter()
            draft_kv, target_kv = generation.start_kv or (
                prefill(self.pair.draft, generation.tokens[:-1]) if generation.uses_draft and self.draft.use_cache else None,
                prefill(self.pair.target, generation.tokens[:-1]) if generation.uses_target and self.target.use_cache else None,
            )
            self.draft.add_row(draft_kv)
            self.target.add_row(target_kv)
            generation.start_kv = None
            generation.trace.stats.seconds += time.perf_counter() - started
            self.rows.append(generation)

    def _leave(self, leaving: list[Generation]) -> None:
        if not leaving:
            return
        for generation in leaving:
            generation.done = True
        staying = [i for i, g in enumerate(self.rows) if g not in leaving]
        self.draft.keep_rows(staying)
        self.target.keep_rows(staying)
        self.rows = [self.rows[i] for i in staying]

    # --- one step: a block for every row ----------------------------------------------------------

    def _step(self) -> list[Block]:
        started = time.perf_counter()
        for row, generation in enumerate(self.rows):
            self._checkpoint(row, generation)
        ks = {row: min(g.settings.k, g.room() - 1) for row, g in enumerate(self.rows) if g.settings.method in SPECULATIVE}
        precise = {row for row, g in enumerate(self.rows) if g.settings.signals == "float32"}  # float32 lm_head rows
        drafted, q_logits, draft_only = self._draft(ks, precise)
        sequences = {row: g.tokens + drafted.get(row, []) for row, g in enumerate(self.rows) if g.uses_target}
        last = {row: ks.get(row, 0) + 1 for row in sequences}
        p_logits = self.target.logits(sequences, last, precise) if sequences else {}
        blocks = []
        for row, generation in enumerate(self.rows):
            index, position = self._block_index(generation), len(generation.tokens) - generation.prompt_length
            if row in ks:  # p_logits[row]: [k+1, V], the one target call of this block
                verdict = judge_block(
                    q_logits[row],
                    p_logits[row],
                    torch.tensor(drafted[row], dtype=torch.long, device=p_logits[row].device),
                    generation.settings,
                    generation.generator,
                    self.rounding,
                )
                records = generation.recorder.block_records(index, position, drafted[row], verdict)
                end = BLOCK_END[verdict.origin]
            else:
                logits = p_logits[row] if generation.uses_target else draft_only[row]  # [1, V]
                settings = generation.settings
                token = int(
                    acc.draw(
                        acc.sampling_probs(logits, settings.temperature, settings.top_p), generation.generator, settings.greedy
                    )
                )
                records = [generation.recorder.single_record(index, position, token, logits)]
                end = "single"
            generation.tokens.extend(r.token_id for r in records)
            self.target.truncate(row, len(generation.tokens) - 1)
            self.draft.truncate(row, len(generation.tokens) - 1)
            blocks.append(Block(index, drafted.get(row, []), records, end, generation))
        self.draft.tidy()
        self.target.tidy()
        seconds = time.perf_counter() - started  # every row waited for the whole step: its honest wall time
        for row, block in enumerate(blocks):
            generation = block.generation
            self._record(
                block,
                seconds,
                target_call=generation.uses_target,
                draft_calls=len(block.drafted) + (generation.settings.method == "draft"),
            )
            if generation.done and generation.keep_kv:  # taken before the row leaves: other runs may start from it
                generation.final_kv = (_row_kv(self.draft, row), _row_kv(self.target, row))
        return blocks

    def _draft(
        self, ks: dict[int, int], precise: set[int]
    ) -> tuple[dict[int, list[int]], dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        """Every speculative row proposes its k tokens; draft-only rows take their one step in the first pass.

        -> (c_1..c_k per row, q logits [k, V] per row, draft-only logits [1, V] per row)
        """
        draft_only = [row for row, g in enumerate(self.rows) if g.settings.method == "draft"]
        drafted = {row: [] for row in ks}
        logits = {row: [] for row in ks}
        single = {}
        passes = max([*ks.values(), 1 if draft_only else 0])
        for i in range(passes):
            sequences = {row: self.rows[row].tokens + drafted[row] for row, k in ks.items() if k > i}
            if i == 0:
                sequences |= {row: self.rows[row].tokens for row in draft_only}
            out = self.draft.logits(sequences, dict.fromkeys(sequences, 1), precise)  # {row: [1, V]}
            for row, step_logits in out.items():
                if row not in ks:
                    single[row] = step_logits
                    continue
                settings, generator = self.rows[row].settings, self.rows[row].generator
                probs = acc.sampling_probs(step_logits, settings.temperature, settings.top_p)
                drafted[row].append(int(acc.draw(probs, generator, settings.greedy)))
                logits[row].append(step_logits)
        empty = torch.empty(0, self.pair.vocab_size, device=self.pair.device)  # k = 0: the block is just the target's token
        return drafted, {row: torch.cat(steps) if steps else empty for row, steps in logits.items()}, single

    def _block_index(self, generation: Generation) -> int:
        return generation.checkpoints[-1].block

    def _checkpoint(self, row: int, generation: Generation) -> None:
        stats = generation.trace.stats
        generation.checkpoints.append(
            Checkpoint(
                generation.first_block + len(generation.checkpoints),
                len(generation.tokens) - generation.prompt_length,
                self.draft.length(row),
                self.target.length(row),
                generation.generator.get_state(),
                stats.seconds,
                stats.target_calls,
                stats.draft_calls,
            )
        )

    def _record(self, block: Block, seconds: float, target_call: bool, draft_calls: int) -> None:
        """Add a finished block to its row's trace and counts, cut at EOS, and see whether the row ends."""
        generation = block.generation
        stats = generation.trace.stats
        stats.seconds += seconds
        stats.target_calls += target_call
        stats.draft_calls += draft_calls
        block.records = _cut_at_eos(block.records, generation.pair.eos_ids)
        generation.trace.records.extend(block.records)
        if generation.settings.method in SPECULATIVE:
            drafted = [(token, generation.recorder.text(token)) for token in block.drafted]
            generation.trace.blocks.append(BlockInfo(block.index, drafted, block.end))
        reason = generation._finish_reason()
        if reason is not None:
            stats.stop_reason, generation.done = reason, True


def _row_kv(slots: KVSlots, row: int) -> RowKV | None:
    length = slots.length(row)
    return slots.row_kv(row, length) if length else None


def _cut_at_eos(records: list[TokenRecord], eos_ids: frozenset[int]) -> list[TokenRecord]:
    for i, record in enumerate(records):
        if record.token_id in eos_ids:
            return records[: i + 1]
    return records


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
