"""The decoding loop: target-only, draft-only, SD, EASD, MTI and RSD for B ≥ 1 rows at once, streamed block by block.

Layers, bottom-up (as in gpt-fast's generate.py):
  Caches.logits    one forward pass over the tokens each row's cache has not seen (easd/method/seam.py)
  judge_block      pure decision for one row's block, given q_1..q_k and p_1..p_{k+1}
  Batch._step      plan, draft, verify, judge, commit: a block for every row
    _draft         every drafting row proposes c_1..c_k: one draft pass per drafted position, all rows in it
    _verify        ONE target pass for all rows
    _guide         MTI rows whose target is unsure: ONE more target pass, after the negative prompt
    _score         RSD rows whose draft wrote a segment: the process reward model's reward for it
    _judge         each row's verdict, alone: a row whose numbers fail ends, the others go on
  Batch            steps its rows and streams the blocks, each naming its generation; generations join and
                   leave at block boundaries (easd.method.rows: the line, joining, long prompts in pieces)
  Generation       one generation: prompt checks, its own random numbers, stop handling, its trace

Words, used in one sense each (as vLLM keeps a request apart from its index in the batch):
  generation       one prompt decoded under one DecodeSettings: a `Generation`. Its record is its
                   `Trace`, which users, files and the app call a run.
  row              the slot a generation holds in its batch's caches while it decodes: an index 0..B-1.
  block            one round of a generation: drafts judged, tokens emitted (`Block`).
  step             one round of the batch: a block for every generation in it.
  segment          what RSD's paper calls a reasoning step: text up to its delimiter (rsd.py), never a step.

A generation is decoded exactly as if it ran alone: it has its own random generator, drawn in the
same order as a solo run, its own settings (method, rule, thresholds, k, sampling, length), and the
batch only shares the forward passes. A Generation iterated on its own is a batch of one.
SD and EASD share every line but one: in `judge_block`, EASD also ends the block where the rule
fires on a token the standard test accepted. MTI is target-only but for `_guide` (mti.py); an RSD row is
draft-only for a whole segment, which `_score` keeps or hands to the target, target-only for a segment written
again (rsd.py; docs/method.md, "The paper's baselines").
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ..errors import EasdError, SettingsError
from . import acceptance as acc
from . import mti
from .methods import METHODS
from .pair import ModelPair
from .rows import Rows, Start
from .rsd import Segments
from .seam import Caches, RowState
from .settings import DecodeSettings
from .trace import MARGIN_COLUMNS, BlockInfo, RunStats, TokenRecord, Trace, software_versions

MAX_PROMPT_CHARS_PER_TOKEN = 32  # a prompt longer than this × context cannot fit; refuse before tokenizing
log = logging.getLogger("easd.decoding")


class RowFailure(EasdError):
    """One row's numbers went wrong (non-finite logits or probabilities): that row ends, the batch goes on."""


# --- what a block produced ------------------------------------------------------------------------


@dataclass
class Block:
    """One round of the loop, as streamed to a UI: the drafts and the tokens emitted."""

    index: int
    drafted: list[int]  # c_1..c_k proposed by the draft (empty for single-model runs)
    records: list[TokenRecord]  # the tokens emitted, in order
    end: str  # the origin of the token that ended it: target_resample | easd_penalty | bonus, or target | draft (one model)
    generation: Generation | None = None  # the generation it belongs to


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
    """Steps 3–4 of one block (docs/method.md, "The method"). Pure apart from the random numbers it draws."""
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
            self.texts[token_id] = self.tokenizer.text(token_id)
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
        margins = {name: getattr(verdict.margins, name)[:examined].tolist() for name in MARGIN_COLUMNS}
        for name in ("overlap_low", "overlap_high"):  # counts, stored as fractions of n like `overlap`
            margins[name] = [count / self.settings.top_n for count in margins[name]]
        for i in range(examined):
            record = records[i]
            record.draft_token_id, record.draft_token_text = drafted[i], self.text(drafted[i])
            record.p_draft, record.p_target, record.accept_prob = p_draft[i], p_target[i], accept_prob[i]
            record.h_draft, record.overlap, record.triggered = h_draft[i], overlap[i] / self.settings.top_n, triggered[i]
            record.draft_top = q_top[i]
            for name in MARGIN_COLUMNS:
                setattr(record, name, margins[name][i])
        return records

    def single_record(
        self,
        block: int,
        position: int,
        token: int,
        logits: torch.Tensor,
        guided: torch.Tensor | None = None,
        model: str | None = None,
    ) -> TokenRecord:
        """The record of a one-model token (`model`'s: by default the method's one model); `guided` are MTI's guided
        logits where it intervened.  logits: [1, V]"""
        model = model or METHODS[self.settings.method].one_model or "target"
        record = TokenRecord(position, block, token, self.text(token), model)
        # a draft run fills the draft's columns (h_draft, draft_top), the others the target's
        probs = acc.raw_probs(logits)
        setattr(record, f"h_{model}", float(acc.entropy_of_probs(probs)[0]))
        setattr(record, f"{model}_top", self.top(probs)[0])
        if guided is not None:
            record.origin = "mti_guided"
            record.guided_top = self.top(acc.raw_probs(guided))[0]
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
    stats: RunStats  # its time and passes so far


