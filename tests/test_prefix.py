"""EASD runs built on an SD run's shared prefix equal EASD runs from scratch."""

import dataclasses

import pytest
from conftest import PROMPTS

from easd.decoding import Generation
from easd.prefix import easd_after_sd
from easd.settings import DecodeSettings

VARIANTS = [
    ("full", 1.0, 0.8),
    ("no_overlap", 1.0, 0.8),
    ("no_draft_entropy", 1.5, 0.6),
    ("target_entropy_only", 2.0, 0.8),
    ("full", 9.0, 0.8),
]


@pytest.mark.parametrize("sampling", [{}, {"temperature": 1.0, "top_p": 0.95}])
@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_shared_prefix_runs_equal_independent_runs(tiny_pair, prompt, sampling):
    base = DecodeSettings(method="sd", max_new_tokens=48, seed=7, **sampling)
    sd = Generation(tiny_pair, prompt, base)
    sd.run()
    resumed_somewhere = False
    for rule, tau_h, tau_o in VARIANTS:
        settings = dataclasses.replace(base, method="easd", rule=rule, tau_h=tau_h, tau_o=tau_o)
        shared = easd_after_sd(sd, settings)
        alone = Generation(tiny_pair, prompt, settings).run()
        assert shared.trace.token_ids == alone.token_ids, (rule, tau_h, tau_o)
        assert [(r.origin, r.block, r.triggered) for r in shared.trace.records] == [
            (r.origin, r.block, r.triggered) for r in alone.records
        ]
        assert shared.trace.blocks == alone.blocks
        assert (shared.trace.stats.target_calls, shared.trace.stats.draft_calls) == (
            alone.stats.target_calls,
            alone.stats.draft_calls,
        )
        assert shared.trace.settings == settings and shared.trace.summary()["penalized"] == alone.summary()["penalized"]
        resumed_somewhere |= 0 < shared.saved_seconds < sd.trace.stats.seconds
    assert resumed_somewhere  # at least one variant really started mid-way


def test_a_variant_that_never_fires_is_the_sd_run(tiny_pair):
    sd = Generation(tiny_pair, PROMPTS[0], DecodeSettings(method="sd", max_new_tokens=30))
    sd.run()
    shared = easd_after_sd(sd, DecodeSettings(method="easd", tau_h=50, max_new_tokens=30))
    assert shared.trace.token_ids == sd.trace.token_ids and shared.saved_seconds == sd.trace.stats.seconds
    assert shared.trace.settings.method == "easd" and not any(r.triggered for r in shared.trace.records)


def test_incompatible_settings_are_refused(tiny_pair):
    sd = Generation(tiny_pair, PROMPTS[0], DecodeSettings(method="sd", max_new_tokens=10))
    sd.run()
    with pytest.raises(ValueError, match="same k"):
        easd_after_sd(sd, DecodeSettings(method="easd", k=2, max_new_tokens=10))
