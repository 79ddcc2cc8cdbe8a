"""The judging of one block: the decision for a row's drafts (`judge_block`, pure, in the paper's notation), and the
trace records that say why each token was emitted (`Recorder`).

`judge_block` is steps 3–4 of the method (docs/method.md, "The method"): every speculative method's block is judged
here, from the two models' sampling distributions, each at its own model's temperature, and SD and EASD differ in one
argument: a `Refusal` of drafts the standard test kept, where EASD's rule fires. EASD's signals (`block_signals`) are
computed for the methods that show them. Nothing here knows which method asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import acceptance as acc
from .origins import BONUS, DRAFT_ACCEPTED, TARGET_RESAMPLE
from .pair import ModelPair
from .settings import DecodeSettings
from .trace import MARGIN_COLUMNS, TokenRecord

# --- what a block produced ------------------------------------------------------------------------


@dataclass
class Block:
    """One round of the loop, as streamed to a UI: the drafts and the tokens emitted."""

    index: int
    drafted: list[int]  # c_1..c_k proposed by the draft (empty for single-model runs)
    records: list[TokenRecord]  # the tokens emitted, in order
    end: str  # the origin of the token that ended it (a rejection's, a refusal's, the bonus's, or one model's)
    generation: Any = None  # the generation it belongs to (easd.method.generation.Generation)


@dataclass
class Proposal:
    """What a draft pass proposed for one position: c_i, and the distribution q̃_i it was drawn from."""

    token: int
    q_tilde: torch.Tensor | None  # [1, V]; None where c_i was drawn deterministically (greedy: q̃_i is one-hot at c_i)


@dataclass
class Refusal:
    """A method's own rule against drafts the standard test kept (EASD's penalty): where it fires, what the target
    draws from instead at the first such position, and the origin of that token."""

    fires: torch.Tensor  # [k] bool
    instead: Callable[[int], torch.Tensor]  # position n -> [1, V] the distribution to draw the replacement from
    origin: str


@dataclass
class Test:
    """A method's own test in place of the standard one (typical acceptance, the relaxed rules): the drafts it keeps,
    deterministically, and what the target draws from at the first it rejects, with that token's origin."""

    keeps: torch.Tensor  # [k] bool
    instead: Callable[[int], torch.Tensor]  # position n -> [1, V] the distribution to draw the token from
    origin: str


@dataclass
class Verdict:
    """The decision for one block: accept drafts [0, n_accepted), then emit `token`."""

    n_accepted: int
    token: int
    origin: str  # the last token's: a rejection's, a refusal's or the bonus's
    accept_prob: torch.Tensor  # [k] min(1, p̃(c_i) / q̃(c_i)) as the standard test used it (a method's own test: 1 or 0)


