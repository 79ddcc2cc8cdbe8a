"""The acceptance maths of SD and EASD, as pure functions over tensors.

Notation (stated once, as in the paper and in transformers' `_speculative_sampling`):
  p = the target model's distribution, q = the draft model's distribution,
  c = the drafted token, and a tilde (p̃, q̃) marks the *sampling* distribution after
  temperature and top-p. Greedy decoding is temperature 0, where p̃ and q̃ are one-hot.

Every function is batch-first: tensors have a leading dimension B (the drafted positions of one
row's block: the loop judges each row of a batch apart, `easd.method.judging.judge_block`). Nothing here knows about models or caches.
The rule functions use only `>=` and `&`, so they also work on NumPy arrays and pandas
columns, which is how the app re-evaluates a finished trace under other thresholds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .settings import overlap_needed

# Which conditions each trigger rule needs (docs/method.md, "The method"). All comparisons are ≥.
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


def signal_probs(logits: torch.Tensor, entropy: str, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution whose entropy the rule reads: softmax(logits) at temperature 1 (the paper's), or with
    entropy="sampling" the one tokens are drawn from (temperature > 0).  [B, V] -> [B, V]"""
    return raw_probs(logits) if entropy == "temperature-1" else sampling_probs(logits, temperature, top_p)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) at temperature 1, in float32.  [B, V] -> [B]"""
    return entropy_of_probs(raw_probs(logits))


def overlap_count(draft_logits: torch.Tensor, target_logits: torch.Tensor, top_n: int) -> torch.Tensor:
    """|top-n(q) ∩ top-n(p)| by token id.  [B, V], [B, V] -> [B] (int64)"""
    return _shared(draft_logits.topk(top_n, dim=-1).indices, target_logits.topk(top_n, dim=-1).indices)


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


# --- how far each decision is from flipping (docs/method.md, "Fragile decisions") ----------------------


@dataclass(frozen=True)
class Rounding:
    """How far each model's logits may move for reasons that mean nothing: a logit z by up to eps·|z| + shift.

    eps is the relative precision of the model's dtype (bfloat16 2⁻⁷, float16 2⁻¹⁰, float32 2⁻²³,
    2⁻⁷ for int8 weights); shift is the largest change of a logit measured between the pass shapes
    a backend uses (llama.cpp's kernels change with the number of tokens in a pass). Zeros treat
    the logits as exact (only exact ties are fragile).
    """

    draft: float = 0.0
    target: float = 0.0
    draft_shift: float = 0.0
    target_shift: float = 0.0


EXACT = Rounding()  # logits taken as exact: only exact ties are fragile


@dataclass
class Margins:
    """For each drafted position of a block, how far the rule's decision is from flipping.  All [k]

    Each field is the trace column of the same name (easd.method.trace.MARGIN_COLUMNS is this list)."""

    h_draft_margin: torch.Tensor  # H(q) − τ_H in nats
    h_target_margin: torch.Tensor  # H(p) − τ_H
    draft_gap: torch.Tensor  # the draft's n-th minus (n+1)-th logit: how close its top-n set is to changing
    target_gap: torch.Tensor  # the same for the target
    overlap_swap: torch.Tensor  # bool: swapping either model's n-th and (n+1)-th candidates changes |∩|
    h_draft_tol: torch.Tensor  # ε_H of the draft: how far H(q) can move when its logits move by one rounding step
    h_target_tol: torch.Tensor  # ε_H of the target
    overlap_low: torch.Tensor  # the fewest shared candidates reachable by swaps within rounding (a count)
    overlap_high: torch.Tensor  # the most
    fragile: torch.Tensor  # bool: a perturbation at the dtype's precision could flip the rule's decision


def decision_margins(
    draft_logits: torch.Tensor,  # [k, V] q_1..q_k
    target_logits: torch.Tensor,  # [k, V] p_1..p_k
    h_draft: torch.Tensor,  # [k]
    h_target: torch.Tensor,  # [k]
    overlap: torch.Tensor,  # [k] |top-n(q) ∩ top-n(p)|, as the rule counted it
    *,
    rule: str,
    tau_h: float,
    tau_o: float,
    top_n: int,
    rounding: Rounding,
    entropy_scale: float = 1.0,  # T where H is the sampling distribution's (entropy="sampling"), else 1
) -> Margins:
    """The rule's margins at each drafted position, the tolerances rounding allows, and whether the decision is fragile.

    ε_H = ‖(∂H/∂z_i)·δ_i‖₂ is the largest first-order change of H when each logit z_i moves by
    δ_i = eps·|z_i| + shift (the perturbation's worst direction in L2). A model's n-th and
    (n+1)-th candidates may swap when their logits are within δ_n + δ_n+1; the overlap counts
    those swaps can reach span [overlap_low, overlap_high].
    """
    d_top, d_gap, d_near = _boundary(draft_logits, top_n, rounding.draft, rounding.draft_shift)
    t_top, t_gap, t_near = _boundary(target_logits, top_n, rounding.target, rounding.target_shift)
    d_swapped, t_swapped = _swap_boundary(d_top, top_n), _swap_boundary(t_top, top_n)
    if_draft = _shared(d_swapped, t_top[:, :top_n])  # [k] |∩| had the draft's boundary pair swapped
    if_target = _shared(d_top[:, :top_n], t_swapped)
    if_both = _shared(d_swapped, t_swapped)
    reachable = torch.stack(  # [4, k]: counts a rounding step could produce (the actual count where a swap cannot happen)
        [
            overlap,
            torch.where(d_near, if_draft, overlap),
            torch.where(t_near, if_target, overlap),
            torch.where(d_near & t_near, if_both, overlap),
        ]
    )
    low, high = reachable.min(dim=0).values, reachable.max(dim=0).values
    # H read at temperature T is softmax(z / T)'s, and a rounding step δ of z is δ / T of z / T (the top-p cut's own
    # boundary is not among the tolerances: docs/method.md, "Fragile decisions")
    t = entropy_scale
    h_draft_tol, h_target_tol = (
        _entropy_tolerance(draft_logits.float() / t, rounding.draft, rounding.draft_shift / t),
        _entropy_tolerance(target_logits.float() / t, rounding.target, rounding.target_shift / t),
    )
    rule_settings = {"rule": rule, "tau_h": tau_h, "tau_o": tau_o, "top_n": top_n}
    return Margins(
        h_draft_margin=h_draft - tau_h,
        h_target_margin=h_target - tau_h,
        draft_gap=d_gap,
        target_gap=t_gap,
        overlap_swap=(if_draft != overlap) | (if_target != overlap),
        h_draft_tol=h_draft_tol,
        h_target_tol=h_target_tol,
        overlap_low=low,
        overlap_high=high,
        fragile=fragile_decisions(h_draft, h_target, overlap, h_draft_tol, h_target_tol, low, high, **rule_settings),
    )


def fragile_decisions(
    h_draft,
    h_target,
    overlap,
    h_draft_tol,
    h_target_tol,
    overlap_low,
    overlap_high,
    *,
    rule: str,
    tau_h: float,
    tau_o: float,
    top_n: int,
):
    """Whether a rounding step could flip the rule's decision, element-wise (tensors or arrays, as `rule_fires`).

    A condition is *near* when rounding can flip it: an entropy within its tolerance of τ_H, the
    overlap condition when the reachable counts lie on both sides of ceil(τ_O·n). A decision that
    fired is fragile if any of its rule's conditions is near; one that did not fire, if each of
    its conditions holds or is near (so all could hold at once).
    """
    held = rule_conditions(h_draft, h_target, overlap, tau_h=tau_h, tau_o=tau_o, top_n=top_n)
    needed = overlap_needed(tau_o, top_n)
    near = {
        "draft_entropy": abs(h_draft - tau_h) <= h_draft_tol,
        "target_entropy": abs(h_target - tau_h) <= h_target_tol,
        "overlap": (overlap_low >= needed) != (overlap_high >= needed),
    }
    fired = any_near = all_reachable = None
    for name in RULE_CONDITIONS[rule]:
        reachable = held[name] | near[name]
        fired = held[name] if fired is None else fired & held[name]
        any_near = near[name] if any_near is None else any_near | near[name]
        all_reachable = reachable if all_reachable is None else all_reachable & reachable
    return (fired & any_near) | (~fired & all_reachable)


def _boundary(logits: torch.Tensor, top_n: int, eps: float, shift: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top n+1 ids, the n-th minus (n+1)-th logit, and whether that gap is within rounding.  [k, V] -> [k, n+1], [k], [k]"""
    logits = logits.float()
    if top_n >= logits.shape[-1]:  # every token is in the set: no boundary to cross
        ids = logits.topk(top_n, dim=-1).indices
        infinite = torch.full(ids.shape[:1], float("inf"), device=logits.device)
        return torch.cat([ids, ids[:, -1:]], dim=-1), infinite, torch.zeros_like(infinite, dtype=torch.bool)
    values, ids = logits.topk(top_n + 1, dim=-1)
    gap = values[:, -2] - values[:, -1]
    return ids, gap, gap <= eps * (values[:, -2].abs() + values[:, -1].abs()) + 2 * shift


def _swap_boundary(top_ids: torch.Tensor, top_n: int) -> torch.Tensor:
    """The top-n set with its n-th candidate replaced by the (n+1)-th.  [k, n+1] -> [k, n]"""
    return torch.cat([top_ids[:, : top_n - 1], top_ids[:, top_n:]], dim=-1)


def _shared(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a ∩ b| per row of two id sets.  [B, n], [B, n] -> [B] (int64)"""
    return (a[:, :, None] == b[:, None, :]).any(dim=-1).sum(dim=-1)  # [B, n, n] -> [B]


def _entropy_tolerance(logits: torch.Tensor, eps: float, shift: float) -> torch.Tensor:
    """ε_H = ‖p_i (log p_i + H) (eps·|z_i| + shift)‖₂: how far H can move when each logit moves by one rounding step.  [k, V] -> [k]"""
    logits = logits.float()
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    h = -(p * log_p).nansum(dim=-1, keepdim=True)
    sensitivity = torch.nan_to_num(p * (log_p + h) * (eps * logits.abs() + shift), nan=0.0)  # 0 where p = 0 (masked tokens)
    return sensitivity.norm(dim=-1)


# --- sampling distributions -------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """How one model's tokens are drawn: at a temperature (0: greedy, its argmax) within a top-p nucleus. A method
    says one for each model it runs (easd.method.methods.sd: SD's draft and target share the run's)."""

    temperature: float
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution tokens are drawn from.  [B, V] -> [B, V]"""
        return sampling_probs(logits, self.temperature, self.top_p)

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """log p̃, computed in log space: finite for every token of the nucleus however far in the tail (log of a
        float32 softmax is -inf below about e^-103), -inf outside it. Sampling only (T > 0).  [B, V] -> [B, V]"""
        log_p = torch.log_softmax(logits.double() / self.temperature, dim=-1)
        if self.top_p >= 1:
            return log_p
        kept = _nucleus(log_p.exp(), self.top_p) > 0
        log_p = log_p.masked_fill(~kept, float("-inf"))
        return log_p - torch.logsumexp(log_p, dim=-1, keepdim=True)


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution tokens are actually drawn from: one-hot at temperature 0, else
    softmax(logits / T) restricted to the top-p nucleus and renormalized.  [B, V] -> [B, V]"""
    logits = logits.float()
    if temperature == 0:
        return one_hot(logits.argmax(dim=-1), logits.shape[-1])
    probs = torch.softmax(logits / temperature, dim=-1)
    return probs if top_p >= 1 else _nucleus(probs, top_p)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (the top one always)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of strictly more likely tokens
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


def one_hot(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[B] -> [B, V]: each token with probability 1 (a greedy model's distribution, a deterministic draft's)."""
    return torch.nn.functional.one_hot(tokens, vocab_size).float()


# --- the standard speculative test --------------------------------------------------------------


def accept_probability(p_tilde: torch.Tensor, q_tilde: torch.Tensor | None, drafted: torch.Tensor) -> torch.Tensor:
    """min(1, p̃(c) / q̃(c)) for each drafted token c.  [B, V], [B, V] or None, [B] -> [B]

    q̃(c) > 0 because c was drawn from q̃; None is a deterministic draft, q̃(c) = 1, so the probability is p̃(c).
    Greedy: 1 if c is the target's argmax, else 0.
    """
    p_c = p_tilde.gather(-1, drafted[:, None]).squeeze(-1)
    if q_tilde is None:
        return p_c.clamp(max=1.0)
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
        return one_hot(logits.argmax(dim=-1), logits.shape[-1])
    masked = sampling_probs(target_logits, temperature, top_p).scatter(-1, refused[:, None], 0.0)
    mass = masked.sum(dim=-1, keepdim=True)
    fallback = torch.softmax(logits / temperature, dim=-1)
    return torch.where(mass > 0, masked / mass.clamp(min=1e-30), fallback)


class NotADistribution(ValueError):
    """Probabilities holding NaN or infinities, or no mass at all: nothing can be drawn from them."""


def draw(probs: torch.Tensor, generator: torch.Generator | None, greedy: bool = False) -> torch.Tensor:
    """One token per row from a distribution.  [B, V] -> [B]

    Greedy rows are one-hot, so argmax yields the same token without a multinomial over the
    whole vocabulary (about 4 ms per call at 152k tokens on a CPU). Sampling draws consume
    random numbers identically in SD and EASD, keeping them in step until the first penalty.
    Raises NotADistribution rather than drawing from NaN (torch would raise a message no user can act on).
    """
    if not (torch.isfinite(probs).all() and (probs.sum(dim=-1) > 0).all()):
        raise NotADistribution("the probabilities hold NaN or infinite values, or no mass")
    if greedy:
        return probs.argmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


# --- relaxed acceptance: a draft kept by a rule on the target's own distribution --------------------------------
# Typical acceptance (Medusa, Cai et al. 2024, §3.3.1; vLLM's TypicalAcceptanceSampler) and the relaxed rules of "When
# Is a Draft Accepted?" (arXiv 2606.30265: additive, multiplicative, top-m). Each reads p, the target's distribution
# a rule judges on (easd.method.methods.relaxing says which), and keeps a drafted token c outright where p(c) reaches
# a bar; none reads q. All [k, V] -> [k].

RELAXED_RULES = ("additive", "multiplicative", "top_m")


def typical_bar(entropy: torch.Tensor, epsilon: float, alpha: float) -> torch.Tensor:
    """min(ε, α·exp(−H(p))) from H(p) in nats: typical acceptance keeps c where p(c) exceeds it, so more where the
    target is unsure.  [k] -> [k]"""
    return torch.clamp(alpha * torch.exp(-entropy), max=epsilon)


def relaxed_bar(top: torch.Tensor, rule: str, delta: float, ratio: float, m: int) -> torch.Tensor:
    """The least p(c) a rule keeps, from p's largest probabilities in order (`top`, at least m of them): additive
    max p − δ; multiplicative λ·max p (λ = `ratio`); top-m the m-th largest (c is then among the m likeliest, ties
    counted for it). δ = 0, λ = 1 and m = 1 keep only the target's top token: the strict greedy test.  [k, n] -> [k]"""
    if rule == "additive":
        return top[:, 0] - delta
    if rule == "multiplicative":
        return ratio * top[:, 0]
    return top[:, m - 1]


def picked(p: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
    """p(c) for each drafted token.  [k, V], [k] -> [k]"""
    return p.gather(-1, drafted[:, None]).squeeze(-1)


def relaxed_certificate(p: torch.Tensor, drafted: torch.Tensor, rule: str, delta: float, ratio: float, top: int) -> torch.Tensor:
    """How far the target's distribution must move before a kept draft is rejected: min KL(p′ ‖ p) over every p′ under
    which the rule rejects c, in nats (inf where no p′ that p allows rejects it; NaN where the rule rejected c).

    Each rule rejects where some tokens j overtake c by its margin, a union of half-spaces of p′; the information
    projection onto a half-space is an exponential tilt of p, so each has a closed form (docs/method.md derives them):
      multiplicative  λ·p′(j) ≥ p′(c) for one j: p′ ∝ p·e^{θ(λ[j] − [c])} with θ = log(p(c) / (λ p(j))) / (1 + λ),
                      KL = −log(1 − p(c) − p(j) + p(c)·e^{−θ} + p(j)·e^{λθ}), the least over j
      additive        p′(j) − p′(c) ≥ δ for one j: u = e^θ solves p(j)(1 − δ)u² − δRu − p(c)(1 + δ) = 0 (R = the rest's
                      mass), KL = θδ − log(R + p(j)u + p(c)/u), the least over j
      top-m           m tokens at least p′(c): those above c already, and the likeliest of the rest raised, with c
                      lowered, to their geometric mean (the binding ones; water-filling), KL = −log(R + (r + 1)·v)
    [k, V], [k] -> [k] float64"""
    p = p.double()
    out = torch.full((len(drafted),), float("nan"), dtype=torch.float64)
    for i, c in enumerate(drafted.tolist()):
        row = p[i]
        if float(row[c]) < float(relaxed_bar(row.sort(descending=True).values[None], rule, delta, ratio, top)[0]):
            continue  # rejected: no certificate (the inspector gives the margin)
        out[i] = _certificate(row, c, rule, delta, ratio, top)
    return out


def _certificate(p: torch.Tensor, c: int, rule: str, delta: float, ratio: float, top: int) -> float:
    p_c = float(p[c])
    others = torch.cat([p[:c], p[c + 1 :]])
    others = others[others > 0]  # a token p rules out cannot be raised at any finite cost
    if rule == "top_m":
        return _top_m_certificate(p_c, others, top)
    if len(others) == 0 or (rule == "multiplicative" and ratio == 0) or (rule == "additive" and delta >= 1):
        return float("inf")  # nothing can overtake c
    rest = 1 - p_c - others
    if rule == "multiplicative":
        theta = torch.log(p_c / (ratio * others)) / (1 + ratio)
        return float((-torch.log(rest + p_c * torch.exp(-theta) + others * torch.exp(ratio * theta))).min())
    u = (delta * rest + torch.sqrt((delta * rest) ** 2 + 4 * others * (1 - delta) * p_c * (1 + delta))) / (
        2 * others * (1 - delta)
    )
    return float((torch.log(u) * delta - torch.log(rest + others * u + p_c / u)).min())


def _top_m_certificate(p_c: float, others: torch.Tensor, top: int) -> float:
    above = int((others > p_c).sum())
    needed = top - above  # tokens still to raise to c's level
    below = others[others <= p_c].sort(descending=True).values
    if needed > len(below):
        return float("inf")
    binding = below[:needed]  # the likeliest below c: the cheapest to raise
    while True:  # water-filling: c and the binding ones meet at their geometric mean; any above it is not binding
        level = math.exp((math.log(p_c) + float(torch.log(binding).sum())) / (1 + len(binding)))
        if len(binding) == 1 or float(binding[0]) <= level:
            break
        binding = binding[1:]
    rest = 1 - p_c - float(binding.sum())
    return -math.log(rest + (1 + len(binding)) * level)
