"""Re-evaluating the rule from a finished trace agrees with what the loop decided."""

import numpy as np
import pytest

from easd.method import whatif
from easd.method.summary import summarize


@pytest.mark.parametrize("rule", ["full", "no_overlap", "no_draft_entropy", "target_entropy_only"])
def test_what_if_at_the_run_settings_reproduces_triggered(run, rule):
    trace = run(method="sd", rule=rule, max_new_tokens=48, temperature=1.0, record_top=20)
    recorded = np.array([bool(r.triggered) for r in trace.records])
    assert recorded.any() and not recorded.all()
    assert (whatif.would_fire(trace, rule, 1.0, 0.8, 5) == recorded).all()


def test_first_would_be_penalty_in_sd_is_easds_first_penalty(run):
    sd = run(method="sd", max_new_tokens=48, seed=2, temperature=1.0)
    easd = run(method="easd", max_new_tokens=48, seed=2, temperature=1.0)
    marks = whatif.would_penalize(sd, "full", 1.0, 0.8, 5)
    assert marks.any() and int(np.argmax(marks)) == summarize(easd)["first_penalty_position"]


def test_other_n_uses_the_kept_candidates(run):
    trace = run(method="sd", max_new_tokens=30, record_top=20)
    at_20 = whatif.overlap_counts(trace, 20)
    drafted = whatif.drafted_positions(trace)
    assert np.all(at_20[drafted] <= 20) and np.all(np.isnan(at_20[~drafted]))
    assert np.isnan(whatif.overlap_counts(run(method="sd", max_new_tokens=10), 20)).all()  # only 5 kept: unknown


def test_fire_share_grid_shape_and_monotonicity(run):
    trace = run(method="sd", max_new_tokens=48, record_top=20)
    tau_hs, tau_os = [0.0, 0.5, 1.0, 2.0, 9.0], [0.0, 0.4, 0.8, 1.0]
    grid = whatif.fire_share_grid(trace, "full", tau_hs, tau_os, 5)
    assert grid.shape == (5, 4)
    assert np.all(np.diff(grid, axis=0) <= 0) and np.all(np.diff(grid, axis=1) <= 0)  # stricter never fires more
    assert grid[0, 0] == 1.0 and grid[-1, -1] == 0.0
