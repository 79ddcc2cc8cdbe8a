"""The wait's arithmetic (easd.serving.estimates), checked on simulated lines, and the worker's estimates on real models."""

from dataclasses import replace

import pytest

from easd.method.compare import DEFAULT_METHODS
from easd.method.generation import Generation
from easd.method.methods import make_settings
from easd.method.settings import DecodeSettings
from easd.serving.estimates import GUESS_ROW_S, RECENT, Job, Pace, lane_cost, schedule
from easd.serving.worker import Worker


def per_row(seconds: float):
    return lambda rows: seconds * rows  # a CPU's step: its time grows with its rows


def test_a_line_behind_a_full_batch_starts_as_rows_free_up_in_order():
    running = [Job(rows=2, steps_left=10.0), Job(rows=2, steps_left=4.0)]
    line = [Job(rows=2, steps_left=6.0), Job(rows=2, steps_left=6.0), Job(rows=4, steps_left=1.0)]
    ends, waiting = schedule(running, line, max_rows=4, step_s=lambda rows: 1.0)  # every step 1 s
    assert ends == [10.0, 4.0]
    # the first waits for the 4-step job's rows, the second for the 10-step job's, the third (4 rows) for both of theirs
    assert waiting == [(4.0, 10.0), (10.0, 16.0), (16.0, 17.0)]


def test_a_batch_that_empties_speeds_up():
    # 4 rows at 0.5 s per row: 2 s a step until the 2-step job ends (4 s), then 1 s a step for the other's 3 steps left
    ends, waiting = schedule([Job(2, 2.0), Job(2, 5.0)], [], max_rows=4, step_s=per_row(0.5))
    assert ends == [4.0, 7.0] and waiting == []
    # one in line takes the freed rows at 4 s and keeps the batch full for its one step (to 6 s); then 2 steps at 1 s
    ends, waiting = schedule([Job(2, 2.0), Job(2, 5.0)], [Job(2, 1.0)], max_rows=4, step_s=per_row(0.5))
    assert ends == [4.0, 8.0] and waiting == [(4.0, 6.0)]


def test_room_in_the_batch_means_no_wait():
    ends, waiting = schedule([Job(2, 5.0)], [Job(2, 3.0), Job(2, 8.0)], max_rows=8, step_s=lambda rows: 1.0)
    assert ends == [5.0] and waiting == [(0.0, 3.0), (0.0, 8.0)]


def test_a_group_that_sits_steps_out_is_scheduled_by_the_rows_it_decodes_a_step():
    """An SD comparison (2 rows, 10 steps) beside SMC-SD's 4 particles under an allowance of 2 (they hold 4 rows, decode
    2 a step on average, and need twice their 5 own steps): each step costs 4 rows' time, not 6."""
    ends, _ = schedule([Job(2, 10.0), Job(4, 10.0, decoding=2.0)], [], max_rows=8, step_s=per_row(0.5))
    assert ends == [20.0, 20.0]
    held, _ = schedule([Job(2, 10.0), Job(4, 10.0)], [], max_rows=8, step_s=per_row(0.5))
    assert held == [30.0, 30.0]  # every step over all 6 rows


def test_a_lane_of_several_rows_is_told_what_it_costs_the_others():
    assert lane_cost("SD", 1, 2) == ""
    assert lane_cost("SMC-SD", 4, 2) == (
        "Your SMC-SD lane holds 4 rows of the shared batch; while others decode it takes about 2 of every 4 steps (this "
        "server lets a lane use 2 rows a step), so that it slows itself and not their lanes."
    )
    assert "as 3 SD lanes would: every other user's step waits for all of them" in lane_cost("SpecGuard", 3, None)
    assert "as 2 SD lanes would" in lane_cost("SpecGuard", 2, 2)  # within the allowance: it takes every step


def test_a_waiting_group_is_let_in_when_its_rows_are_free_not_its_generations(hf_tiny_pair):
    """A request of one SMC-SD generation of 4 particles holds 4 rows: behind a comparison in a batch of 4 rows it
    waits (2 rows free), and its estimate starts when the comparison ends."""
    worker = Worker(hf_tiny_pair, max_rows=4, row_tokens=400)
    first = worker.submit([Generation(hf_tiny_pair, "a", DecodeSettings(method=m, max_new_tokens=200)) for m in ("sd", "easd")])
    while worker.pace.steps < 2:
        first.wait(-1, 0.05)
    smc = worker.submit([Generation(hf_tiny_pair, "b", make_settings(method="smc", smc_particles=4, max_new_tokens=8))])
    assert smc.position == 1 and smc.estimate()[0] > 0
    first.cancel()
    assert first.join(60) and smc.join(60) and smc.error is None


