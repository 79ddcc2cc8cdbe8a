"""The judging of one block: the decision for a row's drafts (`judge_block`, pure, in the paper's notation), and the
trace records that say why each token was emitted (`Recorder`).

`judge_block` is steps 3–4 of the method (docs/method.md, "The method"): every speculative method's block is judged
here, and SD and EASD differ in one argument: whether a drafted token the standard test kept is refused where the
rule fires (`refuses`). Nothing here knows which method asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import acceptance as acc
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
    end: str  # the origin of the token that ended it: target_resample | easd_penalty | bonus, or target | draft (one model)
    generation: Any = None  # the generation it belongs to (easd.method.generation.Generation)


@dataclass
class Verdict:
    """The decision for one SD/EASD block: accept drafts [0, n_accepted), then emit `token`."""

    n_accepted: int
    token: int
    origin: str  # target_resample | easd_penalty | bonus
    accept_prob: torch.Tensor  # [k]
    q_probs: torch.Tensor  # [k, V] q at temperature 1 (for the trace)
    p_probs: torch.Tensor  # [k+1, V] p at temperature 1
    h_draft: torch.Tensor  # [k]
    h_target: torch.Tensor  # [k+1]
    overlap: torch.Tensor  # [k] integer counts
    triggered: torch.Tensor  # [k] bool
    margins: acc.Margins  # [k] each: how far the rule's decision was from flipping


def judge_block(
    draft_logits: torch.Tensor,  # [k, V] q_1..q_k
    target_logits: torch.Tensor,  # [k+1, V] p_1..p_{k+1}
    drafted: torch.Tensor,  # [k] c_1..c_k
    settings: DecodeSettings,
    refuses: bool,  # EASD: a drafted token the standard test kept is refused where the rule fires; SD: never
    generator: torch.Generator | None,
    rounding: acc.Rounding = acc.EXACT,  # the models' precision, for the margins' fragile flag
) -> Verdict:
    """Steps 3–4 of one block (docs/method.md, "The method"). Pure apart from the random numbers it draws."""
    k, T, top_p = len(drafted), settings.temperature, settings.top_p
    p_tilde = acc.sampling_probs(target_logits, T, top_p)  # [k+1, V]
    q_tilde = acc.sampling_probs(draft_logits, T, top_p)  # [k, V]
    accept_prob = acc.accept_probability(p_tilde[:k], q_tilde, drafted)  # [k]
    uniforms = torch.rand(k, generator=generator, device=drafted.device)
    accepted = acc.standard_accept(accept_prob, uniforms)  # [k]

    q_probs, p_probs = acc.raw_probs(draft_logits), acc.raw_probs(target_logits)  # the trace's candidates: temperature 1
    if settings.entropy == "temperature-1":  # the paper's H
        h_draft, h_target = acc.entropy_of_probs(q_probs), acc.entropy_of_probs(p_probs)
    else:  # the sampling distribution's, the one the tokens are drawn from
        h_draft, h_target = acc.entropy_of_probs(q_tilde), acc.entropy_of_probs(p_tilde)
    overlap = acc.overlap_count(draft_logits, target_logits[:k], settings.top_n)
    rule = {"rule": settings.rule, "tau_h": settings.tau_h, "tau_o": settings.tau_o, "top_n": settings.top_n}
    triggered = acc.rule_fires(h_draft=h_draft, h_target=h_target[:k], overlap=overlap, **rule)
    scale = 1.0 if settings.entropy == "temperature-1" else T  # H of softmax(z / T) moves with z / T
    margins = acc.decision_margins(
        draft_logits, target_logits[:k], h_draft, h_target[:k], overlap, rounding=rounding, entropy_scale=scale, **rule
    )
    penalized = accepted & triggered if refuses else torch.zeros_like(accepted)  # the one line where EASD is not SD

    ends = (~accepted | penalized).nonzero()
    n = int(ends[0]) if len(ends) else k
    if n == k:
        probs, origin = p_tilde[k:], "bonus"
    elif not accepted[n]:
        probs, origin = acc.residual_probs(p_tilde[n : n + 1], q_tilde[n : n + 1]), "target_resample"
    else:
        probs, origin = acc.penalty_probs(target_logits[n : n + 1], drafted[n : n + 1], T, top_p), "easd_penalty"
    token = int(acc.draw(probs, generator, settings.greedy))
    return Verdict(n, token, origin, accept_prob, q_probs, p_probs, h_draft, h_target, overlap, triggered, margins)


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

    def block_records(self, block: int, start: int, drafted: list[int], verdict: Verdict) -> list[TokenRecord]:
        """Records of one SD/EASD block: n accepted drafts, then the verdict's token."""
        n, k = verdict.n_accepted, len(drafted)
        emitted = drafted[:n] + [verdict.token]
        p_top = self.top(verdict.p_probs[: n + 1])
        records = [
            TokenRecord(
                start + i,
                block,
                token,
                self.text(token),
                "draft_accepted" if i < n else verdict.origin,
                h_target=float(verdict.h_target[i]),
                target_top=p_top[i],
            )
            for i, token in enumerate(emitted)
        ]
        examined = min(n + 1, k)  # drafted positions the test looked at; a bonus token has none
        drafts = torch.tensor(drafted[:examined], device=verdict.q_probs.device)[:, None]  # [m, 1]
        p_draft = verdict.q_probs[:examined].gather(-1, drafts).squeeze(-1).tolist()
        p_target = verdict.p_probs[:examined].gather(-1, drafts).squeeze(-1).tolist()
        q_top = self.top(verdict.q_probs[:examined])
        accept_prob, h_draft, overlap, triggered = (
            t[:examined].tolist() for t in (verdict.accept_prob, verdict.h_draft, verdict.overlap, verdict.triggered)
        )
        margins = {name: getattr(verdict.margins, name)[:examined].tolist() for name in MARGIN_COLUMNS}
        for name in ("overlap_low", "overlap_high"):  # counts, stored as fractions of n like `overlap`
            margins[name] = [count / self.settings.top_n for count in margins[name]]
        for i in range(examined):
            record = records[i]
            record.draft_token_id, record.draft_token_text = drafted[i], self.text(drafted[i])
            record.p_draft, record.p_target, record.accept_prob = p_draft[i], p_target[i], accept_prob[i]
            record.h_draft, record.overlap, record.triggered = h_draft[i], overlap[i] / self.settings.top_n, triggered[i]
            record.draft_top = q_top[i]
            for name in MARGIN_COLUMNS:
                setattr(record, name, margins[name][i])
        return records

    def single_record(
        self,
        block: int,
        position: int,
        token: int,
        logits: torch.Tensor,
        model: str,
        guided: torch.Tensor | None = None,
    ) -> TokenRecord:
        """The record of a token `model` ("target" or "draft") chose alone; `guided` are MTI's guided logits where it
        intervened.  logits: [1, V]"""
        record = TokenRecord(position, block, token, self.text(token), model)
        # a draft run fills the draft's columns (h_draft, draft_top), the others the target's
        probs, settings = acc.raw_probs(logits), self.settings
        measured = acc.signal_probs(logits, settings.entropy, settings.temperature, settings.top_p)
        setattr(record, f"h_{model}", float(acc.entropy_of_probs(measured)[0]))
        setattr(record, f"{model}_top", self.top(probs)[0])
        if guided is not None:
            record.origin = "mti_guided"
            record.guided_top = self.top(acc.raw_probs(guided))[0]
        return record