@dataclass(frozen=True)
class GenerationSnapshot:
    """A generation paused between two blocks: what a fresh process (a ZeroGPU call, easd.serving.chunks) or a run
    with other settings from one of its checkpoints (`Generation.resume_at`) needs to go on from there. The one way
    a generation resumes: `resume`."""

    prompt: str
    chat: bool
    settings: DecodeSettings
    generated: tuple[int, ...]  # the tokens emitted so far
    next_block: int  # the number its next block gets
    rng_state: torch.Tensor | None  # its random generator's state (a CPU tensor); None: its seed's
    stats: RunStats  # its time and passes so far, which the next chunk goes on counting
    segments: Segments | None = None  # an RSD generation's segments so far
    question: str | None = None  # as `Generation.question`
    system: str = ""
    use_cache: bool = True

    @classmethod
    def of(cls, generation: Generation) -> GenerationSnapshot:
        return cls(
            generation.prompt,
            generation.chat,
            generation.settings,
            tuple(generation.tokens[generation.prompt_length :]),
            generation.first_block + len(generation.checkpoints),
            generation.rng_state(),
            dataclasses.replace(generation.trace.stats),
            None if generation.segments is None else generation.segments.copy(),
            generation.question,
            generation.system,
            generation.use_cache,
        )

    def resume(self, pair: ModelPair) -> Generation:
        """The generation again on `pair`, ready to join a batch where it left off."""
        generation = Generation(
            pair, self.prompt, self.settings, self.chat, self.use_cache, question=self.question, system=self.system
        )
        generation.tokens.extend(self.generated)
        generation.first_block = self.next_block
        if self.rng_state is not None:
            generation.generator.set_state(self.rng_state)
        generation.trace.stats = dataclasses.replace(self.stats)
        if self.segments is not None:
            generation.segments = self.segments.copy()
        return generation


