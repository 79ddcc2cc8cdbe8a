"""Which generation holds which row of a batch's caches: the line waiting for a row, joining, and leaving.

The method's step (easd.method.step.Batch) sees only the rows it is given. Here they come and go, always at a
block boundary: a generation waits in line until a row is free, joins with its prefix computed alone (as in a solo
run), and leaves as soon as it ends, so the batch never waits for its slowest generation. A long prompt is computed
PREFILL_CHUNK tokens a pass (`Prompt`), so that Stop is heard, and other rows may step, between two passes.

Who admits a row, said once: the batch's owner. In the app, the shared batch's worker (easd.serving.worker) keeps the
line of requests and its rules (the line's order, each address's share, the room a ticket needs) and hands the batch
a ticket's generations only when it has a row free for each, so they wait here only until the next block boundary;
`eval`, `sweep` and lm-eval own their batches and hand them every generation at once, and this module's line
(`Rows.waiting`) admits them in order as rows free up.

Words as in step.py and seam.py: a row is a generation's index 0..B-1 in both models' caches; a row's "seen"
tokens are those a model's cache holds. A generation may hold a *group* of rows, its members 0..width-1 (SMC-SD's
particles, SpecGuard's candidates, beam search's beams, easd.method.methods `width`): they join together, the
others forked from the first's cache (a copy of its state, not recomputed), count against `max_rows` by their number,
are reordered or copied as the method says (`follow`) and leave together.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ..errors import EasdError
from .pair import ModelPair
from .seam import Caches, RowState
from .trace import Trace

# Why pieces: in one pass, a 2,375-token prompt held the embedded pair for 75 s on 2 cores, and Stop with it.
PREFILL_CHUNK = 256


class Joining(Protocol):
    """What the rows need of a generation (easd.method.generation.Generation)."""

    tokens: list[int]  # its prompt and the tokens emitted so far
    start: Start | None  # the cache states its first member joins with, when it resumes (None: computed afresh)
    trace: Trace  # its time spent joining counts in trace.stats.seconds
    why_stopped: str

    @property
    def capacity(self) -> int: ...  # the most tokens a row of it may hold
    @property
    def width(self) -> int: ...  # the rows it holds: its members
    def sequence(self, member: int) -> list[int]: ...  # what its member's row holds, and the token after
    @property
    def uses_draft(self) -> bool: ...
    @property
    def uses_target(self) -> bool: ...
    @property
    def stopped(self) -> bool: ...
    @property
    def done(self) -> bool: ...
    def finish(self, reason: str) -> None: ...


@dataclass
class Start:
    """How a generation joins: each model's cache as a finished run left it (None: computed afresh), of which it
    keeps the first `seen` tokens, as the run's caches held them when its checkpoint was taken."""

    draft: RowState | None
    target: RowState | None
    draft_seen: int
    target_seen: int

    @staticmethod
    def afresh(generation: Joining, member: int = 0) -> Start:
        """Both caches computed from the member's tokens: every token but the last, whose logits the next pass computes."""
        seen = len(generation.sequence(member)) - 1
        return Start(None, None, seen, seen)


