"""The pure acceptance maths, checked on hand-made distributions and closed forms."""

import math

import pytest
import torch

from easd.method import acceptance as acc
from easd.method.settings import overlap_needed


def logits_of(probs) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64).log().float()[None]


# --- entropy ----------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [2, 10, 151936])
def test_entropy_of_uniform_is_log_vocab(vocab):
    assert acc.entropy(torch.zeros(1, vocab)).item() == pytest.approx(math.log(vocab), rel=1e-5)


@pytest.mark.parametrize("p", [0.5, 0.9, 0.01])
def test_entropy_of_two_points_matches_closed_form(p):
    expected = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert acc.entropy(logits_of([p, 1 - p])).item() == pytest.approx(expected, rel=1e-5)


def test_entropy_ignores_masked_tokens_and_is_in_nats():
    logits = torch.tensor([[0.0, 0.0, float("-inf"), float("-inf")]])
    assert acc.entropy(logits).item() == pytest.approx(math.log(2), rel=1e-6)


def test_entropy_is_batch_first():
    logits = torch.stack([torch.zeros(4), torch.tensor([10.0, 0, 0, 0])])
    values = acc.entropy(logits)
    assert values.shape == (2,)
    assert values[0] == pytest.approx(math.log(4)) and values[1] < 0.01


# --- overlap and rules ----------------------------------------------------------------------


def ranked_logits(order: list[int], vocab: int = 10) -> torch.Tensor:
    """Logits whose top tokens are `order`, most likely first."""
    logits = torch.full((vocab,), -10.0)
    for rank, token in enumerate(order):
        logits[token] = 10.0 - rank
    return logits[None]


def test_overlap_counts_shared_top_n_ids():
    draft = ranked_logits([0, 1, 2, 3, 4])
    assert acc.overlap_count(draft, ranked_logits([4, 3, 2, 1, 0]), 5).item() == 5
    assert acc.overlap_count(draft, ranked_logits([0, 1, 2, 3, 9]), 5).item() == 4
    assert acc.overlap_count(draft, ranked_logits([5, 6, 7, 8, 9]), 5).item() == 0
    assert acc.overlap_count(draft, ranked_logits([1, 0, 9]), 2).item() == 2


@pytest.mark.parametrize(
    "tau_o, n, needed",
    [(0.8, 5, 4), (0.6, 5, 3), (0.2, 5, 1), (0.0, 5, 0), (1.0, 5, 5), (0.7, 10, 7), (0.35, 20, 7), (0.5, 3, 2)],
)
def test_overlap_threshold_is_an_integer_count(tau_o, n, needed):
    assert overlap_needed(tau_o, n) == needed


RULE_CASES = [
    # rule, h_draft, h_target, overlap count, fires?   (tau_h = 1.0, tau_o = 0.8, n = 5: needs 4 of 5)
    ("full", 1.0, 1.0, 4, True),  # every comparison is >=: exactly at the thresholds fires
    ("full", 0.999, 1.0, 4, False),
    ("full", 1.0, 0.999, 4, False),
    ("full", 1.0, 1.0, 3, False),
    ("full", 5.0, 5.0, 5, True),
    ("no_overlap", 1.0, 1.0, 0, True),
    ("no_overlap", 0.999, 1.0, 5, False),
    ("no_draft_entropy", 0.0, 1.0, 4, True),
    ("no_draft_entropy", 0.0, 1.0, 3, False),
    ("no_draft_entropy", 9.0, 0.999, 5, False),
    ("target_entropy_only", 0.0, 1.0, 0, True),
    ("target_entropy_only", 9.0, 0.999, 5, False),
]


@pytest.mark.parametrize("rule, h_draft, h_target, overlap, fires", RULE_CASES)
def test_rules_at_their_thresholds(rule, h_draft, h_target, overlap, fires):
    got = acc.rule_fires(
        rule, torch.tensor([h_draft]), torch.tensor([h_target]), torch.tensor([overlap]), tau_h=1.0, tau_o=0.8, top_n=5
    )
    assert got.tolist() == [fires]


def test_rule_works_on_plain_numbers_for_what_if():
    assert acc.rule_fires("full", 1.5, 2.0, 4, tau_h=1.5, tau_o=0.8, top_n=5) is True
    assert acc.rule_fires("full", 1.5, 2.0, 3, tau_h=1.5, tau_o=0.8, top_n=5) is False


# --- sampling distributions, the standard test, residual and penalty ---------------------------


def test_greedy_sampling_distribution_is_one_hot():
    probs = acc.sampling_probs(logits_of([0.2, 0.5, 0.3]), temperature=0, top_p=1.0)
    assert probs.tolist() == [[0.0, 1.0, 0.0]]


