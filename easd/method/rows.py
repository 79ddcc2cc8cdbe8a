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
tokens are those a model's cache holds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .pair import ModelPair
from .seam import Caches, RowState
from .trace import Trace

# Why pieces: in one pass, a 2,375-token prompt held the embedded pair for 75 s on 2 cores, and Stop with it.
PREFILL_CHUNK = 256


class Joining(Protocol):
    """What the rows need of a generation (easd.method.generation.Generation)."""

    tokens: list[int]  # its prompt and the tokens emitted so far
    start: Start | None  # the cache states it joins with, when it resumes (None: computed afresh)
    trace: Trace  # its time spent joining counts in trace.stats.seconds
    why_stopped: str

    @property
    def capacity(self) -> int: ...  # the most tokens its row of the caches may hold
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
    def afresh(generation: Joining) -> Start:
        """Both caches computed from the tokens: every token but the last, whose logits the next pass computes."""
        seen = len(generation.tokens) - 1
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
        return sum(not g.done for g in self.generations) + len(self.waiting)

    def join(self) -> None:
        """Let in generations from the line while there are free rows, in order. Generations that join together with
        the same prompt (a comparison's SD and EASD) compute its prefix once per model: the later ones start from a
        copy. A prompt longer than PREFILL_CHUNK is computed first (`Prompt`), whole or, with
        `prompts_between_steps`, a piece per call while the generations behind it wait their turn."""
        twins: dict[tuple[str, tuple[int, ...]], int] = {}  # (model, prefix) -> the row that took it in this call
        while self.waiting and len(self.generations) < self.max_rows:
            generation = self.waiting[0]
            if generation.stopped:  # before its first step, or while its prompt was computed
                with self._lock:
                    self.waiting.remove(generation)
                self.prompts.pop(generation, None)
                generation.finish(generation.why_stopped)
                continue
            started = time.perf_counter()
            ready = self._prompt_ready(generation, twins)
            generation.trace.stats.seconds += time.perf_counter() - started
            if not ready:
                return
            with self._lock:
                self.waiting.remove(generation)
            started = time.perf_counter()
            start = generation.start or Start.afresh(generation)
            row, room = len(self.generations), generation.capacity
            for model, prefix in prefixes(generation, start).items():
                state = getattr(start, model)
                twin = twins.get((model, prefix)) if prefix and state is None else None
                caches = self.caches[model]
                caches.add_row(list(prefix), room, caches.save_row(twin) if twin is not None else state)
                twins.setdefault((model, prefix), row)
            generation.start = None
            generation.trace.stats.seconds += time.perf_counter() - started
            self.generations.append(generation)

    def _prompt_ready(self, generation: Joining, twins: dict) -> bool:
        """Whether `generation` can join now; computes its long prompt first, or with `prompts_between_steps`
        and others decoding, the next piece of it."""
        if generation.start is not None or not self.use_cache:
            return True
        wanted = prefixes(generation, Start.afresh(generation))
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
        generation.start = prompt.start(len(generation.tokens) - 1)
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

    def end_all(self) -> None:
        """The batch is over: every generation still holding a row or waiting ends as stopped."""
        for generation in self.generations + list(self.waiting):
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


def prefixes(generation: Joining, start: Start) -> dict[str, tuple[int, ...]]:
    """What each model's cache must hold for the row to join: its first `seen` tokens (none for a model it does not use)."""
    return {
        "draft": tuple(generation.tokens[: start.draft_seen]) if generation.uses_draft else (),
        "target": tuple(generation.tokens[: start.target_seen]) if generation.uses_target else (),
    }
