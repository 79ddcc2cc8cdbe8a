"""One generation: a prompt decoded under one DecodeSettings, with its own random numbers, its stop handling and its
trace. Iterated alone it is a batch of one (easd.method.step.Batch); in a shared batch it is one row among others,
decoded exactly as if alone. Its method (easd.method.methods) is resolved once, as it is made.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import EasdError
from .judging import Block, Recorder
from .methods import lookup
from .pair import ModelPair
from .prompts import encode_prompt
from .rows import Start
from .seam import RowState
from .settings import DecodeSettings
from .step import Batch, Checkpoint
from .trace import BlockInfo, RunStats, TokenRecord, Trace, software_versions


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
    state: Any = None  # its method's own state so far (RSD's segments; None: its method's fresh start)
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
            generation.method.copy_state(generation.state),
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
        if self.state is not None:
            generation.state = generation.method.copy_state(self.state)
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
        self.method = lookup(self.settings.method)  # resolved once: the step asks it what this row does
        self.settings.validate()
        self.method.check(self.pair, self.settings)
        self.settings = self.method.on_pair(self.pair, self.settings)
        self.prompt_ids = encode_prompt(self.pair, self.prompt, self.chat, self.system)
        self.prompt_length = len(self.prompt_ids)
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
            scoring_calls=0,
            scoring_seconds=0.0,
            stop_reason="stopped",
        )
        self.start: Start | None = None  # the cache states a resumed generation joins with (see resume_at)
        self.final: tuple[RowState | None, RowState | None] | None = None  # kept when it ends, if keep_kv
        self.state = self.method.start(self)  # its method's own state (MTI's negative prompt, RSD's segments)
        self.error: EasdError | None = None  # why it failed, when its stop reason is "error"
        self.parents: list[int] | None = None  # a group's members to follow after this step (its method says: `follow`)
        self.why_stopped = "stopped"  # the stop reason a stopped generation ends with (see `stop`)
        self._stop = threading.Event()

    @contextmanager
    def scoring(self) -> Iterator[None]:
        """A pass outside the batch that scores what was written (SpecGuard's attention, RSD's reward model): counted
        in the trace's stats, its time beside the batch's passes."""
        started = time.perf_counter()
        try:
            yield
        finally:
            stats = self.trace.stats
            stats.scoring_calls = (stats.scoring_calls or 0) + 1
            stats.scoring_seconds = (stats.scoring_seconds or 0.0) + time.perf_counter() - started

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
        return self.method.uses_draft

    @property
    def uses_target(self) -> bool:
        return self.method.uses_target

    def stop(self, why: str = "stopped") -> None:
        """End it at the next block boundary, with stop reason `why` (one of easd.method.trace.STOP_REASONS: "stopped" when
        its user asked, "left", "unread", "quota" or "error" when the shared batch ended it, easd.serving.worker). The
        first reason given is the one it ends with: a later call only repeats the stop."""
        if not self._stop.is_set():
            self.why_stopped = why
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def width(self) -> int:
        """How many rows of a batch it holds (its method's group: SMC-SD's particles; one for most)."""
        return self.method.width(self)

    def sequence(self, member: int) -> list[int]:
        """What its member's row holds, and the token after (its method says)."""
        return self.method.sequence(self, member)

    @property
    def capacity(self) -> int:
        """The most tokens its row of the caches may hold: its prompt, its new tokens (within the context), a block's
        drafts and what its method reads besides (MTI's negative prompt)."""
        return (
            min(self.prompt_length + self.settings.max_new_tokens, self.pair.context_length)
            + self.settings.k
            + 1
            + self.method.extra_room(self)
        )

    def room(self) -> int:
        """How many more tokens it may emit (max_new_tokens and the context both count; its method may keep some room)."""
        generated = len(self.tokens) - self.prompt_length
        context = self.pair.context_length - len(self.tokens) - self.method.extra_room(self)
        return min(self.settings.max_new_tokens - generated, context)

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
        if self.method.verifies:
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
        own = self.method.ended(self)
        if own is not None:
            return own
        return self.why_stopped if self.stopped else None


def _cut_at_eos(records: list[TokenRecord], eos_ids: frozenset[int]) -> list[TokenRecord]:
    for i, record in enumerate(records):
        if record.token_id in eos_ids:
            return records[: i + 1]
    return records