@dataclass(eq=False)  # a generation is itself: two with the same prompt and settings are still two
class Generation:
    """One generation (one row of a batch while it decodes). Iterate it for its Blocks; `trace` holds what
    was emitted so far.

    Stop it at any time with `stop()` (from any thread) or by leaving the loop: the trace keeps
    every token emitted before that. `keep_kv` keeps a copy of its caches when it ends, so that other
    generations can start from its checkpoints (`resume_at`, used by easd.method.prefix).
    """

    pair: ModelPair
    prompt: str
    settings: DecodeSettings
    chat: bool = True
    use_cache: bool = True  # False recomputes every pass from the first token (tests compare both)
    keep_kv: bool = False
    question: str | None = None  # what RSD's PRM reads as the question: the bare problem, without our instruction
    system: str = ""  # a system prompt for the chat template ("" for none), as the Qwen2.5-Math evaluation's
    trace: Trace = field(init=False)
    checkpoints: list[Checkpoint] = field(init=False, default_factory=list)  # one per block started
    first_block: int = field(init=False, default=0)
    done: bool = field(init=False, default=False)  # it has ended; set by `finish` only

    def __post_init__(self):
        self.settings.validate()
        self.prompt_ids = encode_prompt(self.pair, self.prompt, self.chat, self.system)
        self.prompt_length = len(self.prompt_ids)
        self.negative_ids = mti.negative_prompt(self.pair, self.settings, self.prompt_length)  # MTI's; [] for other methods
        self.tokens = list(self.prompt_ids)
        self.recorder = Recorder(self.pair, self.settings)
        self.trace = Trace(
            self.settings,
            self.pair.draft_name,
            self.pair.target_name,
            prompt=self.prompt,
            system=self.system,
            info={**self.pair.info, **software_versions()},
        )
        self.trace.stats = RunStats(
            prompt_tokens=self.prompt_length,
            seconds=0.0,
            target_calls=0,
            draft_calls=0,
            target_seconds=0.0,
            draft_seconds=0.0,
            target_rows=0,
            draft_rows=0,
            stop_reason="stopped",
        )
        self.start: Start | None = None  # the cache states a resumed generation joins with (see resume_at)
        self.final: tuple[RowState | None, RowState | None] | None = None  # kept when it ends, if keep_kv
        self.segments = Segments(start=self.prompt_length) if METHODS[self.settings.method].needs_prm else None  # RSD's
        if self.segments is not None and self.pair.prm is None:
            raise SettingsError(
                "prm", "RSD asks a process reward model to score each step, and none is loaded: give one with --prm FOLDER"
            )
        self.error: EasdError | None = None  # why it failed, when its stop reason is "error"
        self.why_stopped = "stopped"  # the stop reason a stopped generation ends with (see `stop`)
        self._stop = threading.Event()

    @functools.cached_property
    def generator(self) -> torch.Generator:
        """Its own random numbers, made on first use: a generation decoded elsewhere (easd.serving.chunks) never
        touches the device here, which on ZeroGPU is only lent inside a call."""
        return torch.Generator(device=self.pair.device).manual_seed(self.settings.seed)

    def rng_state(self) -> torch.Tensor | None:
        """The random generator's state; None while it was never used (it is then its seed's)."""
        return self.generator.get_state() if "generator" in vars(self) else None

    @property
    def uses_draft(self) -> bool:
        return METHODS[self.settings.method].uses_draft

    @property
    def uses_target(self) -> bool:
        return METHODS[self.settings.method].uses_target

    @property
    def speculative(self) -> bool:
        return METHODS[self.settings.method].verifies

    def stop(self, why: str = "stopped") -> None:
        """End it at the next block boundary, with stop reason `why` (one of trace_schema.STOP_REASONS: "stopped" when
        its user asked, "left", "unread", "quota" or "error" when the shared batch ended it, easd.serving.worker). The
        first reason given is the one it ends with: a later call only repeats the stop."""
        if not self._stop.is_set():
            self.why_stopped = why
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def capacity(self) -> int:
        """The most tokens its row of the caches may hold: its prompt, its new tokens (within the context) and a block's
        drafts, or MTI's negative prompt."""
        return (
            min(self.prompt_length + self.settings.max_new_tokens, self.pair.context_length)
            + self.settings.k
            + 1
            + len(self.negative_ids)
        )

    def room(self) -> int:
        """How many more tokens it may emit (max_new_tokens and the context both count; MTI keeps room for its negative prompt)."""
        generated = len(self.tokens) - self.prompt_length
        return min(self.settings.max_new_tokens - generated, self.pair.context_length - len(self.tokens) - len(self.negative_ids))

    def __iter__(self) -> Iterator[Block]:
        return iter(Batch(self.pair, [self], use_cache=self.use_cache))

    def run(self) -> Trace:
        """Decode to the end and return the trace."""
        for _ in self:
            pass
        return self.trace

    def resume_at(self, checkpoint: Checkpoint, settings: DecodeSettings) -> Generation:
        """A new generation with other settings that starts where this one (finished, with keep_kv) started
        `checkpoint.block`.

        It takes this generation's tokens and records before that block, its KV caches as they were
        then, its random state, and its counts and time so far. Where the two settings make the
        same decisions up to that block (SD and EASD before EASD's first penalty), the result
        equals a generation from scratch without decoding the shared prefix again. (A fresh prefill of
        the prefix would not: in bfloat16 it rounds differently from the block-by-block cache,
        enough to move an entropy across τ_H.) The copied records keep this generation's `triggered`;
        `easd.method.prefix` recomputes it for other rules.
        """
        if self.final is None:
            raise ValueError("resume_at needs a finished generation that kept its caches (Generation(..., keep_kv=True))")
        shared = checkpoint.position
        generated = tuple(self.tokens[self.prompt_length : self.prompt_length + shared])
        paused = GenerationSnapshot(
            self.prompt,
            self.chat,
            settings,
            generated,
            checkpoint.block,
            checkpoint.rng_state,
            checkpoint.stats,
            question=self.question,
            system=self.system,
            use_cache=self.use_cache,
        )
        resumed = paused.resume(self.pair)
        resumed.trace.records = [dataclasses.replace(r) for r in self.trace.records[:shared]]
        resumed.trace.blocks = [dataclasses.replace(b) for b in self.trace.blocks if b.index < checkpoint.block]
        resumed.start = Start(*self.final, checkpoint.draft_seen, checkpoint.target_seen)  # its caches, not recomputed
        return resumed

    def take(self, block: Block) -> None:
        """Add a block to the trace: its records, cut after the first end token, and its drafts."""
        block.records = _cut_at_eos(block.records, self.pair.eos_ids)
        self.trace.records.extend(block.records)
        if self.speculative:
            drafted = [(token, self.recorder.text(token)) for token in block.drafted]
            self.trace.blocks.append(BlockInfo(block.index, drafted, block.end))

    def finish(self, reason: str, error: EasdError | None = None) -> None:
        """End it (once): the one place that sets `done`, the stop reason and a failure's error."""
        if self.done:
            return
        self.trace.stats.stop_reason, self.error, self.done = reason, error, True

    def end_reason(self) -> str | None:
        """Why it ends after its latest block, or None while it goes on."""
        if self.trace.records and self.trace.records[-1].token_id in self.pair.eos_ids:
            return "eos"
        if self.room() < 1:
            generated = len(self.tokens) - self.prompt_length
            return "max_new_tokens" if generated >= self.settings.max_new_tokens else "context"
        if self.segments is not None and self.segments.full:
            return "max_steps"
        return self.why_stopped if self.stopped else None


