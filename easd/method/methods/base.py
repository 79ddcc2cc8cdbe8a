"""What a decoding method is: one object, in a module of its own, that the table (easd.method.methods) lists.

The step (easd.method.step.Batch) runs the same passes for every row of a batch: draft passes, one target pass, and,
for a row that asks, a second look by the target; then each row's block is judged alone. Which rows take part in
which pass, what a row makes of its logits and how its block is judged is its method's to say, through the hooks
below; the step never asks for a method by name. Words as in step.py: a *generation* is one prompt decoded under
one DecodeSettings, a *plan* its part in one step (step.RowPlan), a *block* what the step emits for it.

The hooks a method may fill, in the order the step calls them:
  check(pair, settings)    whether this pair can run it at all (RSD needs a reward model), before anything decodes
  on_pair(pair, settings)  its settings as they run on this pair (SpecGuard's grounding "auto": attention or none)
  start(generation)        its own state for a generation (MTI's negative prompt, RSD's segments), once
  width(generation)        how many rows it holds in the batch: its members (SMC-SD's particles; 1 for most), as it joins
  sequence(generation, m)  what member m's row holds, and the token after (the generation's tokens; a particle's own)
  plan(generation)         how many draft passes the row takes part in this step, and whether it takes the target's
                           (a group's: plan_member(generation, m), for member m's row)
  given(generation, m)     tokens the row already holds for this step's passes, read after its own without drafting
                           (SpecGuard's chosen step, which the target scores): its `drafted` as the step starts
  propose(plan, logits)    after each draft pass: the token it proposes and the distribution it drew it from
                           (a Proposal; None proposes nothing: the step keeps the logits in plan.q_logits either way)
  second_look(plan)        after the target's pass: tokens after which the target should look again (MTI), or None
  after_passes(plan)       after the passes: work outside the batch's models (RSD's reward model)
  judge(plan)              the row's block: the tokens emitted and their trace records (judge_group(plans): a group's,
                           from all its rows; it may set each plan's `keep` and ask its rows to follow: `parents`)
  ended(generation)        a reason of its own to end the generation (RSD's step cap), or None
  at_sampling(settings, T, top_p)  its settings decoding at a comparison's one temperature and top-p

What a method declares besides its hooks, which everything outside the methods reads instead of its name: its
origins (easd.method.origins: the legend, the lanes' colours, the inspector's sentence), its own record (`record`, a
dataclass of `recorded` fields: trace columns, the inspector's lines, Find tokens' fields), its own settings
(`settings`, a dataclass of knobs: flags, sliders, the API). That is `Decoding`, the half a newcomer implements. The
other half, `Described` (easd.method.methods.described), is how it is named, explained and measured: its title, its
interventions in words, the inspector's sentence (`explains`), its lane's stats line, the settings a sweep varies
(`grid`) and those bench's rows vary (`bench`), each with a default. `Method` is the two together.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

import torch

from .. import acceptance as acc
from ..judging import Block, Proposal
from ..origins import Origin
from .described import Described


@dataclass(frozen=True, kw_only=True)
class Decoding:
    """How a method decodes: the facts the step, the trace's schema and the speed model read, and its hooks (the
    module's docstring). This base decodes with its one model alone (the target, or the draft where `models` is
    "DM"), a token a block."""

    name: str  # as settings, traces, files and the API name it
    models: str  # the models it runs, as the paper's Table 1 marks them: TM, DM, PRM ("TM + DM")
    origins: tuple[Origin, ...]  # what a trace row of this method may say about where its token came from
    verifies: bool = False  # SD's block: the draft's k tokens checked in one target pass (the speed model's subject)
    signals: bool = False  # its records carry EASD's signals (entropies, overlap, the rule, margins) at drafted positions
    refuses: bool = False  # EASD's rule: a draft the standard test kept is refused where the rule fires
    follows: str = ""  # the method whose run it equals until its first intervention (EASD: SD's), which it may resume
    settings: type | None = None  # its own settings: a frozen dataclass of knobs (easd.method.knobs), or None
    record: type | None = None  # its own trace columns: a dataclass of `recorded` fields (easd.method.trace), or None
    grouped: bool = False  # its generations hold a group of rows of the batch (`width`: particles, candidates, beams)
    greedy_form: bool = True  # it can decode greedily (SMC-SD samples whatever the temperature): a comparison's protocol

    def own(self, settings) -> Any:
        """Its own settings in a run's `settings` (DecodeSettings): set there, else as declared."""
        return settings.own_settings(self.name, self.settings())

    @property
    def uses_draft(self) -> bool:
        return "DM" in self.models.split(" + ")

    @property
    def uses_target(self) -> bool:
        return "TM" in self.models.split(" + ")

    @property
    def needs_prm(self) -> bool:
        """A process reward model scores what it writes (RSD)."""
        return "PRM" in self.models.split(" + ")

    @property
    def one_model(self) -> str | None:
        """ "target" or "draft" for a run of that model alone; None for a method of two models."""
        if self.uses_draft and self.uses_target:
            return None
        return "draft" if self.uses_draft else "target"

    @property
    def origin_names(self) -> tuple[str, ...]:
        return tuple(origin.name for origin in self.origins)

    # --- hooks: a target-only method's, one token a block ------------------------------------------------------

    def check(self, pair, settings) -> None:
        """SettingsError, naming the setting or flag, if `pair` cannot run it under `settings` (RSD without a process
        reward model; SpecGuard's attention on llama.cpp): asked before anything decodes."""

    def on_pair(self, pair, settings):
        """`settings` (DecodeSettings) as they run on `pair`, where a setting of its own says "whatever this pair
        can" (SpecGuard's grounding "auto"): what the trace records. Unchanged by default."""
        return settings

    def start(self, generation) -> Any:
        """Its own state for a new generation (`generation.state`); None if it keeps none."""
        return None

    def copy_state(self, state: Any) -> Any:
        """A copy of a generation's state, for a snapshot that resumes elsewhere."""
        return copy.copy(state)

    def extra_room(self, generation) -> int:
        """Tokens its row holds beyond the prompt, the new tokens and a block's drafts (MTI's negative prompt)."""
        return 0

    def width(self, generation) -> int:
        """How many rows of the batch it holds: one."""
        return 1

    def sequence(self, generation, member: int) -> list[int]:
        """What member `member`'s row holds, and the token after: the generation's prompt and the tokens it emitted."""
        return generation.tokens

    def plan_member(self, generation, member: int) -> tuple[int, bool]:
        """`plan` for member `member`'s row: a generation of one row plans as `plan` says."""
        return self.plan(generation)

    def plan(self, generation) -> tuple[int, bool]:
        """(draft passes it takes part in this step, whether it takes the target's pass): its one model's pass."""
        alone = self.one_model == "draft"
        return int(alone), not alone

    def given(self, generation, member: int = 0) -> list[int]:
        """Tokens this step's passes read after the row's own, before any drafting (none)."""
        return []

    def propose(self, plan, logits: torch.Tensor) -> Proposal | None:
        """After a draft pass: the token the draft alone chooses (its logits are kept in plan.q_logits).  logits: [1, V]"""
        return Proposal(draw_one(plan.generation, logits), None)

    def second_look(self, plan) -> list[int] | None:
        """Tokens after which the target should read the row once more in this step, or None."""
        return None

    def after_passes(self, plan) -> None:
        """Work after the batch's passes, outside its models."""

    def judge_group(self, plans: list) -> Block:
        """The block of a generation from its rows' plans, in member order: its one row's (`judge`)."""
        return self.judge(plans[0])

    def judge(self, plan) -> Block:
        """One token of the one model: the draft's proposal, or drawn from the target's logits: the row's block."""
        generation = plan.generation
        if self.one_model == "target":
            logits, token = plan.p_logits, draw_one(generation, plan.p_logits)  # [1, V]
        else:
            logits, token = plan.q_logits[0], plan.drafted[0]
        record = generation.recorder.single_record(plan.block, plan.position, token, logits, self.one_model)
        return Block(plan.block, [], [record], record.origin, generation)

    def ended(self, generation) -> str | None:
        """A stop reason of its own after the generation's latest block (one of easd.method.trace.STOP_REASONS), or None."""
        return None

    def at_sampling(self, settings, temperature: float, top_p: float):
        """`settings` (DecodeSettings) decoding at `temperature` (0: greedy) and `top_p`, its own sampling settings
        included (a comparison's one protocol, easd.lab.runs.protocol); ValueError saying why where it cannot."""
        return replace(settings, temperature=temperature, top_p=top_p)


@dataclass(frozen=True, kw_only=True)
class Method(Decoding, Described):
    """A decoding method: how it decodes (`Decoding`: its facts and hooks, what a newcomer implements) and how it is
    named, explained and measured (`Described`: words, interventions, its grid and bench rows, each with a default)."""


def draw_one(generation, logits: torch.Tensor, sampling: acc.Sampling | None = None) -> int:
    """A token drawn from `logits` under `sampling` (the generation's temperature and top-p where not given; greedy:
    the argmax), with the generation's own random numbers.  logits: [1, V]"""
    settings = generation.settings
    sampling = sampling or acc.Sampling(settings.temperature, settings.top_p)
    return int(acc.draw(sampling.probs(logits), generation.generator, sampling.greedy))