def test_top_p_keeps_smallest_set_reaching_the_mass():
    logits = logits_of([0.5, 0.3, 0.15, 0.05])
    assert acc.sampling_probs(logits, 1.0, 0.6)[0].tolist() == pytest.approx([0.5 / 0.8, 0.3 / 0.8, 0, 0])
    assert acc.sampling_probs(logits, 1.0, 0.5)[0].tolist() == pytest.approx([1, 0, 0, 0])
    assert acc.sampling_probs(logits, 1.0, 1.0)[0].tolist() == pytest.approx([0.5, 0.3, 0.15, 0.05])


def test_temperature_scales_logits():
    probs = acc.sampling_probs(torch.tensor([[0.0, math.log(4)]]), temperature=2.0, top_p=1.0)
    assert probs[0].tolist() == pytest.approx([1 / 3, 2 / 3])


def test_accept_probability_is_min_one_ratio():
    p, q = torch.tensor([[0.2, 0.8]]), torch.tensor([[0.4, 0.6]])
    assert acc.accept_probability(p, q, torch.tensor([0])).item() == pytest.approx(0.5)
    assert acc.accept_probability(p, q, torch.tensor([1])).item() == pytest.approx(1.0)


def test_standard_accept_never_takes_a_zero_probability_token():
    assert acc.standard_accept(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.99999])).tolist() == [False, True]


def test_residual_is_normalized_positive_part():
    p, q = torch.tensor([[0.5, 0.3, 0.2]]), torch.tensor([[0.7, 0.1, 0.2]])
    assert acc.residual_probs(p, q)[0].tolist() == pytest.approx([0.0, 1.0, 0.0])
    assert acc.residual_probs(p, p)[0].tolist() == pytest.approx([0.5, 0.3, 0.2])


def test_greedy_penalty_takes_best_other_target_token():
    logits = logits_of([0.1, 0.6, 0.3])
    assert acc.penalty_probs(logits, torch.tensor([1]), 0, 1.0)[0].tolist() == [0.0, 0.0, 1.0]


def test_sampling_penalty_masks_and_renormalizes():
    logits = logits_of([0.5, 0.3, 0.2])
    assert acc.penalty_probs(logits, torch.tensor([0]), 1.0, 1.0)[0].tolist() == pytest.approx([0.0, 0.6, 0.4])


def test_penalty_falls_back_to_full_distribution_when_top_p_kept_only_the_refused_token():
    logits = logits_of([0.7, 0.2, 0.1])  # top_p 0.5 keeps only token 0
    probs = acc.penalty_probs(logits, torch.tensor([0]), 1.0, 0.5)[0]
    assert probs.tolist() == pytest.approx([0.0, 2 / 3, 1 / 3])


# --- the statistical invariant: SD reproduces the target's sampling distribution ----------------


def sd_first_token_counts(p_logits, q_logits, temperature, top_p, samples, seed):
    """Draft one token from q̃, test it against p̃, resample on rejection: vectorized over samples."""
    g = torch.Generator().manual_seed(seed)
    p_tilde = acc.sampling_probs(p_logits, temperature, top_p).expand(samples, -1)
    q_tilde = acc.sampling_probs(q_logits, temperature, top_p).expand(samples, -1)
    drafted = acc.draw(q_tilde, g)
    accepted = acc.standard_accept(acc.accept_probability(p_tilde, q_tilde, drafted), torch.rand(samples, generator=g))
    resampled = acc.draw(acc.residual_probs(p_tilde, q_tilde), g)
    tokens = torch.where(accepted, drafted, resampled)
    return torch.bincount(tokens, minlength=p_logits.shape[-1]).float() / samples


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8)])
def test_sampling_sd_reproduces_target_distribution(temperature, top_p):
    g = torch.Generator().manual_seed(0)
    p_logits, q_logits = torch.randn(1, 12, generator=g) * 1.5, torch.randn(1, 12, generator=g) * 1.5
    target = acc.sampling_probs(p_logits, temperature, top_p)[0]
    distances = []
    for samples in (1_000, 10_000, 100_000, 1_000_000):
        counts = sd_first_token_counts(p_logits, q_logits, temperature, top_p, samples, seed=samples)
        distances.append(0.5 * (counts - target).abs().sum().item())  # total variation
    assert distances == sorted(distances, reverse=True), distances
    assert distances[-1] < 0.003, distances
    draft = acc.sampling_probs(q_logits, temperature, top_p)[0]
    assert 0.5 * (draft - target).abs().sum().item() > 0.2  # the draft alone is far off: the test can fail
