"""One row cannot break the batch: a row whose numbers fail ends alone, with one line; the others go on.

Real tiny models in float32. A row's settings are forced past `validate()` (as a bug or a future
code path might) so that its own maths overflow: temperature 1e-38 turns logits / T into
inf - inf = NaN. The batch must end that row alone and leave every other row equal to its solo run.
"""

import math
import time
from dataclasses import replace

import pytest
import torch

from easd.errors import SettingsError
from easd.method import acceptance as acc
from easd.method.compare import DEFAULT_METHODS
from easd.method.generation import Generation
from easd.method.settings import MIN_TEMPERATURE, MIN_TOP_P, DecodeSettings
from easd.method.step import Batch
from easd.serving.worker import Worker

HONEST = [
    DecodeSettings(method="sd", max_new_tokens=40),
    DecodeSettings(method="easd", temperature=0.9, top_p=0.95, seed=4, max_new_tokens=40),
    DecodeSettings(method="target", temperature=0.7, seed=2, max_new_tokens=30),
]


def attacker(pair, method: str) -> Generation:
    """A row whose temperature overflows its sampling: validate() refuses 1e-38, so it is set afterwards."""
    generation = Generation(pair, "attacker", DecodeSettings(method=method, temperature=0.8, max_new_tokens=40))
    generation.settings = replace(generation.settings, temperature=1e-38)
    return generation


def solo_ids(pair, prompt: str, settings: DecodeSettings) -> list[int]:
    return Generation(pair, prompt, settings).run().token_ids


@pytest.mark.parametrize("method", ["easd", "target", "draft"])  # fails while drafting, in the verdict, in a draft step
def test_a_row_whose_sampling_overflows_ends_alone_and_the_others_equal_their_solo_runs(tiny_pair, method):
    honest = [Generation(tiny_pair, f"user {i}", settings) for i, settings in enumerate(HONEST)]
    bad = attacker(tiny_pair, method)
    Batch(tiny_pair, [honest[0], bad, *honest[1:]]).run()
    assert bad.trace.stats.stop_reason == "error" and bad.trace.records == []
    message = str(bad.error)
    assert "\n" not in message and "token 0" in message and "NaN or infinite" in message and "went on" in message
    assert "RuntimeError" not in message and "probability tensor" not in message  # no raw torch text
    for i, generation in enumerate(honest):
        assert generation.error is None and generation.trace.stats.stop_reason != "error"
        assert generation.trace.token_ids == solo_ids(tiny_pair, f"user {i}", HONEST[i])


def test_a_row_that_fails_mid_run_keeps_the_tokens_it_had(tiny_pair):
    settings = DecodeSettings(method="sd", temperature=0.8, seed=1, max_new_tokens=60)
    row = Generation(tiny_pair, "a run that breaks later", settings)
    other = Generation(tiny_pair, "a run that goes on", DecodeSettings(method="sd", max_new_tokens=60))
    blocks = iter(Batch(tiny_pair, [row, other]))
    for block in blocks:
        if block.generation is row and len(row.trace.records) >= 5:
            break
    kept = row.trace.token_ids
    row.settings = replace(row.settings, temperature=1e-38)  # from the next block on, its sampling overflows
    for _ in blocks:
        pass
    assert row.trace.stats.stop_reason == "error" and row.trace.token_ids == kept
    assert f"token {len(kept)}" in str(row.error)
    assert other.trace.token_ids == solo_ids(tiny_pair, "a run that goes on", other.settings)


def test_non_finite_logits_are_caught_before_sampling():
    fine = torch.tensor([[0.0, float("-inf"), 2.0]])  # -inf masks a token: allowed
    assert acc.draw(acc.sampling_probs(fine, 1.0, 1.0), torch.Generator().manual_seed(0)).item() in (0, 2)
    for bad in ([[0.0, float("nan"), 1.0]], [[float("inf"), 0.0, 0.0]], [[float("-inf")] * 3]):
        with pytest.raises(acc.NotADistribution):
            acc.draw(acc.sampling_probs(torch.tensor(bad), 1.0, 1.0), torch.Generator().manual_seed(0))
    with pytest.raises(acc.NotADistribution):
        acc.draw(acc.sampling_probs(torch.tensor([[5.0, 10.0]]), 1e-38, 1.0), None)  # the overflow itself: 5e38 is inf


