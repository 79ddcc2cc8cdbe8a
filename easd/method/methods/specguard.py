"""SpecGuard (Purohit, Narayanam and Pal, arXiv 2604.15244): speculative decoding by reasoning steps, verified with
the draft's own signals. For each step the draft samples several candidates, the most consistent one is chosen, and
an ensemble of two model-internal scores decides: keep it, or have the target write the step again.

Only the paper's abstract and readers' notes of its text were reachable here (docs/method.md, "SpecGuard", lists every
choice and where the notes say the paper differs): its loop is the abstract's; the threshold and weight are the
paper's by those notes, the other details below are ours.
  step          text up to `delimiter` ("\\n\\n", as RSD's), or an end token, or the room left (easd.method.methods.steps)
  candidates    `candidates` steps drafted from the same prefix at `temperature`, one after another (a step each)
  consistency   each candidate's mean Jaccard similarity of its token set with the others'; the highest is chosen
                (ties: the first): the abstract's "most consistent step"
  grounding     the share of the draft's attention that the chosen step's tokens pay to the context (the prompt and
                the steps kept before), averaged over layers, heads and the step's tokens, the first token (an
                attention sink) left out: the abstract's "attribution to the input and previously accepted steps".
                It needs the runtime's attention weights: transformers has them, llama.cpp does not, so there it
                refuses in one line unless `grounding` is "none" (log-probability alone, and the lane says so)
  confidence    the draft's geometric-mean probability of the chosen step's tokens, exp(mean log q) at temperature 1:
                the abstract's "log-probability-based score that captures token-level confidence"
  decision      score = weight × grounding + (1 − weight) × confidence (confidence alone without grounding); the
                step is kept if the score reaches `threshold`, else the target writes the step again, a token a block
Both scores are the draft's: a kept step costs the target nothing, which is how SpecGuard can be faster than SD.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from ...errors import SettingsError
from .. import acceptance as acc
from ..judging import Block
from ..knobs import Control, knob
from ..origins import Origin
from ..settings import MIN_TEMPERATURE
from ..trace import Candidate, TokenRecord, recorded
from .base import draw_one
from .steps import Stepwise, step_ends

GROUNDINGS = ("attention", "none")


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
    )  # the paper's 16 (at top-p 0.8, by those notes) would draft 16 steps for every one kept: 3 suits a CPU
    temperature: float = knob(
        0.7,
        "the draft's temperature as it samples the candidate steps (the target writes a step again at the run's)",
        low=MIN_TEMPERATURE,
        high=2,
        label="SpecGuard draft temperature",
        short="candidates are sampled at",
        control=Control("slider", 0.05, 1.5, 0.05),
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
    )  # 0.7: the paper's, as three readers' notes of its text give it (0.6 was the worst of its ablation)
    weight: float = knob(
        0.7,
        "the grounding score's share of a step's score (the rest is the draft's confidence)",
        low=0,
        high=1,
        label="SpecGuard grounding weight",
        short="grounding's share of the score",
        control=Control("slider", 0, 1, 0.05),
    )  # 0.7 grounding, 0.3 log-probability: the paper's ensemble, as those notes give it
    grounding: str = knob(
        "attention",
        "attention: score a step's grounding from the draft's attention (transformers only); none: by confidence alone",
        choices=GROUNDINGS,
        label="SpecGuard grounding",
        short="attention, or none (llama.cpp)",
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
    "threshold, so the step was kept without the target.",
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
        "the draft's attention share to the context of the chosen candidate (empty without attention)",
        "float",
        low=0,
        high=1,
        label="grounding",
    )
    specguard_confidence: float = recorded(
        "the draft's geometric-mean probability of the chosen candidate's tokens", "float", low=0, high=1, label="confidence"
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
    )


@dataclass
class Drafted:
    """One candidate step the draft wrote."""

    tokens: list[int]
    records: list[TokenRecord]  # one per token, as the draft chose it
    confidence: float  # exp(mean log q) of its tokens at temperature 1


@dataclass
class Steps:
    """A SpecGuard generation's state: where the current step begins, its candidates so far, who writes it, and the
    verdict on the current step."""

    start: int  # index in the generation's tokens where the current step begins
    settings: SpecGuardSettings
    index: int = 0  # the current step's number
    candidates: list[Drafted] = field(default_factory=list)
    writer: str = "draft"  # "draft" while candidates are drafted; "target" once the chosen one was refused
    verdict: SpecGuardRecord | None = None  # the scores of the current step's chosen candidate

    def copy(self) -> Steps:
        return replace(self, candidates=list(self.candidates))

    def next_step(self, start: int) -> None:
        self.start, self.index, self.candidates, self.writer, self.verdict = start, self.index + 1, [], "draft", None


@dataclass(frozen=True, kw_only=True)
class Guarded(Stepwise):
    """Candidate steps from the draft, one kept by its scores or written again by the target (the module's docstring)."""

    def check(self, pair, settings) -> None:
        if self.own(settings).grounding == "attention" and not pair.draft.has_attention:
            raise SettingsError(
                "specguard_grounding",
                f"attention needs the draft's attention weights, which {pair.draft.backend} does not expose: "
                "use the transformers backend, or set it to none to check steps by the draft's confidence alone",
            )

    def start(self, generation) -> Steps:
        return Steps(start=generation.prompt_length, settings=self.own(generation.settings))

    def copy_state(self, state: Steps) -> Steps:
        return state.copy()

    def draft_sampling(self, settings) -> acc.Sampling:
        """Candidates are sampled at SpecGuard's own temperature, so that they differ."""
        return acc.Sampling(self.own(settings).temperature)

    def after_passes(self, plan) -> None:
        """Keep the candidate the draft wrote; after the last one, choose and score the most consistent."""
        generation, steps = plan.generation, plan.generation.state
        if steps.writer != "draft" or not plan.drafted:
            return
        recorder = generation.recorder
        records = [
            recorder.single_record(plan.block, plan.position + i, t, plan.q_logits[i], "draft")
            for i, t in enumerate(plan.drafted)
        ]
        log_q = [float(torch.log_softmax(plan.q_logits[i].float(), dim=-1)[0, t]) for i, t in enumerate(plan.drafted)]
        steps.candidates.append(Drafted(list(plan.drafted), records, math.exp(sum(log_q) / len(log_q))))
        if len(steps.candidates) == steps.settings.candidates:
            steps.verdict = verdict(generation, steps)

    def judge(self, plan) -> Block:
        """Nothing while candidates are drafted; then the chosen step whole if kept (else the target writes it again,
        a token a block), or one token of the target's version of the step."""
        generation, steps = plan.generation, plan.generation.state
        if steps.writer == "draft":
            if steps.verdict is None:  # more candidates to draft from the same prefix
                return Block(plan.block, plan.drafted, [], SPECGUARD_KEPT.name, generation)
            chosen = steps.candidates[_chosen(steps.verdict)]
            if steps.verdict.specguard_score >= steps.settings.threshold:
                records = [
                    replace(r, position=plan.position + i, block=plan.block, origin=SPECGUARD_KEPT.name, own=steps.verdict)
                    for i, r in enumerate(chosen.records)
                ]
                steps.next_step(len(generation.tokens) + len(records))
                return Block(plan.block, chosen.tokens, records, SPECGUARD_KEPT.name, generation)
            steps.writer = "target"
            return Block(plan.block, chosen.tokens, [], SPECGUARD_TARGET.name, generation)
        token = draw_one(generation, plan.p_logits)
        record = generation.recorder.single_record(plan.block, plan.position, token, plan.p_logits, "target")
        record.origin, record.own = SPECGUARD_TARGET.name, steps.verdict
        if step_ends(generation, steps.start, [token], steps.settings.delimiter):
            steps.next_step(len(generation.tokens) + 1)
        return Block(plan.block, [], [record], record.origin, generation)

    def lane_title(self, settings) -> str:
        return self.title + (", confidence only" if self.own(settings).grounding == "none" else "")

    def explains(self, record, settings) -> str:
        own, found = self.own(settings), record.own
        if not isinstance(found, SpecGuardRecord):
            return "This row does not record its reasoning step's scores."
        grounding = (
            f"grounding {found.specguard_grounding_score:.3f} × {own.weight:g} + confidence {found.specguard_confidence:.3f} × {1 - own.weight:g}"
            if found.specguard_grounding_score is not None
            else f"confidence {found.specguard_confidence:.3f} (no attention weights: grounding not scored)"
        )
        kept = "reached" if found.specguard_score >= own.threshold else "fell below"
        return (
            f"Reasoning step {found.specguard_step}: the draft wrote {len(found.specguard_drafts)} candidates and the most "
            f"consistent was checked: {grounding} = {found.specguard_score:.3f}, which {kept} the threshold {own.threshold:g}."
        )

    def bench_line(self, traces: list) -> str:
        """Steps, the share kept, and target passes per token (a kept step costs the target nothing)."""
        steps = {
            (i, r.own.specguard_step): r.origin
            for i, t in enumerate(traces)
            for r in t.records
            if isinstance(r.own, SpecGuardRecord)
        }
        kept = sum(origin == SPECGUARD_KEPT.name for origin in steps.values())
        tokens, passes = sum(len(t.records) for t in traces), sum(t.stats.target_calls for t in traces)
        return f"steps {len(steps)}  kept {kept / max(len(steps), 1):.2f}  target passes/token {passes / max(tokens, 1):.3f}"


# --- the checks, on the candidates as written ------------------------------------------------------------------


def consistency(candidates: list[list[int]]) -> list[float]:
    """Each candidate's mean Jaccard similarity of token sets with the others (1 for a lone candidate)."""
    sets = [set(c) for c in candidates]
    if len(sets) == 1:
        return [1.0]
    return [
        sum(len(a & b) / len(a | b) if a | b else 1.0 for j, b in enumerate(sets) if j != i) / (len(sets) - 1)
        for i, a in enumerate(sets)
    ]


def score(grounding: float | None, confidence: float, weight: float) -> float:
    """weight × grounding + (1 − weight) × confidence; confidence alone where grounding was not measured."""
    return confidence if grounding is None else weight * grounding + (1 - weight) * confidence


def verdict(generation, steps: Steps) -> SpecGuardRecord:
    """The scores of the most consistent candidate of the current step."""
    own, texts = steps.settings, [generation.pair.tokenizer.decode(c.tokens) for c in steps.candidates]
    agreement = consistency([c.tokens for c in steps.candidates])
    chosen = max(range(len(agreement)), key=lambda i: (agreement[i], -i))
    grounding = None
    if own.grounding == "attention":
        grounding = generation.pair.draft.attention_share(
            generation.tokens + steps.candidates[chosen].tokens, len(generation.tokens)
        )
    confidence = steps.candidates[chosen].confidence
    listing = [(i, text[:200], agreement[i]) for i, text in enumerate(texts)]
    listing.insert(0, listing.pop(chosen))  # the chosen first: `_chosen` reads it back
    return SpecGuardRecord(steps.index, grounding, confidence, score(grounding, confidence, own.weight), listing)


def _chosen(found: SpecGuardRecord) -> int:
    return found.specguard_drafts[0][0]


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
)
