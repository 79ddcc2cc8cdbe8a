"""The acceptance maths of SD and EASD, as pure functions over tensors.

Notation (stated once, as in the paper and in transformers' `_speculative_sampling`):
  p = the target model's distribution, q = the draft model's distribution,
  c = the drafted token, and a tilde (p̃, q̃) marks the *sampling* distribution after
  temperature and top-p. Greedy decoding is temperature 0, where p̃ and q̃ are one-hot.

Every function is batch-first: tensors have a leading dimension B (the drafted positions of a
block today; several sequences at once later). Nothing here knows about models or caches.
The rule functions use only `>=` and `&`, so they also work on NumPy arrays and pandas
columns, which is how the app re-evaluates a finished trace under other thresholds.
"""

from __future__ import annotations

import torch

from .settings import overlap_needed

# Which conditions each trigger rule needs (README, "The method"). All comparisons are ≥.
RULE_CONDITIONS: dict[str, tuple[str, ...]] = {
    "full": ("draft_entropy", "target_entropy", "overlap"),
    "no_overlap": ("draft_entropy", "target_entropy"),
    "no_draft_entropy": ("target_entropy", "overlap"),
    "target_entropy_only": ("target_entropy",),
}


# --- signals ----------------------------------------------------------------------------------


def raw_probs(logits: torch.Tensor) -> torch.Tensor:
    """softmax(logits) at temperature 1 in float32: the distribution every signal is measured on.  [B, V] -> [B, V]"""
    return torch.softmax(logits.float(), dim=-1)


def entropy_of_probs(probs: torch.Tensor) -> torch.Tensor:
    """Entropy in nats.  [B, V] -> [B]   (`entr` treats 0·log 0 as 0, so masked tokens are safe.)"""
    return torch.special.entr(probs).sum(dim=-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) at temperature 1, in float32.  [B, V] -> [B]"""
    return entropy_of_probs(raw_probs(logits))


def overlap_count(draft_logits: torch.Tensor, target_logits: torch.Tensor, top_n: int) -> torch.Tensor:
    """|top-n(q) ∩ top-n(p)| by token id.  [B, V], [B, V] -> [B] (int64)"""
    draft_top = draft_logits.topk(top_n, dim=-1).indices  # [B, n]
    target_top = target_logits.topk(top_n, dim=-1).indices  # [B, n]
    shared = draft_top[:, :, None] == target_top[:, None, :]  # [B, n, n]
    return shared.any(dim=-1).sum(dim=-1)


def rule_conditions(h_draft, h_target, overlap, *, tau_h: float, tau_o: float, top_n: int) -> dict:
    """Each condition of the trigger rules, element-wise. `overlap` is the integer count |∩|."""
    return {
        "draft_entropy": h_draft >= tau_h,
        "target_entropy": h_target >= tau_h,
        "overlap": overlap >= overlap_needed(tau_o, top_n),
    }


def rule_fires(rule: str, h_draft, h_target, overlap, *, tau_h: float, tau_o: float, top_n: int):
    """Whether the EASD rule fires, element-wise: all of the rule's conditions hold."""
    held = rule_conditions(h_draft, h_target, overlap, tau_h=tau_h, tau_o=tau_o, top_n=top_n)
    fires = None
    for name in RULE_CONDITIONS[rule]:
        fires = held[name] if fires is None else fires & held[name]
    return fires


# --- sampling distributions -------------------------------------------------------------------


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution tokens are actually drawn from: one-hot at temperature 0, else
    softmax(logits / T) restricted to the top-p nucleus and renormalized.  [B, V] -> [B, V]"""
    logits = logits.float()
    if temperature == 0:
        return _one_hot(logits.argmax(dim=-1), logits.shape[-1])
    probs = torch.softmax(logits / temperature, dim=-1)
    return probs if top_p >= 1 else _nucleus(probs, top_p)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (the top one always)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of strictly more likely tokens
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


def _one_hot(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(tokens, vocab_size).float()


# --- the standard speculative test --------------------------------------------------------------


def accept_probability(p_tilde: torch.Tensor, q_tilde: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
    """min(1, p̃(c) / q̃(c)) for each drafted token c.  [B, V], [B, V], [B] -> [B]

    q̃(c) > 0 because c was drawn from q̃. Greedy: 1 if c is the target's argmax, else 0.
    """
    p_c = p_tilde.gather(-1, drafted[:, None]).squeeze(-1)
    q_c = q_tilde.gather(-1, drafted[:, None]).squeeze(-1)
    return (p_c / q_c).clamp(max=1.0)


def standard_accept(accept_prob: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Accept iff u < min(1, p̃/q̃) with u ~ U[0, 1).  [B], [B] -> [B] bool

    The paper writes u ≤ ratio with u ~ U(0, 1); with torch's [0, 1) draws, `<` is the same test
    and guarantees that a token the target gives probability 0 is never accepted.
    """
    return uniforms < accept_prob


def residual_probs(p_tilde: torch.Tensor, q_tilde: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p̃ − q̃)): where to draw from after a rejection.  [B, V] -> [B, V]

    If p̃ = q̃ a rejection cannot happen; the row then falls back to p̃ so it stays a distribution.
    Greedy: the one-hot of the target's argmax.
    """
    residual = (p_tilde - q_tilde).clamp(min=0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp(min=1e-30), p_tilde)


# --- the EASD penalty -------------------------------------------------------------------------


def penalty_probs(target_logits: torch.Tensor, refused: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """p̃ with the refused draft token's probability set to 0 and renormalized.  [B, V], [B] -> [B, V]

    Greedy: the best target token other than the refused one. If top-p kept only the refused
    token, fall back to the temperature-scaled p without top-p, refused token still masked.
    """
    logits = target_logits.float().scatter(-1, refused[:, None], float("-inf"))
    if temperature == 0:
        return _one_hot(logits.argmax(dim=-1), logits.shape[-1])
    masked = sampling_probs(target_logits, temperature, top_p).scatter(-1, refused[:, None], 0.0)
    mass = masked.sum(dim=-1, keepdim=True)
    fallback = torch.softmax(logits / temperature, dim=-1)
    return torch.where(mass > 0, masked / mass.clamp(min=1e-30), fallback)


def draw(probs: torch.Tensor, generator: torch.Generator | None, greedy: bool = False) -> torch.Tensor:
    """One token per row from a distribution.  [B, V] -> [B]

    Greedy rows are one-hot, so argmax yields the same token without a multinomial over the
    whole vocabulary (about 4 ms per call at 152k tokens on a CPU). Sampling draws consume
    random numbers identically in SD and EASD, keeping them in step until the first penalty.
    """
    if greedy:
        return probs.argmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