def test_the_pace_learns_each_batch_sizes_step_and_finished_generations():
    pace = Pace()
    assert pace.step_s(4) == pytest.approx(4 * GUESS_ROW_S)  # nothing measured: the first guess
    for _ in range(20):
        pace.step(seconds=0.2, rows=4, tokens=12)  # 3 tokens per generation per step
    pace.step(seconds=5.0, rows=4, tokens=12, joined=True)  # a prompt computed: not a step's time
    assert pace.step_s(4) == pytest.approx(0.2) and pace.tokens_per_step == pytest.approx(3.0)
    assert pace.step_s(2) == pytest.approx(0.1) and pace.step_s(8) == pytest.approx(0.4)  # in proportion, until measured
    for _ in range(3):
        pace.step(seconds=0.15, rows=2, tokens=6)
    assert pace.step_s(2) == pytest.approx(0.15) and pace.step_s(1) == pytest.approx(0.075)  # from the nearest size
    assert pace.steps_for(30) == pytest.approx(10.0)
    for count in range(20):
        pace.finished(emitted=50, budget=100, count=count)
    assert pace.budget_used == pytest.approx(0.5)
    assert pace.tokens_left(emitted=0, budget=100) == pytest.approx(50)
    assert pace.tokens_left(emitted=80, budget=100) == pytest.approx(2.0)  # past the usual length: a little more
    assert pace.tokens_left(emitted=100, budget=100) == 0


def test_steps_that_emit_no_token_slow_the_pace_but_never_stop_it():
    """The pace was the median of tokens per step: 0 after steps that emit nothing (SpecGuard's candidates, SMC-SD's
    cycles whose particles still differ), floored at 1e-6, so a lone user was told "done in about 3205461927 s"."""
    pace = Pace()
    for _ in range(5):  # SpecGuard, 2 rows: three candidate steps emit nothing, then each row's kept step of 8 tokens
        for tokens in (0, 0, 0, 16):
            pace.step(seconds=0.2, rows=2, tokens=tokens)
    assert pace.tokens_per_step == pytest.approx(2.0) and pace.steps_for(100) == pytest.approx(50)
    for _ in range(RECENT):  # recent steps that emitted nothing: every step's pace, not none
        pace.step(seconds=0.2, rows=2, tokens=0)
    assert pace.tokens_per_step == pytest.approx(80 / 72)
    ends, _ = schedule([Job(2, pace.steps_for(100))], [], max_rows=4, step_s=pace.step_s)
    assert ends == [pytest.approx(90 * 0.2)]
    fresh = Pace()
    fresh.step(seconds=0.2, rows=2, tokens=0)
    assert fresh.tokens_per_step == 1.0  # nothing emitted yet: the first guess, as before any step


def test_a_batch_drafting_candidates_is_told_a_wait_it_can_believe(hf_tiny_pair):
    """Through the worker: a SpecGuard generation whose first step drafts its 8 candidates side by side (8 rows) and
    emits nothing (its threshold refuses every step); the estimate is the run's 16 tokens at a token a step (the
    first guess) at most, not 16 million steps."""
    settings = make_settings(
        method="specguard", max_new_tokens=16, specguard_candidates=8, specguard_delimiter=" ", specguard_threshold=1.0
    )
    worker = Worker(hf_tiny_pair, max_rows=8, row_tokens=64)  # its 8 candidates are 8 rows
    stream = worker.submit([Generation(hf_tiny_pair, "question", settings)])
    while worker.pace.steps < 1:
        stream.wait(-1, 0.05)
    end = stream.estimate()[1]
    slowest = max([GUESS_ROW_S * 8, *(s for times in worker.pace.seconds.values() for s in times)])  # a step it read
    assert 0 < end <= 16 * slowest
    stream.cancel()
    assert stream.join(60)


def test_users_in_line_see_their_start_and_end_grow_with_their_place(hf_tiny_pair):
    settings = DecodeSettings(max_new_tokens=300)
    worker = Worker(hf_tiny_pair, max_rows=2, row_tokens=400)
    requests = [
        [Generation(hf_tiny_pair, f"question {i}", replace(settings, method=m)) for m in DEFAULT_METHODS.values()]
        for i in range(4)
    ]
    first = worker.submit(requests[0])
    while worker.pace.steps < 3:  # the pace is measured
        first.wait(-1, 0.05)
    waiting = [worker.submit(r) for r in requests[1:]]
    estimates = [stream.estimate() for stream in waiting]
    assert [s.position for s in waiting] == [1, 2, 3]
    starts, ends = zip(*estimates)
    assert 0 < starts[0] < starts[1] < starts[2] and all(end > start for start, end in estimates)
    assert first.estimate()[1] == pytest.approx(starts[0], abs=0.5)  # the next starts when the first ends
    for stream in [first, *waiting]:
        stream.cancel()
    assert all(stream.join(60) for stream in [first, *waiting])  # the worker is idle before the interpreter exits
