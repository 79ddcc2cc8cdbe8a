"""How long a request will wait and run, from the shared batch's measured pace: the arithmetic, pure.

The worker (easd.serving.worker) measures its `Pace` as it decodes: how long a step takes with how
many rows, the tokens a generation emits per step, and how much of its token budget a finished
generation used. From it, `schedule` plays the line forward step by step: each running request
ends when its slowest generation has emitted what it is expected to; a waiting one starts when
the requests ahead of it have freed enough rows (the line is served in order), and ends its own
expected steps later. A step's time depends on how many rows it decodes: on a CPU it grows in
proportion (the embedded pair on 2 cores: about 0.33 s per row from 1 to 8 rows, the batch's
total speed flat), so a batch that empties as the class's last requests end speeds up, and a
schedule that took every step to cost what one costs now was off by half.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

SMOOTHING = 0.3  # weight of the newest finished generation in the running mean of the budget used
RECENT = 16  # steps each figure is read from: enough to smooth a step's noise, few enough to follow a changing batch
GUESS_ROW_S = 0.35  # seconds a step takes per row before any is measured (the embedded pair on 2 CPU cores)


@dataclass
class Pace:
    """The batch's measured speed (first guesses until something is measured).

    A step's time is a median, not a mean: a step is noisy, and one that a request joined also computed its prompt
    (2 s or more for a long one on a CPU, against 0.3 s a row for a step); such steps teach the
    tokens per step but not a step's time. Tokens per step are a mean (`tokens_per_step`).
    """

    budget_used: float = 1.0  # of a generation's max_new_tokens, the share it emits before it ends
    steps: int = 0  # steps measured so far: estimates are guesses until this is > 0
    seconds: dict[int, deque] = field(default_factory=dict)  # rows -> the seconds of its last RECENT steps
    tokens: deque = field(default_factory=lambda: deque(maxlen=RECENT))  # (tokens, generations) of the last steps
    emitted: tuple[int, int] = (0, 0)  # (tokens, generations) summed over every step measured

    def step_s(self, rows: float) -> float:
        """Seconds one step of `rows` rows takes (with chunks: one round of steps, one call): as measured at that
        size, or in proportion to the nearest size measured (`rows` may be a mean: groups that sit steps out)."""
        if self.seconds.get(rows):
            return statistics.median(self.seconds[rows])
        if not self.seconds:
            return GUESS_ROW_S * rows
        nearest = min(self.seconds, key=lambda measured: (abs(measured - rows), -measured))
        return statistics.median(self.seconds[nearest]) * rows / nearest

    @property
    def tokens_per_step(self) -> float:
        """Tokens one generation emits per step (more for SD and EASD; with chunks, per round): the recent steps'
        tokens over their generations, a mean and not a median, because a step may emit nothing and the next many
        (SpecGuard drafts its candidates in steps of no token, then keeps a step's tokens at once; SMC-SD emits what
        every particle agrees on). Where the recent steps emitted nothing, every step's; where none has, 1, a guess."""
        recent = (sum(tokens for tokens, _ in self.tokens), sum(generations for _, generations in self.tokens))
        for tokens, generations in (recent, self.emitted):
            if tokens > 0:
                return tokens / generations
        return 1.0

    def step(self, seconds: float, rows: int, tokens: int, joined: bool = False, generations: int | None = None) -> None:
        """One step of `rows` rows took `seconds` and its `generations` (as many as rows where not given; fewer where
        some hold a group of rows) emitted `tokens` in all; `joined`: a request joined before it, so its time includes
        computing a prompt."""
        generations = rows if generations is None else generations
        if not rows:
            return
        self.tokens.append((tokens, generations))
        self.emitted = (self.emitted[0] + tokens, self.emitted[1] + generations)
        if not joined:
            self.seconds.setdefault(rows, deque(maxlen=RECENT)).append(seconds)
        self.steps += 1

    def finished(self, emitted: int, budget: int, count: int) -> None:
        """A generation ended after `emitted` of its `budget` tokens; `count` is how many ended before it."""
        share = min(1.0, emitted / max(1, budget))
        self.budget_used = share if count == 0 else (1 - SMOOTHING) * self.budget_used + SMOOTHING * share

    def tokens_left(self, emitted: int, budget: int) -> float:
        """Tokens a generation that emitted `emitted` of `budget` is expected to emit still."""
        expected = self.budget_used * budget
        return max(expected - emitted, 0.1 * (budget - emitted))  # past the usual length, it may still go on a while

    def steps_for(self, tokens: float) -> float:
        return tokens / self.tokens_per_step


@dataclass(frozen=True)
class Job:
    """A request as the schedule sees it: the rows it holds, the steps of decoding it has left, and the rows it
    decodes a step on average (fewer than it holds where a group steps less often: easd.method.step.Batch's allowance)."""

    rows: int
    steps_left: float
    decoding: float | None = None  # None: all its rows, every step

    @property
    def rows_a_step(self) -> float:
        return self.rows if self.decoding is None else self.decoding


def schedule(
    running: list[Job], line: list[Job], max_rows: int, step_s: Callable[[int], float]
) -> tuple[list[float], list[tuple[float, float]]]:
    """Seconds from now until each running job ends; and for each job in line, in order, until it starts and ends.
    `step_s(rows)`: the seconds of a step of that many rows."""
    jobs = [*running, *line]
    left = [job.steps_left for job in jobs]
    starts, ends = [0.0] * len(jobs), [0.0] * len(jobs)
    active, waiting = list(range(len(running))), list(range(len(running), len(jobs)))
    now, free = 0.0, max_rows - sum(job.rows for job in running)
    while active or waiting:
        while waiting and jobs[waiting[0]].rows <= free:  # in order: the head waits for room, nobody overtakes it
            free -= jobs[waiting[0]].rows
            starts[waiting[0]] = now
            active.append(waiting.pop(0))
        if not active:
            break  # a job bigger than the batch: the worker refuses those before they are in line
        steps = min(left[i] for i in active)  # until the next job ends, the batch's size stays the same
        now += steps * step_s(sum(jobs[i].rows_a_step for i in active))
        for i in list(active):
            left[i] -= steps
            if left[i] <= 1e-9:
                active.remove(i)
                free += jobs[i].rows
                ends[i] = now
    return ends[: len(running)], list(zip(starts[len(running) :], ends[len(running) :]))


def lane_cost(title: str, width: int, allowance: int | None) -> str:
    """What a lane of `width` rows costs the other users of the shared batch, in the page's words ("" for one row, as
    SD's): a group (SMC-SD's particles, SpecGuard's candidates, beams) under the row allowance, or without one."""
    if width <= 1:
        return ""
    held = f"Your {title} lane holds {width} rows of the shared batch"
    if allowance is None or width <= allowance:
        return f"{held}, as {width} SD lanes would: every other user's step waits for all of them."
    return (
        f"{held}; while others decode it takes about {allowance} of every {width} steps (this server lets a lane use "
        f"{allowance} rows a step), so that it slows itself and not their lanes."
    )