class Rows:
    """The generations holding rows of a batch's two caches (`generations[row]`) and the line of those waiting.

    `add()` may be called from another thread while the batch decodes; everything else runs between its steps.
    """

    def __init__(
        self,
        pair: ModelPair,
        draft: Caches,
        target: Caches,
        generations: Iterable[Joining],
        max_rows: int,
        use_cache: bool,
        prompts_between_steps: bool,
    ):
        self.pair = pair
        self.caches = {"draft": draft, "target": target}
        self.max_rows = max_rows
        self.use_cache = use_cache
        # A long prompt is computed a piece per step while other rows decode, rather than all at once while they
        # wait (the app's shared batch). Off, it is computed whole as its row joins: a batch that is stopped and
        # resumed between steps (easd.serving.chunks) would otherwise start it again each time.
        self.prompts_between_steps = prompts_between_steps
        self.generations: list[Joining] = []  # generations[row] holds that row of both caches
        self.members: list[int] = []  # members[row]: which of its generation's members the row is
        self.waiting: deque[Joining] = deque(generations)
        self.prompts: dict[Joining, Prompt] = {}  # long prompts being computed, by the generation waiting for them
        self._lock = threading.Lock()

    def add(self, generation: Joining, first: bool = False) -> None:
        """Put a generation in line (at its head with `first`); it joins at the next block boundary with a free row."""
        with self._lock:
            if first:
                self.waiting.appendleft(generation)
            else:
                self.waiting.append(generation)

    @property
    def load(self) -> int:
        """Generations still decoding or waiting to join."""
        return sum(not g.done for g in self.decoding) + len(self.waiting)

    @property
    def decoding(self) -> list[Joining]:
        """The generations holding rows, each once, in the order of their first rows."""
        return list(dict.fromkeys(self.generations))

    def rows_of(self, generation: Joining) -> dict[int, int]:
        """The generation's rows, by member."""
        return {m: row for row, (g, m) in enumerate(zip(self.generations, self.members)) if g is generation}

    def join(self) -> None:
        """Let in generations from the line while there are rows free for all their members, in order. Generations that
        join together with the same prompt (a comparison's SD and EASD) compute its prefix once per model: the later
        ones start from a copy, as a group's other members start from its first's. A prompt longer than PREFILL_CHUNK
        is computed first (`Prompt`), whole or, with `prompts_between_steps`, a piece per call while the generations
        behind it wait their turn. A generation wider than the whole batch ends at once, saying so."""
        twins: dict[tuple[str, tuple[int, ...]], int] = {}  # (model, prefix) -> the row that took it in this call
        while self.waiting and len(self.generations) < self.max_rows:
            generation = self.waiting[0]
            if generation.stopped or generation.width > self.max_rows:  # before its first step, or while its prompt was computed
                with self._lock:
                    self.waiting.remove(generation)
                self.prompts.pop(generation, None)
                if generation.stopped:
                    generation.finish(generation.why_stopped)
                else:
                    generation.finish("error", too_wide(generation.width, self.max_rows))
                continue
            if len(self.generations) + generation.width > self.max_rows:
                return  # its group waits for rows, in order
            started = time.perf_counter()
            ready = self._prompt_ready(generation, twins)
            generation.trace.stats.seconds += time.perf_counter() - started
            if not ready:
                return
            with self._lock:
                self.waiting.remove(generation)
            started = time.perf_counter()
            for member in range(generation.width):
                self._add_member(generation, member, twins)
            generation.start = None
            generation.trace.stats.seconds += time.perf_counter() - started

    def _add_member(self, generation: Joining, member: int, twins: dict) -> None:
        """One row for the generation's member: its first from its start (or afresh), the others from a copy of a row
        that holds the same tokens (the first member's, as a group starts), else afresh from their own tokens."""
        start = (generation.start if member == 0 else None) or Start.afresh(generation, member)
        row, room = len(self.generations), generation.capacity
        for model, prefix in prefixes(generation, start, member).items():
            state = getattr(start, model)
            twin = twins.get((model, prefix)) if prefix and state is None else None
            caches = self.caches[model]
            caches.add_row(list(prefix), room, caches.save_row(twin) if twin is not None else state)
            twins.setdefault((model, prefix), row)
        self.generations.append(generation)
        self.members.append(member)

    def follow(self, generation: Joining, parents: list[int]) -> None:
        """Make the generation's member i hold what its member parents[i] held (SMC-SD's resampling, beam search's
        pruning): a member named once keeps its row, one named again gets a copy of it (its state, not recomputed),
        one named never gives its row back; every other generation's rows stay as they are, in order. The method has
        already made its own state follow: member i's sequence is its parent's (`sequence`)."""
        old = self.rows_of(generation)  # member -> row
        copies = [(i, p) for i, p in enumerate(parents) if parents.index(p) != i]
        states = {name: {p: caches.save_row(old[p]) for _, p in copies} for name, caches in self.caches.items()}
        held = {i: {name: caches.length(old[p]) for name, caches in self.caches.items()} for i, p in copies}
        gone = {old[m] for m in old if m not in parents}
        keep = [row for row in range(len(self.generations)) if row not in gone]
        for caches in self.caches.values():
            caches.keep_rows(keep)
        members = [self.members[row] for row in keep]
        self.generations = [self.generations[row] for row in keep]
        self.members = [parents.index(m) if g is generation else m for g, m in zip(self.generations, members)]
        for i, p in copies:
            sequence = generation.sequence(i)
            for name, caches in self.caches.items():
                caches.add_row(sequence[: held[i][name]], generation.capacity, states[name][p])
            self.generations.append(generation)
            self.members.append(i)

    def _prompt_ready(self, generation: Joining, twins: dict) -> bool:
        """Whether `generation` can join now; computes its long prompt first, or with `prompts_between_steps`
        and others decoding, the next piece of it."""
        if generation.start is not None or not self.use_cache:
            return True
        wanted = prefixes(generation, Start.afresh(generation), 0)
        if max(map(len, wanted.values())) <= PREFILL_CHUNK or all((m, p) in twins for m, p in wanted.items() if p):
            return True
        prompt = self.prompts.setdefault(generation, Prompt(self.pair, wanted, generation.capacity))
        while not prompt.done and not generation.stopped:
            prompt.advance()
            if self.prompts_between_steps and self.generations:
                break  # the others' next step first
        if not prompt.done:
            return False
        del self.prompts[generation]
        generation.start = prompt.start(len(generation.sequence(0)) - 1)
        return True

    def leave(self, leaving: list[Joining]) -> None:
        """These generations end (if they have not) and give back their rows; the others keep their order."""
        if not leaving:
            return
        for generation in leaving:
            generation.finish(generation.why_stopped)
        staying = [i for i, g in enumerate(self.generations) if g not in leaving]
        for caches in self.caches.values():
            caches.keep_rows(staying)
        self.generations = [self.generations[i] for i in staying]
        self.members = [self.members[i] for i in staying]

    def end_all(self) -> None:
        """The batch is over: every generation still holding a row or waiting ends as stopped."""
        for generation in self.decoding + list(self.waiting):
            generation.finish(generation.why_stopped)


