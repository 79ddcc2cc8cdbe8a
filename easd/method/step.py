"""The decoding loop: every method of the table, for B ≥ 1 rows at once, streamed block by block.

Layers, bottom-up (as in gpt-fast's generate.py):
  Caches.logits    one forward pass over the tokens each row's cache has not seen (easd/method/seam.py)
  judge_block      pure decision for one row's speculative block, given q_1..q_k and p_1..p_{k+1} (judging.py)
  Batch._step      plan, draft, verify, look again, judge, commit: a block for every row
    _draft         the rows that draft take the draft passes, one per drafted position, all of them in it
    _verify        ONE target pass for every row that takes it
    _look_again    the rows whose method asks (MTI where the target is unsure): ONE more target pass for them all
    _judge         each generation's block, alone (a group's from all its rows): one whose numbers fail ends, the
                   others go on
  Batch            steps its rows and streams the blocks, each naming its generation; generations join and
                   leave at block boundaries (easd.method.rows: joining, long prompts in pieces)
  Generation       one generation: prompt checks, its own random numbers, stop handling, its trace (generation.py)

What a row does in each pass is its method's to say (easd.method.methods: `plan`, `propose`, `second_look`,
`after_passes`, `judge`); the loop names no method. SD and EASD share every line but one, in `judge_block`.

Words, used in one sense each (as vLLM keeps a request apart from its index in the batch):
  generation       one prompt decoded under one DecodeSettings: a `Generation`. Its record is its
                   `Trace`, which users, files and the app call a run.
  row              the slot a generation holds in its batch's caches while it decodes: an index 0..B-1.
  group            the rows of one generation that holds several (SMC-SD's particles, SpecGuard's candidates, beam
                   search's beams): its members 0..width-1, each with a sequence of its own (`Method.sequence`).
  block            one round of a generation: drafts judged, tokens emitted (`judging.Block`).
  step             one round of the batch: a block for every generation in it.
  plan             a row's part in one step (`RowPlan`): what it drafts, what the passes gave it, what it keeps.
  segment          what RSD's paper calls a reasoning step: text up to its delimiter (methods/rsd.py), never a step.

A generation is decoded exactly as if it ran alone: it has its own random generator, drawn in the same order as a
solo run, its own settings, and the batch only shares the forward passes.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import EasdError, SettingsError
from . import acceptance as acc
from .judging import Block
from .pair import ModelPair
from .rows import Rows
from .seam import Caches
from .trace import RunStats, Trace

log = logging.getLogger("easd.decoding")


class RowFailure(EasdError):
    """One row's numbers went wrong (non-finite logits or probabilities): that row ends, the batch goes on."""


@dataclass
class Checkpoint:
    """The state of a row as a block starts: enough to start another run there (Generation.resume_at)."""

    block: int
    position: int  # tokens generated before this block
    draft_seen: int  # the row's tokens in the draft's cache as the block starts
    target_seen: int  # the row's tokens in the target's cache
    rng_state: torch.Tensor
    stats: RunStats  # its time and passes so far


