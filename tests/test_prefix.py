"""EASD runs built on an SD run's shared prefix equal EASD runs from scratch."""

import dataclasses

import pytest
from conftest import PROMPTS

from easd.method.generation import Generation
from easd.method.prefix import easd_after_sd
from easd.method.settings import DecodeSettings
from easd.pairs.loading import Runtime

VARIANTS = [
    ("full", 1.0, 0.8),
    ("no_overlap", 1.0, 0.8),
    ("no_draft_entropy", 1.5, 0.6),
    ("target_entropy_only", 2.0, 0.8),
    ("full", 9.0, 0.8),
]


@pytest.fixture(scope="module")
def tiny_bf16():

    from easd.pairs.tiny import load_tiny_pair

    return load_tiny_pair(Runtime(backend="transformers", dtype="bfloat16"))


SAMPLING = [{}, {"temperature": 1.0, "top_p": 0.95}, {"temperature": 0.7, "top_p": 0.9, "entropy": "sampling"}]


@pytest.mark.slow  # an EASD run resumed from SD's prefix equals its own run, greedy and sampled, on both backends
@pytest.mark.parametrize("sampling", SAMPLING)
def test_shared_prefix_runs_equal_independent_runs(tiny_pair, sampling):
    assert_shared_equals_alone(tiny_pair, sampling)


@pytest.mark.slow  # EASD resumed from SD's prefix equals its own run where bfloat16 rounds differently
def test_shared_prefix_runs_equal_independent_runs_in_bfloat16(tiny_bf16):
    """Where re-reading the prefix in one pass would round differently (transformers alone has bfloat16). Sampled with
    the sampling entropy, the most any resume carries (the random state, both entropies); greedy and plain sampling
    resume the same way in float32, on both backends (above), and were two more runs of this test's 11 CPU-seconds."""
    assert_shared_equals_alone(tiny_bf16, SAMPLING[-1])


def assert_shared_equals_alone(pair, sampling: dict) -> None:
    """Every EASD variant built on an SD run's prefix equals its run from scratch, bit for bit."""
    base = DecodeSettings(method="sd", max_new_tokens=48, seed=7, **sampling)
    resumed_somewhere = False
    for prompt in PROMPTS:
        sd = Generation(pair, prompt, base, keep_kv=True)
        sd.run()
        for rule, tau_h, tau_o in VARIANTS:
            settings = dataclasses.replace(base, method="easd", rule=rule, tau_h=tau_h, tau_o=tau_o)
            shared = easd_after_sd(sd, settings)
            alone = Generation(pair, prompt, settings).run()
            assert shared.trace.records == alone.records, (prompt, rule)  # bit for bit: tokens, signals, triggered
            assert shared.trace.blocks == alone.blocks and shared.trace.settings == settings
            assert (shared.trace.stats.target_calls, shared.trace.stats.draft_calls) == (
                alone.stats.target_calls,
                alone.stats.draft_calls,
            )
            resumed_somewhere |= 0 < shared.saved_seconds < sd.trace.stats.seconds
    assert resumed_somewhere  # some variants really started mid-way


def test_a_variant_that_never_fires_is_the_sd_run(tiny_pair):
    sd = Generation(tiny_pair, PROMPTS[0], DecodeSettings(method="sd", max_new_tokens=30), keep_kv=True)
    sd.run()
    shared = easd_after_sd(sd, DecodeSettings(method="easd", tau_h=50, max_new_tokens=30))
    assert shared.trace.token_ids == sd.trace.token_ids and shared.saved_seconds == sd.trace.stats.seconds
    assert shared.trace.settings.method == "easd" and not any(r.triggered for r in shared.trace.records)


def test_incompatible_settings_are_refused(tiny_pair):
    sd = Generation(tiny_pair, PROMPTS[0], DecodeSettings(method="sd", max_new_tokens=10), keep_kv=True)
    sd.run()
    with pytest.raises(ValueError, match="same k"):
        easd_after_sd(sd, DecodeSettings(method="easd", k=2, max_new_tokens=10))