def judge_block(
    p_tilde: torch.Tensor,  # [k+1, V] p̃_1..p̃_{k+1}, the target's sampling distributions
    q_tilde: torch.Tensor | None,  # [k, V] q̃_1..q̃_k, the draft's, which c_i were drawn from; None: deterministic
    drafted: torch.Tensor,  # [k] c_1..c_k
    generator: torch.Generator | None,
    greedy: bool,  # p̃ is one-hot (the target at temperature 0): its tokens are taken by argmax, with no random numbers
    refusal: Refusal | None = None,  # a method's rule against drafts the test kept (EASD's); None: SD's block
    test: Test | None = None,  # a method's own test in place of the standard one (typical acceptance); None: SD's
) -> Verdict:
    """Steps 3–4 of one block (docs/method.md, "The method"). Pure apart from the random numbers it draws.

    A deterministic draft (q̃ None) proposed each c_i with certainty: q̃_i(c_i) = 1, so the test keeps c_i with
    probability p̃_i(c_i) and the residual is p̃_i without c_i (vLLM's rejection sampler treats a draft without
    probabilities so). With q̃ one-hot at c_i that is the same maths, number for number."""
    k = len(drafted)
    accept_prob = acc.accept_probability(p_tilde[:k], q_tilde, drafted)  # [k]
    uniforms = torch.rand(k, generator=generator, device=drafted.device)  # drawn in greedy runs too: SD and EASD stay in step
    accepted = acc.standard_accept(accept_prob, uniforms) if test is None else test.keeps  # [k]
    penalized = accepted & refusal.fires if refusal is not None else torch.zeros_like(accepted)  # EASD's one line

    ends = (~accepted | penalized).nonzero()
    n = int(ends[0]) if len(ends) else k
    if n == k:
        probs, origin = p_tilde[k:], BONUS.name
    elif not accepted[n] and test is not None:
        probs, origin = test.instead(n), test.origin
    elif not accepted[n]:
        q_n = acc.one_hot(drafted[n : n + 1], p_tilde.shape[-1]) if q_tilde is None else q_tilde[n : n + 1]
        probs, origin = acc.residual_probs(p_tilde[n : n + 1], q_n), TARGET_RESAMPLE.name
    else:
        probs, origin = refusal.instead(n), refusal.origin
    token = int(acc.draw(probs, generator, greedy))
    if test is not None:  # its test kept or rejected each draft outright
        accept_prob = test.keeps.to(accept_prob.dtype)
    return Verdict(n, token, origin, accept_prob)


@dataclass
class Signals:
    """EASD's signals at a block's drafted positions (docs/method.md, "The method"), for the methods that show them:
    EASD's rule reads them, and SD's lane keeps them so that the inspector and the what-if can say what EASD would do."""

    h_draft: torch.Tensor  # [k] H(q_i) in nats
    h_target: torch.Tensor  # [k+1] H(p_i)
    overlap: torch.Tensor  # [k] integer counts |top-n(q_i) ∩ top-n(p_i)|
    triggered: torch.Tensor  # [k] bool: the rule fires
    margins: acc.Margins  # [k] each: how far the rule's decision was from flipping


def block_signals(
    draft_logits: torch.Tensor,  # [k, V] q_1..q_k
    target_logits: torch.Tensor,  # [k+1, V] p_1..p_{k+1}
    settings: DecodeSettings,
    rounding: acc.Rounding = acc.EXACT,  # the models' precision, for the margins' fragile flag
) -> Signals:
    """The entropies (of the paper's temperature-1 distributions, or with entropy="sampling" of the sampling ones),
    the overlap, where the rule fires and its margins, at every drafted position of a block."""
    k, T, top_p = len(draft_logits), settings.temperature, settings.top_p
    h_draft = acc.entropy_of_probs(acc.signal_probs(draft_logits, settings.entropy, T, top_p))
    h_target = acc.entropy_of_probs(acc.signal_probs(target_logits, settings.entropy, T, top_p))
    overlap = acc.overlap_count(draft_logits, target_logits[:k], settings.top_n)
    rule = {"rule": settings.rule, "tau_h": settings.tau_h, "tau_o": settings.tau_o, "top_n": settings.top_n}
    triggered = acc.rule_fires(h_draft=h_draft, h_target=h_target[:k], overlap=overlap, **rule)
    scale = 1.0 if settings.entropy == "temperature-1" else T  # H of softmax(z / T) moves with z / T
    margins = acc.decision_margins(
        draft_logits, target_logits[:k], h_draft, h_target[:k], overlap, rounding=rounding, entropy_scale=scale, **rule
    )
    return Signals(h_draft, h_target, overlap, triggered, margins)


# --- turning decisions into trace records -------------------------------------------------------


