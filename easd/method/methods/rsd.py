"""RSD, reward-guided speculative decoding (Liao et al., 2025): the draft writes a whole reasoning segment, a process
reward model scores it, and the target writes the segment again, a token a block, where the reward is below δ.

Words: a *segment* is what RSD's paper calls a reasoning step, text up to the delimiter (`rsd_delimiter`,
"\n\n"); this code says segment so that "step" keeps its one meaning, a round of the batch. A trace keeps the
paper's word in its column `rsd_step` (the segment's index) and in the stop reason `max_steps`, so that saved files
read as before. A generation's state is its `Segments`: while the draft writes a segment, the row drafts
`k` positions a batch step (easd.method.methods.steps) until the segment ends (the delimiter, an end token or the room),
with no target pass; the reward model scores it then; kept, its tokens are the block, refused, the target writes the
segment again, target-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...errors import SettingsError
from ..judging import Block
from ..knobs import Control, knob
from ..origins import DRAFT, TARGET
from ..trace import recorded
from .base import draw_one
from .steps import Drafted, Stepwise, step_ends, step_text


@dataclass(frozen=True)
class RsdSettings:
    delta: float = knob(
        0.7,
        "RSD keeps a step the draft wrote where the process reward model scores it at least δ (above 1 keeps none)",
        low=0,
        expects="a reward ≥ 0 (above 1 keeps no draft step)",
        label="RSD δ",
        short="keep a draft step scored at least",
        control=Control("slider", 0, 1.5, 0.05),
        sweep=(0.5, 0.6, 0.7, 0.8, 0.9),
    )
    delimiter: str = knob("\n\n", "the text that ends a reasoning step (write \\n for a line break)", low=1, high=16)


@dataclass
class RsdRecord:
    rsd_step: int = recorded("the reasoning step the token belongs to (0, 1, …)", "int", low=0, label="reasoning step")
    rsd_reward: float = recorded(
        "the PRM's reward for the draft's version of that step (kept if ≥ δ)", "float", low=0, high=1, label="PRM reward"
    )


MAX_SEGMENTS = 100  # RSD's cap on reasoning steps, as in its authors' code (stop reason "max_steps")


@dataclass
class Segments:
    """An RSD generation's segments: who writes the current one, where it began, and the finished ones."""

    start: int  # the index in the generation's tokens where the current segment begins
    settings: RsdSettings  # the run's δ and delimiter
    writer: str = "draft"  # "draft", or "target" once the PRM refused the draft's version of this segment
    reward: float | None = None  # the PRM's reward for the draft's version of the current segment
    texts: list[str] = field(default_factory=list)  # the finished segments, as the PRM reads them
    drafts: list[Drafted] = field(default_factory=lambda: [Drafted()])  # the draft's version of the current segment

    @property
    def full(self) -> bool:
        """The run has written as many segments as RSD allows."""
        return len(self.texts) >= MAX_SEGMENTS

    def copy(self) -> Segments:
        return Segments(self.start, self.settings, self.writer, self.reward, list(self.texts), [self.drafts[0].copy()])

    def ends(self, generation, new: list[int]) -> bool:
        """Whether the current segment ends with the tokens `new` after the generation's (easd.method.methods.steps)."""
        return step_ends(generation, self.start, new, self.settings.delimiter)

    def text(self, generation, new: list[int]) -> str:
        return step_text(generation, self.start, new)

    def reward_for(self, generation, drafted: list[int], question: str) -> float:
        """The PRM's reward for the draft's version of the current segment, given the question and the segments
        before it (one PRM pass per segment: the PRM is a model of its own, outside the batch's caches)."""
        return generation.pair.prm.reward(question, [*self.texts, self.text(generation, drafted).strip()])

    def judge_draft(self, generation, drafted: list[int], reward: float, records: list) -> bool:
        """The draft's segment is kept whole if its reward reaches δ (True); else the target writes it again. Marks
        the records with the segment and its reward."""
        for record in records:
            record.own = RsdRecord(len(self.texts), reward)
        if reward >= self.settings.delta:
            self._finish(self.text(generation, drafted), len(generation.tokens) + len(drafted))
            return True
        self.writer, self.reward = "target", reward
        return False

    def take_target(self, generation, record) -> None:
        """One token of the target's version of the segment; the segment ends with the delimiter or an end token."""
        record.own = RsdRecord(len(self.texts), self.reward)
        if self.ends(generation, [record.token_id]):
            self._finish(self.text(generation, [record.token_id]), len(generation.tokens) + 1)

    def _finish(self, text: str, next_start: int) -> None:
        """The current segment is done (kept or written again): the next one is the draft's, from `next_start`."""
        self.texts.append(text.strip())
        self.start, self.writer, self.reward, self.drafts = next_start, "draft", None, [Drafted()]