def test_a_models_nan_or_infinite_logits_end_its_row_and_a_masked_token_does_not():
    """The check on each model's raw logits (one reduction per row): a NaN among finite values, +inf, or a row of
    -inf alone is refused; -inf beside finite values is a masked token."""
    from types import SimpleNamespace

    from easd.method.step import RowFailure, _finite

    plan = SimpleNamespace(position=3)
    masked = torch.tensor([[0.0, float("-inf"), 2.0], [1.0, 1.0, 1.0]])
    assert _finite(masked, "target", plan) is masked
    for bad in (float("nan"), float("inf")):
        logits = masked.clone()
        logits[1, 2] = bad
        with pytest.raises(RowFailure, match="the target model gave NaN or infinite logits at token 3"):
            _finite(logits, "target", plan)
    with pytest.raises(RowFailure):
        _finite(torch.full((1, 3), float("-inf")), "draft", plan)


def test_the_attacker_in_a_shared_batch_gets_one_line_and_the_other_user_their_solo_result(tiny_pair):
    worker = Worker(tiny_pair, max_rows=4, row_tokens=400)
    honest_settings = DecodeSettings(temperature=0.9, top_p=0.95, seed=7, max_new_tokens=60)
    honest = worker.submit(
        [Generation(tiny_pair, "honest", replace(honest_settings, method=m)) for m in DEFAULT_METHODS.values()], owner="a"
    )
    bad = worker.submit([attacker(tiny_pair, m) for m in DEFAULT_METHODS.values()], owner="b")
    for ticket in (honest, bad):  # no deadline of its own: a busy machine takes longer; pytest-timeout catches a hang
        assert ticket.join()
    assert bad.error is not None and "\n" not in str(bad.error) and "NaN or infinite" in str(bad.error)
    assert honest.error is None
    assert [t.token_ids for t in honest.traces()] == [
        solo_ids(tiny_pair, "honest", replace(honest_settings, method=m)) for m in DEFAULT_METHODS.values()
    ]
    later = worker.submit([Generation(tiny_pair, "later", replace(honest_settings, method=m)) for m in DEFAULT_METHODS.values()])
    assert later.join() and later.error is None  # the worker serves on


@pytest.mark.parametrize("temperature", [1e-38, 1e-40, 5e-324, 1e-4, -0.5, math.inf, math.nan])
def test_a_temperature_between_zero_and_the_minimum_is_refused(temperature):
    with pytest.raises(SettingsError, match=r"--temperature: must be 0 \(greedy\) or a number ≥ 0.001"):
        DecodeSettings(temperature=temperature).validate()


@pytest.mark.parametrize("top_p", [5e-324, 1e-300, 0.0, 1.5])
def test_a_top_p_below_the_minimum_is_refused(top_p):
    with pytest.raises(SettingsError, match="--top-p: must be a number from 0.001 to 1"):
        DecodeSettings(top_p=top_p).validate()


def test_the_documented_minimums_sample_without_trouble(tiny_pair):
    started = time.monotonic()
    settings = DecodeSettings(method="easd", temperature=MIN_TEMPERATURE, top_p=MIN_TOP_P, max_new_tokens=24)
    trace = Generation(tiny_pair, "edge", settings).run()
    assert trace.stats.stop_reason in ("eos", "max_new_tokens") and time.monotonic() - started < 30
    assert DecodeSettings(temperature=0).validate().greedy


def test_an_address_holding_half_the_batch_waits_behind_other_addresses(tiny_pair):
    worker = Worker(tiny_pair, max_rows=4, row_tokens=500)  # two comparisons at once
    long = DecodeSettings(max_new_tokens=400, k=12)

    def rows(prompt):
        return [Generation(tiny_pair, prompt, replace(long, method=m)) for m in DEFAULT_METHODS.values()]

    def wait_until(condition, ticket):
        seen = -1
        while not condition():
            assert not ticket.done
            seen = ticket.wait(seen, 0.1)

    floods = [worker.submit(rows(f"flood {i}"), owner=f"f{i}", address="10.0.0.9") for i in (1, 2)]
    wait_until(lambda: floods[1].position == 0, floods[1])  # the flooder fills the batch
    floods.append(worker.submit(rows("flood 3"), owner="f3", address="10.0.0.9"))
    other = worker.submit(rows("another class"), owner="o", address="10.0.0.7")
    assert (floods[2].position, other.position) == (1, 2)
    floods[0].cancel()  # room for one comparison: the flooder still holds half the rows, so the other address goes first
    wait_until(lambda: other.position == 0, other)
    assert floods[2].position == 1 and worker.holding(address="10.0.0.9") == 2
    for ticket in (*floods, other):
        ticket.cancel()
        assert ticket.join(60)
    assert worker.holding(address="10.0.0.9") == worker.holding(address="10.0.0.7") == 0
