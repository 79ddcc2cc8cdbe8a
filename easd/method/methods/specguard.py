"""SpecGuard (Purohit, Narayanam and Pal, arXiv 2604.15244): speculative decoding by reasoning steps, verified with
model-internal signals. For each step the draft samples several candidates, the most consistent one is chosen, and
an ensemble of two scores decides: keep it, or have the target write the step again.

Only the paper's abstract (and its earlier version's, "InferSpec") and readers' notes of its text were reachable here;
docs/method.md, "SpecGuard", lists every choice and its source. In short:
  step          text up to `delimiter` ("\\n\\n", as RSD's), or an end token, or the room left (easd.method.methods.steps)
  candidates    `candidates` steps the draft samples from the same prefix at `temperature` within `top_p` (the
                notes: 16 at top-p 0.8; 3 by default here, a CPU's budget), side by side: a group of rows of the
                batch, drafting in the same passes (easd.method.rows). At temperature 0, one candidate: the paper's
                greedy variant
  consistency   each candidate's mean Jaccard similarity of its token set with the others'; the highest is chosen
                (ties: the first). Ours: the paper embeds the candidates with a sentence encoder, a third model
  scorer        whose signals score the chosen step: the draft's (default) or the target's. The abstract says only
                "model-internal signals"; that uncertain steps "escalate to the target" (InferSpec's abstract) and the
                claimed saving read as the draft's, but that is a reading. The target's costs one target pass a step
  confidence    LPBV: the step's least likely token's log-probability at temperature 1, min-max normalised over the
                vocabulary at that position: (log p(y) − min_v log p(v)) / (max_v log p(v) − min_v log p(v)), 1 for
                the model's own top token (the notes: min-max normalised; over what, they do not say)
  grounding     ABGV: attention rollout over the scorer's last 3 layers (heads averaged, weights under 0.01 pruned,
                the first token, an attention sink, left out, half of each layer the residual identity): the share of
                each step token's rollout that lands in the context (the prompt and the steps kept before); the
                step's grounding is its least grounded token's (`rollout_grounding`). It needs the runtime's
                attention weights (transformers; llama.cpp has none) and one pass of the scorer over the whole text
                outside the batch (its cost counted in the trace's `scoring_calls` and `scoring_seconds`).
                `grounding` "auto" uses it where the runtime has attention and runs on confidence alone where not,
                the trace's settings saying which
  decision      score = weight × grounding + (1 − weight) × confidence (confidence alone without grounding), both in
                [0, 1]; kept if the score reaches `threshold` (the notes: 0.7 and 0.7), else the target writes the
                step again, a token a block, at the run's temperature
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ...errors import Fix, SettingsError
from .. import acceptance as acc
from ..judging import Block
from ..knobs import Control, knob
from ..origins import Origin
from ..settings import MIN_TEMPERATURE, MIN_TOP_P
from ..trace import Candidate, recorded
from .base import draw_one
from .steps import Drafted, Stepwise, step_ends

GROUNDINGS = ("auto", "attention", "none")
SCORERS = ("draft", "target")
ROLLOUT_LAYERS = 3  # the notes: rollout over the last 3 layers
PRUNED_BELOW = 0.01  # the notes: attention weights under 0.01 pruned


@dataclass(frozen=True)
class SpecGuardSettings:
    candidates: int = knob(
        3,
        "SpecGuard's candidate steps: the draft writes this many from the same prefix and the most consistent is checked",
        low=1,
        high=16,
        label="SpecGuard candidates",
        short="candidate steps drafted",
        control=Control("slider", 1, 8, 1),
    )  # the paper's 16, by the notes, would draft 16 steps for every one kept: 3 suits a CPU
    temperature: float = knob(
        0.7,
        "the draft's temperature as it samples the candidate steps (0: one greedy candidate, the paper's greedy variant)",
        low=MIN_TEMPERATURE,
        high=2,
        zero=True,
        expects=f"0 (one greedy candidate) or a number from {MIN_TEMPERATURE:g} to 2",
        label="SpecGuard draft temperature",
        short="candidates are sampled at",
        control=Control("slider", 0, 1.5, 0.05),
    )
    top_p: float = knob(
        0.8,
        "the nucleus the candidate steps are sampled within (the notes' 0.8)",
        low=MIN_TOP_P,
        high=1,
        label="SpecGuard top-p",
        short="candidates' nucleus mass",
        control=Control("slider", 0.05, 1, 0.05),
    )
    threshold: float = knob(
        0.7,
        "SpecGuard keeps the chosen step where its score (grounding and confidence, each 0 to 1) reaches this",
        low=0,
        high=1,
        label="SpecGuard threshold",
        short="keep a step scored at least",
        control=Control("slider", 0, 1, 0.05),
        sweep=(0.5, 0.6, 0.7, 0.8, 0.9),
    )  # 0.7: the paper's, as readers' notes of its text give it (0.6 was the worst of its ablation)
    weight: float = knob(
        0.7,
        "the grounding score's share of a step's score (the rest is the confidence)",
        low=0,
        high=1,
        label="SpecGuard grounding weight",
        short="grounding's share of the score",
        control=Control("slider", 0, 1, 0.05),
    )  # 0.7 grounding, 0.3 log-probability: the paper's ensemble, as those notes give it
    grounding: str = knob(
        "auto",
        "auto: score grounding from attention where the runtime has it (transformers), confidence alone where not "
        "(llama.cpp); attention: always (refused without it); none: confidence alone",
        choices=GROUNDINGS,
        label="SpecGuard grounding",
        short="attention where the runtime has it",
        control=Control("choice"),
    )
    scorer: str = knob(
        "draft",
        "whose signals score the chosen step: draft (a kept step costs the target nothing; our reading of the paper) "
        "or target (one target pass a step)",
        choices=SCORERS,
        label="SpecGuard scorer",
        short="whose signals score a step",
        control=Control("choice"),
    )
    delimiter: str = knob("\n\n", "the text that ends a reasoning step (write \\n for a line break)", low=1, high=16)


# what every row carries of its step's check, which its inspector reads (the grounding score is empty without attention)
SCORED = ("specguard_step", "specguard_confidence", "specguard_score", "specguard_drafts_top1_id")
SPECGUARD_KEPT = Origin(
    "specguard_kept",
    "draft step kept",
    "background: #cde8f8; border-bottom: 2px dotted #0072B2;",  # sky blue, blue dots: the draft's, kept by the check
    "chosen",
    "The draft wrote {chosen} as part of the step SpecGuard chose among its candidates, and its score reached the "
    "threshold, so the step was kept without the target writing it.",
    ended="a reasoning step was kept whole, or its candidates are still being drafted",
    writer="draft",
    needs=SCORED,
)
SPECGUARD_TARGET = Origin(
    "specguard_target",
    "step recomputed (target)",
    "background: #f7d9a0; border-bottom: 2px dotted #D55E00;",  # orange, vermilion dots: the target's, written again
    "chosen",
    "The draft's chosen step scored below the threshold, so the target wrote the step again: it chose {chosen}.",
    ended="the target wrote one token of a step it writes again",
    needs=("h_target", *SCORED),
)


@dataclass
class SpecGuardRecord:
    specguard_step: int = recorded("the reasoning step the token belongs to (0, 1, …)", "int", label="reasoning step")
    specguard_grounding_score: float = recorded(
        "the chosen candidate's least grounded token's share of attention rollout in the context (empty where "
        "grounding was not scored)",
        "float",
        low=0,
        high=1,
        label="grounding",
    )
    specguard_confidence: float = recorded(
        "the chosen candidate's least likely token's log-probability, min-max normalised over the vocabulary",
        "float",
        low=0,
        high=1,
        label="confidence",
    )
    specguard_score: float = recorded(
        "the chosen candidate's score, against the threshold", "float", low=0, high=1, label="score"
    )
    specguard_drafts: list[Candidate] = recorded(
        "each candidate step: its number, its text, its consistency with the others (mean Jaccard similarity)",
        "candidates",
        label="candidate step (the chosen first)",
        beside="token",
        values="consistency",
        ids=False,
        marks="specguard_chosen",
    )
    specguard_chosen: int = recorded("the candidate step the checks chose (its number in the list)", "int", label="chosen")


@dataclass
class Steps:
    """A SpecGuard generation's state: where the current step begins, its candidates so far, who writes it, and the
    verdict on the current step."""

    start: int  # index in the generation's tokens where the current step begins
    settings: SpecGuardSettings
    index: int = 0  # the current step's number
    drafts: list[Drafted] = field(default_factory=list)  # each row's candidate as drafted so far (`wanted` rows)
    candidates: list[Drafted] = field(default_factory=list)  # once every row's ended: those with tokens
    # "draft" while candidates are drafted; "scoring" while the target scores the chosen one (scorer "target");
    # "target" once the chosen one was refused and the target writes the step again
    writer: str = "draft"
    chosen: int | None = None  # the most consistent candidate, once every candidate is drafted
    verdict: SpecGuardRecord | None = None  # the scores of the current step's chosen candidate

    def __post_init__(self):
        if not self.drafts:
            self.drafts = [Drafted() for _ in range(self.wanted)]

    def copy(self) -> Steps:
        return replace(self, drafts=[d.copy() for d in self.drafts], candidates=list(self.candidates))

    def next_step(self, start: int) -> None:
        self.start, self.index, self.candidates, self.writer = start, self.index + 1, [], "draft"
        self.drafts = [Drafted() for _ in range(self.wanted)]
        self.chosen, self.verdict = None, None

    @property
    def wanted(self) -> int:
        """Candidates to draft: one at temperature 0, where more would be the same step again."""
        return 1 if self.settings.temperature == 0 else self.settings.candidates


@dataclass(frozen=True, kw_only=True)
class Guarded(Stepwise):
    """Candidate steps from the draft, one kept by its scores or written again by the target (the module's docstring)."""

    def check(self, pair, settings) -> None:
        own = self.own(settings)
        scorer = pair.draft if own.scorer == "draft" else pair.target
        if own.grounding == "attention" and not scorer.has_attention:
            raise SettingsError(
                "specguard_grounding",
                f"attention needs the {own.scorer}'s attention weights, which {scorer.backend} does not expose: use "
                "the transformers backend, or set it to auto or none to check steps by confidence alone",
                fix=Fix("none", "check each step by confidence alone"),
            )

    def on_pair(self, pair, settings):
        """Grounding "auto" as it runs here: attention where the scorer's runtime has it, else none."""
        own = self.own(settings)
        if own.grounding != "auto":
            return settings
        scorer = pair.draft if own.scorer == "draft" else pair.target
        return settings.with_own(self.name, replace(own, grounding="attention" if scorer.has_attention else "none"))

    def at_sampling(self, settings, temperature, top_p):
        """Its candidates at the protocol's temperature and nucleus: at 0, one greedy candidate (the paper's greedy
        variant); the target writes refused steps at it too."""
        own = replace(self.own(settings), temperature=temperature, top_p=top_p)
        return super().at_sampling(settings, temperature, top_p).with_own(self.name, own)

    def start(self, generation) -> Steps:
        return Steps(start=generation.prompt_length, settings=self.own(generation.settings))

    def copy_state(self, state: Steps) -> Steps:
        return state.copy()

    def draft_sampling(self, settings) -> acc.Sampling:
        """Candidates are sampled at SpecGuard's own temperature and nucleus, so that they differ."""
        own = self.own(settings)
        return acc.Sampling(own.temperature, own.top_p)

    def width(self, generation) -> int:
        """A row of the batch per candidate: they are drafted side by side, in the same passes."""
        return generation.state.wanted

    def given(self, generation, member: int = 0) -> list[int]:
        """The row's candidate so far while candidates are drafted (`Stepwise`); the chosen step, which the target's
        pass reads to score it (scorer "target")."""
        steps = generation.state
        if steps.writer == "scoring":
            return list(steps.candidates[steps.chosen].tokens) if member == 0 else []
        return super().given(generation, member)

    def judge_group(self, plans: list) -> Block:
        """After the candidates are drafted: the most consistent chosen and scored by the draft (kept whole, or the
        target writes the step again, a token a block), or handed to the target's next pass to score (scorer
        "target"); after that pass, its verdict; while the target writes the step, one token of it."""
        plan, generation, steps = plans[0], plans[0].generation, plans[0].generation.state
        if steps.writer == "draft":
            for each in plans:  # each row's new tokens of its candidate, and their confidence by the draft's logits
                drafted = steps.drafts[each.member]
                n = drafted.take(each)
                if n:
                    drafted.confidence = min(drafted.confidence, confidence(torch.cat(each.q_logits[:n]), drafted.tokens[-n:]))
            if not all(d.ended for d in steps.drafts):
                return self.drafting(plans, SPECGUARD_KEPT.name)
            steps.candidates = [d for d in steps.drafts if d.tokens]
            if not steps.candidates:  # no room left to draft: the generation ends
                return Block(plan.block, [], [], SPECGUARD_KEPT.name, generation)
            steps.chosen = most_consistent(steps)
            if steps.settings.scorer == "target":
                steps.writer = "scoring"
                return Block(plan.block, [], [], SPECGUARD_KEPT.name, generation)
            steps.verdict = verdict(generation, steps, steps.candidates[steps.chosen].confidence)
            return self._decide(plan)
        if steps.writer == "scoring":  # the target's pass read the chosen step: it scores it
            chosen = steps.candidates[steps.chosen]
            steps.verdict = verdict(generation, steps, confidence(plan.p_logits[: len(chosen.tokens)], chosen.tokens))
            if steps.verdict.specguard_score < steps.settings.threshold:
                steps.writer = "target"  # and the target's first token of the step is already in this pass
                return self._target_token(plan, plan.p_logits[:1])
            return self._decide(plan)
        return self._target_token(plan, plan.p_logits)

    def _decide(self, plan) -> Block:
        """The chosen step, whole, if its score reaches the threshold; else nothing yet: the target writes it again."""
        generation, steps = plan.generation, plan.generation.state
        chosen = steps.candidates[steps.chosen]
        if steps.verdict.specguard_score >= steps.settings.threshold:
            records = [
                replace(r, position=plan.position + i, block=plan.block, origin=SPECGUARD_KEPT.name, own=steps.verdict)
                for i, r in enumerate(chosen.records)
            ]
            steps.next_step(len(generation.tokens) + len(records))
            return Block(plan.block, chosen.tokens, records, SPECGUARD_KEPT.name, generation)
        steps.writer = "target"
        return Block(plan.block, chosen.tokens, [], SPECGUARD_TARGET.name, generation)

    def _target_token(self, plan, logits: torch.Tensor) -> Block:
        """One token of the target's version of the step, drawn at the run's temperature.  logits: [1, V]"""
        generation, steps = plan.generation, plan.generation.state
        token = draw_one(generation, logits)
        record = generation.recorder.single_record(plan.block, plan.position, token, logits, "target")
        record.origin, record.own = SPECGUARD_TARGET.name, steps.verdict
        if step_ends(generation, steps.start, [token], steps.settings.delimiter):
            steps.next_step(len(generation.tokens) + 1)
        return Block(plan.block, [], [record], record.origin, generation)

    def lane_title(self, settings) -> str:
        own = self.own(settings)
        scorer = ", the target's scores" if own.scorer == "target" else ""
        return self.title + (", confidence only" if own.grounding == "none" else "") + scorer

    def explains(self, record, settings) -> str:
        own, found = self.own(settings), record.own
        if not isinstance(found, SpecGuardRecord):
            return "This row does not record its reasoning step's scores."
        grounding = (
            f"grounding {found.specguard_grounding_score:.3f} × {own.weight:g} + confidence {found.specguard_confidence:.3f} × {1 - own.weight:g}"
            if found.specguard_grounding_score is not None
            else f"confidence {found.specguard_confidence:.3f} (grounding not scored: no attention weights)"
        )
        kept = "reached" if found.specguard_score >= own.threshold else "fell below"
        return (
            f"Reasoning step {found.specguard_step}: the draft wrote {len(found.specguard_drafts)} candidate(s) and the most "
            f"consistent was scored by the {own.scorer}'s signals: {grounding} = {found.specguard_score:.3f}, which {kept} "
            f"the threshold {own.threshold:g}."
        )

    def lane_facts(self, trace, summary: dict) -> list[tuple[str, object]]:
        """Its reasoning steps, how many the checks kept as the draft wrote them and how many the target recomputed,
        and the two models' passes."""
        steps = _steps([trace])
        kept = sum(origin == SPECGUARD_KEPT.name for origin in steps.values())
        return [("steps", len(steps)), ("kept", kept), ("recomputed", len(steps) - kept), *self.calls(summary)]

    def bench_line(self, traces: list) -> str:
        """Steps, the share kept, target passes per token and the scoring passes outside the batch."""
        steps = _steps(traces)
        kept = sum(origin == SPECGUARD_KEPT.name for origin in steps.values())
        tokens, passes = sum(len(t.records) for t in traces), sum(t.stats.target_calls for t in traces)
        scoring = sum(t.stats.scoring_seconds or 0 for t in traces) / max(sum(t.stats.seconds or 0 for t in traces), 1e-9)
        return (
            f"steps {len(steps)}  kept {kept / max(len(steps), 1):.2f}  target passes/token {passes / max(tokens, 1):.3f}  "
            f"scoring passes {scoring:.0%} of the time"
        )


def _steps(traces: list) -> dict:
    """Each run's steps, by (run, step): the origin its tokens share (kept, or recomputed by the target)."""
    return {
        (i, r.own.specguard_step): r.origin for i, t in enumerate(traces) for r in t.records if isinstance(r.own, SpecGuardRecord)
    }


# --- the checks, pure (docs/method.md, "SpecGuard") -------------------------------------------------------------


def consistency(candidates: list[list[int]]) -> list[float]:
    """Each candidate's mean Jaccard similarity of token sets with the others (1 for a lone candidate)."""
    sets = [set(c) for c in candidates]
    if len(sets) == 1:
        return [1.0]
    return [
        sum(len(a & b) / len(a | b) if a | b else 1.0 for j, b in enumerate(sets) if j != i) / (len(sets) - 1)
        for i, a in enumerate(sets)
    ]


def confidence(logits: torch.Tensor, tokens: list[int]) -> float:
    """LPBV: the least of the step's tokens' log-probabilities at temperature 1, each min-max normalised over the
    vocabulary at its position, (log p(y) − min log p) / (max log p − min log p): 1 for the model's top token, 0 for
    its least likely.  [n, V], n tokens -> a number in [0, 1]"""
    log_p = torch.log_softmax(logits.float(), dim=-1)  # [n, V]
    low, high = log_p.min(dim=-1).values, log_p.max(dim=-1).values
    picked = log_p.gather(-1, torch.tensor(tokens, device=log_p.device)[:, None]).squeeze(-1)
    return float(((picked - low) / (high - low).clamp_min(1e-30)).min())


def rollout_grounding(attention: torch.Tensor, start: int, pruned_below: float = PRUNED_BELOW) -> float:
    """ABGV: attention rollout (Abnar and Zuidema, 2020) of the step's tokens through the given layers, lowest first,
    and the least grounded token's share of it in the context (the tokens before `start`).

    attention: [layers, n, T], the step's n tokens' attention over every token up to each (T = start + n), heads
    averaged. Each layer: the first key (an attention sink) dropped, weights under `pruned_below` pruned, rows
    renormalised, then half the identity added (the residual), as rollout does. A context token's rollout lies
    wholly in the context, so only the step's rows are needed: a step token's share after a layer is its weight on
    the context plus its weights on the step's tokens times their shares after the layer below.  -> a number in [0, 1]"""
    layers, n, total = attention.shape
    share = torch.zeros(n, dtype=torch.float64)  # through no layer yet, a step token is all its own
    for a in attention.double():
        a = a.clone()
        a[:, 0] = 0.0
        a = a / a.sum(-1, keepdim=True).clamp_min(1e-30)
        a = a.masked_fill(a < pruned_below, 0.0)
        a = a / a.sum(-1, keepdim=True).clamp_min(1e-30)
        on_context = a[:, :start].sum(-1)
        on_step = a[:, start:total] @ share  # [n, n] x [n]
        share = 0.5 * (on_context + on_step) + 0.5 * share  # the residual keeps half of each token's own share
    return float(share.min())


def score(grounding: float | None, confidence_score: float, weight: float) -> float:
    """weight × grounding + (1 − weight) × confidence; confidence alone where grounding was not measured."""
    return confidence_score if grounding is None else weight * grounding + (1 - weight) * confidence_score


def most_consistent(steps: Steps) -> int:
    agreement = consistency([c.tokens for c in steps.candidates])
    return max(range(len(agreement)), key=lambda i: (agreement[i], -i))


def verdict(generation, steps: Steps, confidence_score: float) -> SpecGuardRecord:
    """The scores of the current step's chosen candidate, given its confidence by the scorer's logits."""
    own, chosen = steps.settings, steps.candidates[steps.chosen]
    grounding = None
    if own.grounding == "attention":
        scorer = generation.pair.draft if own.scorer == "draft" else generation.pair.target
        with generation.scoring():
            rows = scorer.attention_rows(generation.tokens + chosen.tokens, len(generation.tokens), ROLLOUT_LAYERS)
        grounding = rollout_grounding(rows, len(generation.tokens))
    agreement = consistency([c.tokens for c in steps.candidates])
    texts = [generation.pair.tokenizer.decode(c.tokens) for c in steps.candidates]
    listing = [(i, text[:200], agreement[i]) for i, text in enumerate(texts)]
    listing.insert(0, listing.pop(steps.chosen))  # the chosen first
    total = score(grounding, confidence_score, own.weight)
    return SpecGuardRecord(
        steps.index, grounding, confidence_score, min(max(total, 0.0), 1.0), listing, specguard_chosen=steps.chosen
    )


SPECGUARD = Guarded(
    name="specguard",
    title="SpecGuard",
    models="TM + DM",
    origins=(SPECGUARD_KEPT, SPECGUARD_TARGET),
    intervention_origins=(SPECGUARD_TARGET.name,),
    intervention=("recomputed token", "recomputed tokens"),
    grid=("specguard_threshold",),
    bench="specguard_threshold",
    settings=SpecGuardSettings,
    record=SpecGuardRecord,
    grouped=True,
)