# --- the batch ------------------------------------------------------------------------------------


class Batch:
    """Generations decoded together: per step, one draft pass per drafted position and ONE target pass for all.

    Generations wait in line until a row is free (`max_rows`), join at a block boundary and leave as soon as
    they end (EOS, their max_new_tokens, the context, or `stop()`): easd.method.rows. Iterate for Blocks; each
    names its generation. `add()` may be called from another thread while iterating.
    """

    def __init__(
        self,
        pair: ModelPair,
        generations: Iterable[Generation] = (),
        max_rows: int | None = None,
        use_cache: bool = True,
        at_boundary: Callable[[Batch], None] | None = None,
        prompts_between_steps: bool = False,
    ):
        if max_rows is not None and max_rows < 1:
            raise SettingsError("--batch-size", f"must be ≥ 1 (got {max_rows})")
        self.pair = pair
        limit = min(pair.draft.max_rows, pair.target.max_rows)  # more wait in line, as for `max_rows`
        max_rows = limit if max_rows is None else min(max_rows, limit)
        self.at_boundary = at_boundary  # called between steps, when every block so far has been yielded (a scheduler's hook)
        self.draft: Caches = pair.draft.caches(pair.vocab_size, use_cache)
        self.target: Caches = pair.target.caches(pair.vocab_size, use_cache)
        # who holds which row, and who waits for one; prompts_between_steps: see Rows
        self.rows = Rows(pair, self.draft, self.target, generations, max_rows, use_cache, prompts_between_steps)
        self.rounding = pair.rounding  # the models' precision, once: the pair is read-only
        self._stop = threading.Event()

    def add(self, generation: Generation, first: bool = False) -> None:
        """Put a generation in line (at its head with `first`); it joins at the next block boundary with a free row."""
        self.rows.add(generation, first)

    @property
    def load(self) -> int:
        """Generations still decoding or waiting to join."""
        return self.rows.load

    def stop(self) -> None:
        """Stop every generation, decoding or waiting, at the next block boundary."""
        self._stop.set()

    def __iter__(self) -> Iterator[Block]:
        try:
            while True:
                if self.at_boundary is not None:
                    self.at_boundary(self)
                if self._stop.is_set():  # checked after the boundary too, which may itself stop the batch
                    return
                rows = self.rows
                rows.leave([g for g in rows.generations if g.stopped])
                rows.join()
                if not rows.generations:
                    if rows.waiting:  # the head of the line's prompt is not computed yet
                        continue
                    return
                yield from self._step()
                rows.leave([g for g in rows.generations if g.done])
        finally:
            self.rows.end_all()

    def run(self) -> list[Trace]:
        """Decode every generation to the end; the traces in the order the generations were given."""
        everyone = list(self.rows.waiting) + self.rows.generations
        for _ in self:
            pass
        return [g.trace for g in everyone]

    # --- one step: a block for every generation ----------------------------------------------------------

    def _step(self) -> list[Block]:
        """Plan, draft, verify, judge, commit: one block for every generation (one that fails ends alone)."""
        started = time.perf_counter()
        plans = [self._plan(row, generation) for row, generation in enumerate(self.rows.generations)]
        precise = {plan.row for plan in plans if plan.generation.settings.signals == "float32"}  # float32 lm_head rows
        self._draft(plans, precise)
        self._verify(plans, precise)
        self._guide(plans, precise)
        self._score(plans)
        blocks = [block for block in map(self._judge, plans) if block is not None]
        self._commit(blocks, seconds=time.perf_counter() - started)  # every generation waited for the whole step
        return blocks

    def _plan(self, row: int, generation: Generation) -> RowPlan:
        """What the row does this step; also its checkpoint as the block starts."""
        stats = generation.trace.stats
        block = generation.first_block + len(generation.checkpoints)
        position = len(generation.tokens) - generation.prompt_length
        generation.checkpoints.append(
            Checkpoint(
                block,
                position,
                self.draft.length(row),
                self.target.length(row),
                generation.generator.get_state(),
                dataclasses.replace(stats),
            )
        )
        k = min(generation.settings.k, generation.room() - 1) if generation.speculative else 0
        if generation.segments is not None and generation.segments.writer == "draft":
            k = generation.room()  # the draft writes on until its segment ends (the delimiter, an end token or the room)
        return RowPlan(row, generation, k, block, position)

    def _draft(self, plans: list[RowPlan], precise: set[int]) -> None:
        """Every speculative row proposes c_1..c_k: one draft pass per drafted position, all drafting rows in it.

        A draft-only row takes its one step in the first pass.
        """
        for i in range(max((plan.draft_passes for plan in plans), default=0)):
            asking = [plan for plan in plans if plan.draft_passes > i and not plan.generation.done and not plan.segment_ended]
            if not asking:
                return
            sequences = {plan.row: plan.generation.tokens + plan.drafted for plan in asking}
            started = time.perf_counter()
            out = self.draft.logits(sequences, dict.fromkeys(sequences, 1), precise)  # {row: [1, V]}
            seconds = time.perf_counter() - started
            for plan in asking:
                generation = plan.generation
                generation.trace.stats.draft_seconds += seconds
                generation.trace.stats.draft_calls += 1
                generation.trace.stats.draft_rows += len(asking)
                with self._alone(plan):
                    logits = _finite(out[plan.row], "draft", plan)
                    plan.q_logits.append(logits)
                    if generation.speculative or generation.segments is not None:
                        settings = generation.settings
                        probs = acc.sampling_probs(logits, settings.temperature, settings.top_p)
                        plan.drafted.append(int(acc.draw(probs, generation.generator, settings.greedy)))
                    if generation.segments is not None:
                        plan.segment_ended = generation.segments.ends(generation, plan.drafted)

    def _verify(self, plans: list[RowPlan], precise: set[int]) -> None:
        """ONE target pass for every row that uses the target: p_1..p_{k+1} after each row's drafts."""
        asking = [plan for plan in plans if plan.verifies and not plan.generation.done]
        if not asking:
            return
        sequences = {plan.row: plan.generation.tokens + plan.drafted for plan in asking}
        started = time.perf_counter()
        out = self.target.logits(sequences, {plan.row: plan.k + 1 for plan in asking}, precise)  # {row: [k+1, V]}
        seconds = time.perf_counter() - started
        for plan in asking:
            plan.generation.trace.stats.target_seconds += seconds
            plan.generation.trace.stats.target_calls += 1
            plan.generation.trace.stats.target_rows += len(asking)
            with self._alone(plan):
                plan.p_logits = _finite(out[plan.row], "target", plan)

    def _guide(self, plans: list[RowPlan], precise: set[int]) -> None:
        """MTI rows whose target entropy exceeds τ: ONE more target pass for all of them, over each row's context with
        the negative prompt after it; the logits at its last token are p_u. The row's cache then forgets the negative
        prompt (as it forgets rejected drafts), so it holds exactly what it held before."""
        asking = [
            plan
            for plan in plans
            if METHODS[plan.generation.settings.method].guides
            and not plan.generation.done
            and mti.unsure(plan.p_logits, plan.generation.settings)
        ]
        if not asking:
            return
        sequences = {plan.row: plan.generation.tokens + plan.generation.negative_ids for plan in asking}
        started = time.perf_counter()
        out = self.target.logits(sequences, dict.fromkeys(sequences, 1), precise)  # {row: [1, V]}
        seconds = time.perf_counter() - started
        for plan in asking:
            self.target.truncate(plan.row, len(plan.generation.tokens))
            stats = plan.generation.trace.stats
            stats.target_seconds += seconds
            stats.target_calls += 1
            stats.target_rows += len(asking)
            with self._alone(plan):
                plan.u_logits = _finite(out[plan.row], "target (after MTI's negative prompt)", plan)

    def _score(self, plans: list[RowPlan]) -> None:
        """RSD rows whose draft wrote a segment: the process reward model's reward for it (rsd.Segments.reward_for)."""
        for plan in plans:
            generation, segments = plan.generation, plan.generation.segments
            if segments is None or segments.writer != "draft" or generation.done or not plan.drafted:
                continue
            with self._alone(plan):
                question = generation.prompt if generation.question is None else generation.question
                plan.reward = segments.reward_for(generation, plan.drafted, question)

    def _judge(self, plan: RowPlan) -> Block | None:
        """The row's block: judge_block's verdict, or one sampled token for a single-model row (None if the row failed)."""
        generation = plan.generation
        if generation.done:
            return None
        settings, recorder = generation.settings, generation.recorder
        with self._alone(plan):
            if generation.segments is not None:
                return self._segment_block(plan)
            if generation.speculative:
                q_logits = torch.cat(plan.q_logits) if plan.q_logits else plan.p_logits[:0]  # [k, V]; k = 0 near the end
                drafted = torch.tensor(plan.drafted, dtype=torch.long, device=plan.p_logits.device)
                verdict = judge_block(q_logits, plan.p_logits, drafted, settings, generation.generator, self.rounding)
                records = recorder.block_records(plan.block, plan.position, plan.drafted, verdict)
                return Block(plan.block, plan.drafted, records, verdict.origin, generation)
            logits = plan.p_logits if generation.uses_target else plan.q_logits[0]  # [1, V]
            guided = mti.guided(logits, plan.u_logits, settings)  # [1, V], where MTI guides
            probs = acc.sampling_probs(logits if guided is None else guided, settings.temperature, settings.top_p)
            token = int(acc.draw(probs, generation.generator, settings.greedy))
            record = recorder.single_record(plan.block, plan.position, token, logits, guided)
            return Block(plan.block, [], [record], record.origin, generation)
        return None

    def _segment_block(self, plan: RowPlan) -> Block:
        """An RSD row's block: the draft's segment, kept whole if its reward reaches δ (else nothing yet: the target
        writes the segment again, a token a block), or one token of the target's version of the segment."""
        generation, segments, recorder = plan.generation, plan.generation.segments, plan.generation.recorder
        if segments.writer == "draft":
            records = [
                recorder.single_record(plan.block, plan.position + i, token, plan.q_logits[i], model="draft")
                for i, token in enumerate(plan.drafted)
            ]
            kept = segments.judge_draft(generation, plan.drafted, plan.reward, records)
            return Block(plan.block, plan.drafted, records if kept else [], "draft", generation)  # refused: nothing yet
        settings = generation.settings
        probs = acc.sampling_probs(plan.p_logits, settings.temperature, settings.top_p)
        token = int(acc.draw(probs, generation.generator, settings.greedy))
        record = recorder.single_record(plan.block, plan.position, token, plan.p_logits, model="target")
        segments.take_target(generation, record)
        return Block(plan.block, [], [record], "target", generation)

    def _commit(self, blocks: list[Block], seconds: float) -> None:
        """Emitted tokens join their generations; the caches forget rejected drafts; traces and counts grow."""
        rows = {id(generation): row for row, generation in enumerate(self.rows.generations)}
        for block in blocks:
            generation, row = block.generation, rows[id(block.generation)]
            generation.tokens.extend(r.token_id for r in block.records)
            self.target.truncate(row, len(generation.tokens) - 1)
            self.draft.truncate(row, len(generation.tokens) - 1)
        self.draft.tidy()
        self.target.tidy()
        for block in blocks:
            generation = block.generation
            self._record(block, seconds)
            if generation.done and generation.keep_kv:  # taken before it leaves its row: others may start from it
                row = rows[id(generation)]
                generation.final = (self.draft.save_row(row), self.target.save_row(row))

    @contextmanager
    def _alone(self, plan: RowPlan) -> Iterator[None]:
        """One generation's own work: a failure ends it with one line and leaves every other of the step as it was."""
        try:
            yield
        except RowFailure as err:
            plan.generation.finish("error", err)
        except acc.NotADistribution:
            failure = RowFailure(
                f"the probabilities to sample token {plan.position} from were NaN or infinite (an extreme temperature "
                "or top-p?), so this run stopped there (the other runs sharing the batch went on)"
            )
            plan.generation.finish("error", failure)
        except Exception as err:  # noqa: BLE001 (one row's maths; logged, and the batch goes on)
            log.exception("a row failed in its own maths at token %d", plan.position)
            failure = RowFailure(
                f"this run stopped at token {plan.position}: its sampling failed ({type(err).__name__}; details in the server log)"
            )
            plan.generation.finish("error", failure)

    def _record(self, block: Block, seconds: float) -> None:
        """Add a finished block to its generation's trace and time (its passes were counted as they ran), cut at EOS,
        and see whether it ends."""
        generation = block.generation
        generation.trace.stats.seconds += seconds
        generation.take(block)
        reason = generation.end_reason()
        if reason is not None:
            generation.finish(reason)


