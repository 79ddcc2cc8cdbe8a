"""SD's speed taken apart (easd.method.speed): the formula, the counts it reads from a trace, and the Speed panel."""

import dataclasses
import math

import pytest

from easd.method.generation import Generation
from easd.method.settings import DecodeSettings
from easd.method.spec_metrics import SpecMetrics
from easd.method.speed import (
    EXTRA_ROW,
    ONE_PASS,
    PassCost,
    Speed,
    measure_pass_cost,
    predicted_speedup,
)
from easd.method.step import Batch
from easd.render.figures import speed_map
from easd.render.stats import speed_html
from easd.traces import files as trace_io


def test_the_formula_is_leviathans():
    assert predicted_speedup(0.8, 4, c=0.0, r=1.0) == pytest.approx((1 - 0.8**5) / 0.2)  # their eq. 1: 3.36 tokens a pass
    assert predicted_speedup(0.0, 4, c=0.5, r=1.0) == pytest.approx(1 / 3)  # nothing accepted: one token per block
    assert predicted_speedup(1.0, 3, c=0.25, r=2.0) == pytest.approx(4 / 2.75)  # everything accepted
    # a 2-core CPU, measured with llama.cpp's own tools on the embedded pair: c ≈ 0.6, a 5-token check ≈ 3.2 passes
    assert predicted_speedup(0.99, 4, c=0.6, r=3.2) < 1 < predicted_speedup(0.99, 4, c=0.6, r=1.0)


@pytest.fixture(scope="module")
def sd_run(hf_tiny_pair):
    trace = Generation(hf_tiny_pair, "Tom has 3 apples.", DecodeSettings(method="sd", max_new_tokens=80)).run()
    trace.info.update(measure_pass_cost(hf_tiny_pair, rows=2).info())
    return trace


def test_acceptance_is_counted_per_draft_position_from_the_blocks(sd_run):
    metrics = SpecMetrics.of([sd_run])
    judged, kept = metrics.reached_per_position, metrics.accepted_per_position
    assert sum(kept) == sum(r.origin == "draft_accepted" for r in sd_run.records)
    assert judged[0] == sum(bool(b.drafted) for b in sd_run.blocks)  # every block judges its first draft
    assert all(a <= j for a, j in zip(kept, judged)) and judged == sorted(judged, reverse=True)
    for i in range(1, len(judged)):  # a block reaches position i + 1 only if it accepted position i
        assert judged[i] <= kept[i - 1]


def test_the_breakdown_reads_the_runs_own_passes(sd_run):
    speed = Speed.of_trace(sd_run)
    stats = sd_run.stats
    assert stats.draft_rows == stats.draft_calls and stats.target_rows == stats.target_calls  # alone: one row a pass
    assert speed.c == pytest.approx(stats.draft_seconds / stats.draft_calls / sd_run.info[ONE_PASS])
    assert speed.r == pytest.approx(stats.target_seconds / stats.target_calls / sd_run.info[ONE_PASS])
    assert speed.tokens_per_pass == pytest.approx(len(sd_run.records) / stats.target_calls)
    assert speed.predicted == pytest.approx(predicted_speedup(speed.alpha, speed.k, speed.c, speed.r))
    assert 0 < stats.target_seconds + stats.draft_seconds <= stats.seconds  # passes are part of the run's time


def test_a_run_that_shared_its_passes_is_read_against_a_pass_over_as_many_rows(hf_tiny_pair, sd_run):
    """The page's two lanes share every pass: their time is compared with a target pass over two rows, not one (a
    class once read c = 1.65 there while bench, one row alone, measured 0.56)."""
    settings = DecodeSettings(method="sd", max_new_tokens=40)
    lanes = Batch(hf_tiny_pair, [Generation(hf_tiny_pair, p, settings) for p in ("Tom has 3 apples.", "Ann has 5.")]).run()
    for lane in lanes:
        lane.info.update(sd_run.info)
        stats, cost = lane.stats, PassCost.of_info(lane.info)
        draft_rows, target_rows = stats.draft_rows / stats.draft_calls, stats.target_rows / stats.target_calls
        assert 1 < draft_rows <= 2 and 1 < target_rows <= 2  # both lanes in the passes, until one of them ends
        speed = Speed.of_trace(lane)
        assert speed.rows == pytest.approx(target_rows)
        assert speed.c == pytest.approx(stats.draft_seconds / stats.draft_calls / cost.at(draft_rows))
        assert speed.r == pytest.approx(stats.target_seconds / stats.target_calls / cost.at(target_rows))
        assert speed.measured == pytest.approx(len(lane.records) / stats.seconds * cost.at(target_rows))
        alone = Speed.of_trace(dataclasses.replace(lane, info={ONE_PASS: cost.one_row}))  # the unit of one row: dearer
        assert alone.c == pytest.approx(speed.c * cost.at(draft_rows) / cost.one_row)