class Batch:
    """Generations decoded together: per step, one draft pass per drafted position and ONE target pass for all.

    Generations wait in line until a row is free (`max_rows`), join at a block boundary and leave as soon as
    they end (EOS, their max_new_tokens, the context, or `stop()`): easd.method.rows. Iterate for Blocks; each
    names its generation. `add()` may be called from another thread while iterating.
    """

    def __init__(
        self,
        pair: ModelPair,
        generations: Iterable = (),
        max_rows: int | None = None,
        use_cache: bool = True,
        at_boundary: Callable[[Batch], None] | None = None,
        prompts_between_steps: bool = False,
        allowance: int | None = None,
    ):
        if max_rows is not None and max_rows < 1:
            raise SettingsError("--batch-size", f"must be ≥ 1 (got {max_rows})")
        if allowance is not None and allowance < 1:
            raise SettingsError("--row-allowance", f"must be ≥ 1 (got {allowance})")
        self.pair = pair
        limit = min(pair.draft.max_rows, pair.target.max_rows)  # more wait in line, as for `max_rows`
        max_rows = limit if max_rows is None else min(max_rows, limit)
        self.at_boundary = at_boundary  # called between steps, when every block so far has been yielded (a scheduler's hook)
        self.draft: Caches = pair.draft.caches(pair.vocab_size, use_cache)
        self.target: Caches = pair.target.caches(pair.vocab_size, use_cache)
        # who holds which row, and who waits for one; prompts_between_steps: see Rows
        self.rows = Rows(pair, self.draft, self.target, generations, max_rows, use_cache, prompts_between_steps)
        # None: every generation takes every step. Else the rows a generation may use a step, on average, while others
        # step: a wider group (SMC-SD's particles, SpecGuard's candidates, beams) steps less often, so that on a CPU,
        # where a pass costs in proportion to its rows, it slows itself and not its neighbours (`_taking_part`)
        self.allowance = allowance
        self._credit: dict[int, float] = {}  # id(generation) -> rows it may still use (below 0: it used more)
        self._stop = threading.Event()

    def add(self, generation, first: bool = False) -> None:
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
                rows.leave([g for g in rows.decoding if g.stopped])
                rows.join()
                if not rows.generations:
                    if rows.waiting:  # the head of the line's prompt is not computed yet
                        continue
                    return
                yield from self._step()
                rows.leave([g for g in rows.decoding if g.done])
        finally:
            self.rows.end_all()

    def run(self) -> list[Trace]:
        """Decode every generation to the end; the traces in the order the generations were given."""
        everyone = list(self.rows.waiting) + self.rows.decoding
        for _ in self:
            pass
        return [g.trace for g in everyone]

    # --- one step: a block for every generation ----------------------------------------------------------

    def _step(self) -> list[Block]:
        """Plan, draft, verify, look again, judge, commit: one block for every generation (one that fails ends alone)."""
        started = time.perf_counter()
        taking_part = self._taking_part()
        plans = [
            self._plan(row, g, m)
            for row, (g, m) in enumerate(zip(self.rows.generations, self.rows.members))
            if id(g) in taking_part
        ]
        self._charge(plans)
        precise = {plan.row for plan in plans if plan.generation.settings.signals == "float32"}  # float32 lm_head rows
        self._draft(plans, precise)
        self._verify(plans, precise)
        self._look_again(plans, precise)
        for plan in plans:
            if not plan.generation.done:
                with self._alone(plan):
                    plan.generation.method.after_passes(plan)
        groups: dict[int, list[RowPlan]] = {}  # each generation's plans, in member order
        for plan in sorted(plans, key=lambda plan: plan.member):
            groups.setdefault(id(plan.generation), []).append(plan)
        blocks = [block for block in map(self._judge, groups.values()) if block is not None]
        seconds = time.perf_counter() - started
        self._commit(plans, blocks, seconds)  # every generation waited for the whole step
        for generation in self.rows.decoding:
            if id(generation) not in taking_part:  # it sat this step out, and waited for it all the same
                generation.trace.stats.seconds += seconds
        return blocks

    def _taking_part(self) -> set[int]:
        """The generations that take this step: every one, or with an `allowance`, those with rows to spend. Each
        earns `allowance` rows a step (saving none beyond it) and spends a row for each of its rows that takes a
        pass: SD's one row always steps; SMC-SD's 4 particles under an allowance of 2 step every other step. Where
        nobody has rows to spend (only groups decode), every generation steps: sitting out would help nobody."""
        decoding = self.rows.decoding
        if self.allowance is None:
            return {id(g) for g in decoding}
        self._credit = {id(g): min(self._credit.get(id(g), 0.0) + self.allowance, self.allowance) for g in decoding}
        ready = {id(g) for g in decoding if self._credit[id(g)] > 0}
        return ready or {id(g) for g in decoding}

    def _charge(self, plans: list[RowPlan]) -> None:
        """Each generation spends a row of its allowance for each of its rows that takes a pass this step (a group's
        resting rows cost nothing: SpecGuard's candidates while the target writes a step); its debt is at most a
        step of its rows, so that it never waits longer than its width asks."""
        if self.allowance is None:
            return
        for plan in plans:
            if plan.draft_passes > 0 or plan.verifies:
                key = id(plan.generation)
                self._credit[key] = max(self._credit[key] - 1, -plan.generation.width)

    def _plan(self, row: int, generation, member: int) -> RowPlan:
        """What the row does this step (its method says); also, for a generation's first member, its checkpoint as
        the block starts."""
        if member == 0:
            generation.checkpoints.append(
                Checkpoint(
                    generation.first_block + len(generation.checkpoints),
                    len(generation.tokens) - generation.prompt_length,
                    self.draft.length(row),
                    self.target.length(row),
                    generation.generator.get_state(),
                    dataclasses.replace(generation.trace.stats),
                )
            )
        block = generation.first_block + len(generation.checkpoints) - 1
        position = len(generation.tokens) - generation.prompt_length
        method = generation.method
        draft_passes, verifies = method.plan_member(generation, member)
        given = list(method.given(generation, member))
        held = len(method.sequence(generation, member))
        return RowPlan(row, generation, draft_passes, verifies, block, position, member, held, drafted=given)

    def _draft(self, plans: list[RowPlan], precise: set[int]) -> None:
        """Every drafting row's draft passes: one pass per drafted position, all drafting rows in it; after each,
        the row keeps the draft's logits and its method says what it proposes (SD's c_i and q̃_i, draft-only's token)."""
        for i in range(max((plan.draft_passes for plan in plans), default=0)):
            asking = [plan for plan in plans if plan.draft_passes > i and not plan.generation.done and not plan.drafting_done]
            if not asking:
                return
            sequences = {plan.row: plan.sequence + plan.drafted for plan in asking}
            out = self._pass(self.draft, "draft", asking, sequences, dict.fromkeys(sequences, 1), precise)  # {row: [1, V]}
            for plan in asking:
                with self._alone(plan):
                    logits = _finite(out[plan.row], "draft", plan)  # [1, V]
                    plan.q_logits.append(logits)
                    proposal = plan.generation.method.propose(plan, logits)
                    if proposal is not None:
                        plan.drafted.append(proposal.token)
                        plan.q_tilde.append(proposal.q_tilde)

    def _verify(self, plans: list[RowPlan], precise: set[int]) -> None:
        """ONE target pass for every row that takes it: p_1..p_{k+1} after each row's drafts."""
        asking = [plan for plan in plans if plan.verifies and not plan.generation.done]
        if not asking:
            return
        sequences = {plan.row: plan.sequence + plan.drafted for plan in asking}
        out = self._pass(self.target, "target", asking, sequences, {plan.row: len(plan.drafted) + 1 for plan in asking}, precise)
        for plan in asking:
            with self._alone(plan):
                plan.p_logits = _finite(out[plan.row], "target", plan)  # [k+1, V]

    def _look_again(self, plans: list[RowPlan], precise: set[int]) -> None:
        """The rows whose method asks the target to read them once more, with tokens after the context (MTI's negative
        prompt where the target is unsure): ONE more target pass for all of them; the logits at the last token are
        each row's `second_logits`. The row's cache then forgets those tokens (as it forgets rejected drafts), so it
        holds exactly what it held before."""
        after = {}
        for plan in plans:
            if not plan.generation.done and plan.p_logits is not None:
                with self._alone(plan):
                    tokens = plan.generation.method.second_look(plan)
                    if tokens is not None:
                        after[plan.row] = (plan, tokens)
        if not after:
            return
        asking = [plan for plan, _ in after.values()]
        sequences = {row: plan.sequence + tokens for row, (plan, tokens) in after.items()}
        out = self._pass(self.target, "target", asking, sequences, dict.fromkeys(sequences, 1), precise)  # {row: [1, V]}
        for plan in asking:
            self.target.truncate(plan.row, len(plan.sequence))
            with self._alone(plan):
                plan.second_logits = _finite(out[plan.row], "target (looking again)", plan)

    def _pass(self, caches: Caches, model: str, asking: list[RowPlan], sequences: dict, last: dict, precise: set[int]) -> dict:
        """One forward pass of `model` for the rows asking; each counts it, its time and the rows it served."""
        started = time.perf_counter()
        out = caches.logits(sequences, last, precise)
        seconds = time.perf_counter() - started
        for generation in {id(plan.generation): plan.generation for plan in asking}.values():  # a group's rows: one pass
            stats = generation.trace.stats
            setattr(stats, f"{model}_seconds", getattr(stats, f"{model}_seconds") + seconds)
            setattr(stats, f"{model}_calls", getattr(stats, f"{model}_calls") + 1)
            setattr(stats, f"{model}_rows", getattr(stats, f"{model}_rows") + len(asking))
        return out

    def _judge(self, plans: list[RowPlan]) -> Block | None:
        """A generation's block, as its method judges it from its rows' plans (None if it failed)."""
        generation = plans[0].generation
        if generation.done:
            return None
        with self._alone(plans[0]):
            return generation.method.judge_group(plans)
        return None

    def _commit(self, plans: list[RowPlan], blocks: list[Block], seconds: float) -> None:
        """Emitted tokens join their generations; each row's caches forget the drafts its sequence did not keep (SD's
        rejected drafts; a candidate step SpecGuard did not keep); a group's rows follow its method (resampled
        particles, pruned beams); traces and counts grow."""
        for block in blocks:
            generation = block.generation
            emitted = [r.token_id for r in block.records]
            for plan in (plan for plan in plans if plan.generation is generation):
                kept = emitted if plan.keep is None else plan.keep  # what the row's sequence grew by
                confirmed = next((i for i, (a, b) in enumerate(zip(plan.drafted, kept)) if a != b), None)
                confirmed = min(len(plan.drafted), len(kept)) if confirmed is None else confirmed
                held = min(plan.held + confirmed, plan.held + len(kept) - 1)  # the caches' tokens that are its own
                self.target.truncate(plan.row, held)
                self.draft.truncate(plan.row, held)
            generation.tokens.extend(emitted)
        for block in blocks:  # after every row's own: a follow renumbers the rows the plans name
            generation = block.generation
            if generation.parents is not None:  # its method reordered or copied its members
                self.rows.follow(generation, generation.parents)
                generation.parents = None
        self.draft.tidy()
        self.target.tidy()
        for block in blocks:
            generation = block.generation
            self._record(block, seconds)
            if generation.done and generation.keep_kv:  # taken before it leaves its row: others may start from it
                row = self.rows.rows_of(generation)[0]
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
    """One row's part in a step: how many draft passes it takes and whether it takes the target's (its method's
    plan), and what the passes gave it."""

    row: int  # the row's index in both caches
    generation: Any  # the generation holding the row (easd.method.generation.Generation)
    draft_passes: int  # the draft passes it takes part in: SD's k (one fewer near the end), draft-only's 1, none
    verifies: bool  # it takes the target's pass
    block: int  # the block's index in the generation's trace
    position: int  # tokens the generation emitted before this block
    member: int  # which of its generation's rows it is (0 for a generation of one row)
    held: int  # the tokens of the row's sequence as the step starts (its caches hold all but the last)
    drafted: list[int] = field(default_factory=list)  # c_1..c_k, the draft's proposals (or tokens its method gave)
    q_tilde: list[torch.Tensor | None] = field(default_factory=list)  # [1, V] per proposal: the q̃_i c_i was drawn from, or None
    q_logits: list[torch.Tensor] = field(default_factory=list)  # [1, V] per draft pass: q_1..q_k (draft-only: its step)
    p_logits: torch.Tensor | None = None  # [k+1, V] p_1..p_{k+1} from the one target pass
    second_logits: torch.Tensor | None = None  # [1, V] the target's logits on its second look (MTI's p_u), where it asked
    drafting_done: bool = False  # the row's method wants no more draft passes this step (RSD's segment ended)
    score: float | None = None  # a score its method gave the block outside the batch's models (RSD's reward)
    keep: list[int] | None = None  # what the row's sequence grew by, where not the block's tokens (a particle's own)

    @property
    def sequence(self) -> list[int]:
        """What the row holds, and the token after: its method's sequence for this member (the generation's tokens)."""
        return self.generation.method.sequence(self.generation, self.member)


def _finite(logits: torch.Tensor, model: str, plan: RowPlan) -> torch.Tensor:
    """The row's logits, or RowFailure if a NaN, +inf or an all -inf row would reach its sampling (-inf masks a token).
    One reduction finds all three: a row's max is NaN where the row holds one (torch.max propagates NaN)."""
    if not torch.isfinite(logits.max(dim=-1).values).all():
        raise RowFailure(
            f"the {model} model gave NaN or infinite logits at token {plan.position}, so this run stopped there "
            "(the other runs sharing the batch went on)"
        )
    return logits