class Prompt:
    """A joining row's long prompt, computed PREFILL_CHUNK tokens a pass in caches of its own (a pass over the
    batch's caches would carry every other row along). Done, it is the `Start` the row joins with; it decodes as a
    prompt computed in one pass."""

    def __init__(self, pair: ModelPair, prefixes: dict[str, tuple[int, ...]], room: int):
        self.prefixes = {model: prefix for model, prefix in prefixes.items() if prefix}
        self.caches = {model: getattr(pair, model).caches(pair.vocab_size, True) for model in self.prefixes}
        self.room = room
        self.computed = dict.fromkeys(self.prefixes, 0)  # tokens of each model's prefix in its cache

    @property
    def done(self) -> bool:
        return all(self.computed[m] == len(p) for m, p in self.prefixes.items())

    def advance(self) -> None:
        """One pass: the next PREFILL_CHUNK tokens of the first model whose prefix is not computed yet."""
        model = next(m for m, p in self.prefixes.items() if self.computed[m] < len(p))
        end = min(self.computed[model] + PREFILL_CHUNK, len(self.prefixes[model]))
        tokens = list(self.prefixes[model][:end])
        if self.computed[model] == 0:
            self.caches[model].add_row(tokens, self.room)
        else:
            self.caches[model].logits({0: tokens}, {0: 0})  # no logits wanted: only the cache
        self.computed[model] = end

    def start(self, seen: int) -> Start:
        draft, target = (self.caches[m].save_row(0) if m in self.caches else None for m in ("draft", "target"))
        return Start(draft, target, seen, seen)


def prefixes(generation: Joining, start: Start, member: int) -> dict[str, tuple[int, ...]]:
    """What each model's cache must hold for the member's row to join: the first `seen` tokens of its sequence (none
    for a model it does not use)."""
    sequence = generation.sequence(member)
    return {
        "draft": tuple(sequence[: start.draft_seen]) if generation.uses_draft else (),
        "target": tuple(sequence[: start.target_seen]) if generation.uses_target else (),
    }


def too_wide(width: int, rows: int) -> EasdError:
    """Why a generation of `width` rows can never join a batch of `rows`."""
    return EasdError(
        f"this run needs {width} rows of the batch at once and the batch holds {rows}: ask for fewer (particles, "
        "candidates or beams) or a bigger batch"
    )