def test_the_unit_is_a_line_through_the_passes_measured():
    cost = PassCost(0.010, 0.002)
    assert (cost.at(1), cost.at(2), cost.at(8), cost.at(0)) == pytest.approx((0.010, 0.012, 0.024, 0.010))
    assert PassCost.of_info(cost.info()) == cost
    assert PassCost.of_info({ONE_PASS: 0.01}) == PassCost(0.01, 0.0)  # a trace from before: one row's pass
    for extra in ("0.01", True, -1.0, math.nan, math.inf):
        assert PassCost.of_info({ONE_PASS: 0.01, EXTRA_ROW: extra}) is None


def test_pass_times_survive_a_trace_file(sd_run, tmp_path):
    trace_io.save([sd_run], tmp_path / "t.json")
    [loaded] = trace_io.load(tmp_path / "t.json")
    assert loaded.stats == sd_run.stats and Speed.of_trace(loaded) == Speed.of_trace(sd_run)


@pytest.mark.parametrize("one_pass", [None, "0.05", True, 0.0, -1.0, math.nan, math.inf])
def test_no_breakdown_without_a_measured_pass(sd_run, one_pass):
    trace = dataclasses.replace(sd_run, info={**sd_run.info, ONE_PASS: one_pass})
    assert Speed.of_trace(trace) is None and speed_html(trace) == ""


def test_no_breakdown_for_a_single_model_run(hf_tiny_pair, sd_run):
    target = Generation(hf_tiny_pair, "Tom has 3 apples.", DecodeSettings(method="target", max_new_tokens=10)).run()
    target.info[ONE_PASS] = sd_run.info[ONE_PASS]
    assert Speed.of_trace(target) is None


def test_the_panel_and_the_map_show_the_runs_figures(sd_run):
    speed = Speed.of_trace(sd_run)
    panel = str(speed_html(sd_run))
    assert "Speed, explained" in panel and f"c = {speed.c:.2f}" in panel and f"{speed.measured:.2f}×" in panel
    figure = speed_map(sd_run)
    [contour, point] = figure.data
    assert (point.x[0], point.y[0]) == (speed.k, pytest.approx(speed.alpha))
    k_column = list(contour.x).index(speed.k)
    nearest = min(range(len(contour.y)), key=lambda i: abs(contour.y[i] - speed.alpha))
    assert contour.z[nearest][k_column] == pytest.approx(
        predicted_speedup(contour.y[nearest], speed.k, speed.c, speed.r), rel=1e-6
    )  # the map passes through the run's own cost at its own k


def test_bench_prints_the_pages_figures_beside_the_solo_ones(capsys):
    from easd.cli import main

    assert main(["bench", "--pair", "tiny-random", "--prompts", "1", "--max-new-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "  llama.cpp, exact kernels; CPU : " in out and "AVX2 = 1" in out  # which kernels made the figures
    assert "the page's SD lane at k=4, sharing its passes with the EASD lane" in out
    for line in ("against a pass over as many rows (the panel): c ", "solo, against the same one-row pass:"):
        assert line in out


def test_bench_with_a_temperature_samples_every_row_under_one_protocol_and_drops_the_greedy_peers(tiny_pair, capsys):
    """`bench --temperature 0.7`: every row of ours decodes at 0.7 within top-p, SMC-SD's particles and SpecGuard's
    candidates with it (as eval's one protocol places them); the backend's own generation and reference loop, which
    decode greedily, are left out and said so, as is greedy SD's exactness line."""
    from easd.cli import main
    from easd.lab.runs.protocol import Protocol
    from easd.lab.speed.bench import methods_of
    from easd.lab.speed.timing import PROMPTS, BenchPlan
    from easd.method.methods import METHODS

    plan = BenchPlan(PROMPTS[:1], 6, {"sd": [4], "smc": [4], "specguard": [0.7]}, protocol=Protocol(0.7, 1.0, "a test"))
    rows, sampled = methods_of(tiny_pair, plan), set()
    assert not [name for name in rows if "reference" in name or "assisted" in name or "generate" in name]
    for name, decode in rows.items():
        settings = decode(PROMPTS[1]).settings
        assert (settings.temperature, settings.top_p) == (0.7, 1.0), name
        own = METHODS[settings.method].own(settings) if METHODS[settings.method].settings else None
        assert all(getattr(own, t) == 0.7 for t in ("draft_temperature", "target_temperature", "temperature") if hasattr(own, t))
        sampled.update(t for t in ("draft_temperature", "target_temperature", "temperature") if hasattr(own, t))
    assert sampled == {"draft_temperature", "target_temperature", "temperature"}  # SMC-SD's two and SpecGuard's one
    command = ["bench", "--pair", "tiny-random", "--methods", "sd,smc", "--temperature", "0.7"]
    assert main([*command, "--prompts", "1", "--max-new-tokens", "8", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "new tokens, sampling protocol: every method sampled at temperature 0.7, top-p 1 (as --temperature asks)" in out
    assert (
        "own generation and reference loop: not run here: they decode greedily" in out
        and "SMC-SD (SMC particles=4) ÷ target-only" in out
    )
    assert "greedy SD text equals target-only" not in out and "the page's SD lane" not in out