@dataclass(eq=False)
class RowPlan:
    """One row's part in a step: how many tokens it drafts, and what the passes gave it."""

    row: int  # the row's index in both caches
    generation: Generation
    k: int  # tokens to draft; 0 for a single-model row (and for a speculative row one token before its end)
    block: int  # the block's index in the row's trace
    position: int  # tokens the row generated before this block
    drafted: list[int] = field(default_factory=list)  # c_1..c_k
    q_logits: list[torch.Tensor] = field(default_factory=list)  # [1, V] per draft pass: q_1..q_k (draft-only: its step)
    p_logits: torch.Tensor | None = None  # [k+1, V] p_1..p_{k+1} from the one target pass
    segment_ended: bool = False  # an RSD row's draft wrote its segment to the end: it drafts no more this step
    reward: float | None = None  # the PRM's reward for that segment
    u_logits: torch.Tensor | None = None  # [1, V] p_u, an MTI row's target logits after the negative prompt (when guided)

    @property
    def draft_passes(self) -> int:
        """Draft passes the row takes part in at most: k for SD, EASD and an RSD row writing a segment; 1 for draft-only."""
        if self.generation.speculative or self.generation.segments is not None:
            return self.k
        return int(METHODS[self.generation.settings.method].one_model == "draft")

    @property
    def verifies(self) -> bool:
        """Whether the row takes part in the target's pass: not while RSD's draft writes a segment."""
        segments = self.generation.segments
        return self.generation.uses_target and (segments is None or segments.writer == "target")


def _finite(logits: torch.Tensor, model: str, plan: RowPlan) -> torch.Tensor:
    """The row's logits, or RowFailure if a NaN, +inf or an all -inf row would reach its sampling (-inf masks a token)."""
    if torch.isnan(logits).any() or not torch.isfinite(logits.max(dim=-1).values).all():
        raise RowFailure(
            f"the {model} model gave NaN or infinite logits at token {plan.position}, so this run stopped there "
            "(the other runs sharing the batch went on)"
        )
    return logits


def _cut_at_eos(records: list[TokenRecord], eos_ids: frozenset[int]) -> list[TokenRecord]:
    for i, record in enumerate(records):
        if record.token_id in eos_ids:
            return records[: i + 1]
    return records


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