@dataclass(frozen=True, kw_only=True)
class Rewarded(Stepwise):
    """Segments written by the draft, kept where the process reward model's reward reaches δ, else by the target."""

    def check(self, pair, settings) -> None:
        if pair.prm is None:
            raise SettingsError(
                "prm", "RSD asks a process reward model to score each step, and none is loaded: give one with --prm FOLDER"
            )

    def start(self, generation) -> Segments:
        return Segments(start=generation.prompt_length, settings=self.own(generation.settings))

    def copy_state(self, state: Segments) -> Segments:
        return state.copy()

    def after_passes(self, plan) -> None:
        """The draft's new tokens of the segment; once it ended, the reward model's reward for it."""
        generation = plan.generation
        if generation.state.writer == "draft":
            drafted = generation.state.drafts[0]
            drafted.take(plan)
            if drafted.ended and drafted.tokens:
                question = generation.prompt if generation.question is None else generation.question
                with generation.scoring():
                    plan.score = generation.state.reward_for(generation, drafted.tokens, question)

    def judge(self, plan) -> Block:
        """While the draft writes the segment, nothing; once it ended, the segment, kept whole if its reward reaches δ
        (else nothing yet: the target writes the segment again, a token a block); or one token of the target's version."""
        generation, segments, recorder = plan.generation, plan.generation.state, plan.generation.recorder
        if segments.writer == "draft":
            drafted = segments.drafts[0]
            if not drafted.ended:
                return self.drafting([plan], "draft")
            records = [replace(r, block=plan.block) for r in drafted.records]
            kept = segments.judge_draft(generation, drafted.tokens, plan.score, records)
            return Block(plan.block, drafted.tokens, records if kept else [], "draft", generation)  # refused: nothing yet
        token = draw_one(generation, plan.p_logits)
        record = recorder.single_record(plan.block, plan.position, token, plan.p_logits, "target")
        segments.take_target(generation, record)
        return Block(plan.block, [], [record], "target", generation)

    def ended(self, generation) -> str | None:
        return "max_steps" if generation.state.full else None

    def explains(self, record, settings) -> str:
        own, reward, step = self.own(settings), record.value("rsd_reward"), record.value("rsd_step")
        if not (isinstance(reward, (int, float)) and not isinstance(reward, bool) and isinstance(step, int)):
            return "This row does not record its reasoning step's reward."
        given = f"Reasoning step {step} (text up to {own.delimiter!r}): the process reward model gave the draft's version {reward:.3f}"
        if record.origin == "draft":
            return f"{given} ≥ δ = {own.delta:g}, so the draft's step was kept."
        return f"{given} < δ = {own.delta:g}, so the target wrote the step again from the same prefix."

    def bench_line(self, traces: list) -> str:
        """Its steps over runs: how many, the share the PRM kept, and the seconds and passes each step cost."""
        steps = {
            (i, r.value("rsd_step")): r.origin for i, t in enumerate(traces) for r in t.records
        }  # a step's tokens share an origin
        kept = sum(origin == "draft" for origin in steps.values())
        seconds = sum(t.stats.seconds for t in traces)
        draft, target = (sum(getattr(t.stats, f"{side}_calls") for t in traces) for side in ("draft", "target"))
        return (
            f"steps {len(steps)}  kept {kept / len(steps):.2f}  {seconds / len(steps):.2f} s/step  "
            f"passes/step: draft {draft / len(steps):.1f}, target {target / len(steps):.1f}"
        )


RSD = Rewarded(
    name="rsd",
    title="RSD",
    models="TM + DM + PRM",
    origins=(DRAFT, TARGET),
    intervention_origins=(TARGET.name,),
    intervention=("rewritten token", "rewritten tokens"),
    grid=("rsd_delta",),
    bench="rsd_delta",
    bench_against="draft",  # δ = 0 keeps every step: RSD ÷ draft-only is then the PRM's cost
    settings=RsdSettings,
    record=RsdRecord,
)
