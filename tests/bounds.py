"""How far two float32 computations of the same tiny-pair numbers may differ, derived rather than read off one machine.

Where a test compares a number computed two ways whose sums are grouped differently (a row's cache against a full
recompute, a batch against one row, an AVX-512 CPU's kernels against an AVX2 one's), equality holds only up to
float32's rounding. Its size follows from what is summed: a dot product of n terms rounds, in the usual probabilistic
model of rounding (Higham, "Accuracy and Stability of Numerical Algorithms", §2.8), by about √n · ε of its terms'
magnitude, and each of the model's layers passes its rounding on, so a logit may move by

    δ = layers · √width · ε · max|logit|        (ε = 2⁻²³, width: the model's widest sum, its MLP)

A quantity computed from the logits moves by a multiple of δ that calculus gives: log-softmax by at most 2δ, an
entropy H by at most 4δ·H (dH = −Σ p_i (dz_i − Σ p dz)(log p_i + H)), a probability by a factor of at most e^(2δ).
Any real fault (a wrong position, a wrong prompt in the cache) moves these numbers by orders of magnitude more.
"""

from __future__ import annotations

import math

import torch

from easd.pairs.tiny import INTERMEDIATE, TARGET_LAYERS

EPS32 = torch.finfo(torch.float32).eps


def logit_rounding(logits: torch.Tensor) -> float:
    """δ: how far the tiny target's float32 logits may move when their sums are grouped otherwise."""
    return TARGET_LAYERS * math.sqrt(INTERMEDIATE) * EPS32 * float(logits.abs().max())


def entropy_rounding(delta: float, entropy: float) -> float:
    """How far an entropy (nats) of logits that may each move by `delta` may move."""
    return 4 * delta * entropy


def probability_rounding(delta: float, softmaxes: int = 1) -> float:
    """The relative change of a probability after `softmaxes` log-softmaxes of logits that each may move by `delta`
    (a softmax of a difference of log-softmaxes counts each)."""
    return math.expm1(2 * delta * softmaxes)


_DELTAS: dict[int, float] = {}


def pair_rounding(pair) -> float:
    """δ for the tiny pair's target, at the scale of its logits over a reference prompt (computed once per pair)."""
    if id(pair) not in _DELTAS:
        tokens = pair.tokenizer.encode("Tom has 3 apples and buys 5 more. def add(a, b): The answer is")
        caches = pair.target.caches(pair.vocab_size)
        caches.add_row([], len(tokens) + 1)
        _DELTAS[id(pair)] = logit_rounding(caches.logits({0: tokens}, {0: len(tokens)})[0])
    return _DELTAS[id(pair)]


def same_entropies(these: list[float], those: list[float], delta: float) -> bool:
    """Whether two runs' entropies are equal up to the rounding of logits that may each move by `delta` (a row that
    records none, as a draft-only row its target's, in both)."""
    close = lambda a, b: a == b or (None not in (a, b) and abs(a - b) <= entropy_rounding(delta, max(a, b)))  # noqa: E731
    return len(these) == len(those) and all(close(a, b) for a, b in zip(these, those))