class Recorder:
    """Builds TokenRecords: token text, the signals and both top-candidate lists."""

    def __init__(self, pair: ModelPair, settings: DecodeSettings):
        self.settings = settings
        self.tokenizer = pair.tokenizer
        self.texts: dict[int, str] = {}  # decode each token id once

    def text(self, token_id: int) -> str:
        if token_id not in self.texts:
            self.texts[token_id] = self.tokenizer.text(token_id)
        return self.texts[token_id]

    def top(self, probs: torch.Tensor) -> list[list[tuple[int, str, float]]]:
        """Top candidates per row.  [B, V] -> B lists of (id, text, prob)"""
        probs, ids = probs.topk(self.settings.trace_top, dim=-1)
        return [
            [(i, self.text(i), p) for i, p in zip(row_ids, row_probs)] for row_ids, row_probs in zip(ids.tolist(), probs.tolist())
        ]

    def block_records(
        self,
        block: int,
        start: int,
        drafted: list[int],
        verdict: Verdict,
        q_logits: torch.Tensor,  # [k, V] the draft's logits at the drafted positions
        p_logits: torch.Tensor,  # [k+1, V] the target's
        signals: Signals | None,  # EASD's signals, for a method that shows them
    ) -> list[TokenRecord]:
        """Records of one speculative block: n accepted drafts, then the verdict's token. The candidates and p_draft,
        p_target are the models' distributions at temperature 1, whatever the run samples at."""
        n, k = verdict.n_accepted, len(drafted)
        emitted = drafted[:n] + [verdict.token]
        q_probs, p_probs = acc.raw_probs(q_logits), acc.raw_probs(p_logits[: n + 1])
        p_top = self.top(p_probs)
        records = [
            TokenRecord(
                start + i, block, token, self.text(token), DRAFT_ACCEPTED.name if i < n else verdict.origin, target_top=p_top[i]
            )
            for i, token in enumerate(emitted)
        ]
        examined = min(n + 1, k)  # drafted positions the test looked at; a bonus token has none
        drafts = torch.tensor(drafted[:examined], device=q_probs.device)[:, None]  # [m, 1]
        p_draft = q_probs[:examined].gather(-1, drafts).squeeze(-1).tolist()
        p_target = p_probs[:examined].gather(-1, drafts).squeeze(-1).tolist()
        q_top, accept_prob = self.top(q_probs[:examined]), verdict.accept_prob[:examined].tolist()
        for i in range(examined):
            record = records[i]
            record.draft_token_id, record.draft_token_text = drafted[i], self.text(drafted[i])
            record.p_draft, record.p_target, record.accept_prob = p_draft[i], p_target[i], accept_prob[i]
            record.draft_top = q_top[i]
        if signals is not None:
            self._signals(records, examined, signals)
        return records

    def _signals(self, records: list[TokenRecord], examined: int, signals: Signals) -> None:
        """EASD's signals on a block's records: the target's entropy on each, the rest on the examined drafts."""
        for record, h_target in zip(records, signals.h_target.tolist()):
            record.h_target = h_target
        h_draft, overlap, triggered = (t[:examined].tolist() for t in (signals.h_draft, signals.overlap, signals.triggered))
        margins = {name: getattr(signals.margins, name)[:examined].tolist() for name in MARGIN_COLUMNS}
        for name in ("overlap_low", "overlap_high"):  # counts, stored as fractions of n like `overlap`
            margins[name] = [count / self.settings.top_n for count in margins[name]]
        for i in range(examined):
            record = records[i]
            record.h_draft, record.overlap, record.triggered = h_draft[i], overlap[i] / self.settings.top_n, triggered[i]
            for name in MARGIN_COLUMNS:
                setattr(record, name, margins[name][i])

    def single_record(self, block: int, position: int, token: int, logits: torch.Tensor, model: str) -> TokenRecord:
        """The record of a token `model` ("target" or "draft") chose alone: its origin is the model's name, and it
        carries that model's entropy and top candidates.  logits: [1, V]"""
        record = TokenRecord(position, block, token, self.text(token), model)
        # a draft run fills the draft's columns (h_draft, draft_top), the others the target's
        probs, settings = acc.raw_probs(logits), self.settings
        measured = acc.signal_probs(logits, settings.entropy, settings.temperature, settings.top_p)
        setattr(record, f"h_{model}", float(acc.entropy_of_probs(measured)[0]))
        setattr(record, f"{model}_top", self.top(probs)[0])
        return record
