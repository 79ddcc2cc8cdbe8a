"""What each decoding method is: the one table the loop, the trace, the speed model, the reports and the page read.

A method is named by a string (`DecodeSettings.method`); everything else asks this table about it instead of listing
names. Words:
  draft passes   the draft proposes tokens (SD, EASD, RSD's draft-written steps, and draft-only, which is nothing else)
  verifies       the target checks the draft's tokens in one pass per block (SD and EASD): the speed model's subject
  one model      a run that decodes with one model alone, token by token (target-only, draft-only)
  origins        what a trace row of this method may say about where its token came from (easd.method.trace_schema)
  interventions  the origins that are the method acting against its plain model's choice: EASD's penalty, MTI's
                 guided token, a token of a step RSD's target wrote again after its reward model refused the draft's
Each method's own mechanics live in its own place: EASD's one line in `decoding.judge_block`, MTI's negative prompt
and guidance in mti.py, RSD's segments and its reward model in rsd.py; the batch asks this table which rows take
part in which pass.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str  # as settings, traces, files and the API name it
    title: str  # as a lane, a table and a legend show it
    uses_draft: bool
    uses_target: bool
    verifies: bool  # SD's block: the draft's k tokens checked in one target pass
    origins: tuple[str, ...]
    intervention_origins: tuple[str, ...] = ()  # the origins that count as the method's interventions
    intervention: tuple[str, str] = ("", "")  # one and several in words ("penalty", "penalties"); none if it never intervenes
    models: str = ""  # the models it runs, as the paper's Table 1 marks them: TM, DM, PRM
    guides: bool = False  # where the target is unsure, a second target pass after a negative prompt (mti.py)
    grid: tuple[str, ...] = ()  # the settings `sweep --grid NAME` sweeps for it, in the order a variant's label lists them

    @property
    def one_model(self) -> str | None:
        """ "target" or "draft" for a run of that model alone; None for a method of two models."""
        if self.uses_draft and self.uses_target:
            return None
        return "draft" if self.uses_draft else "target"

    @property
    def needs_prm(self) -> bool:
        """A process reward model scores its segments (rsd.py)."""
        return "PRM" in self.models.split(" + ")

    @property
    def intervenes(self) -> bool:
        return bool(self.intervention_origins)


_TABLE = (  # in the order the page offers them: the comparison's two first
    Method("sd", "SD", True, True, True, ("draft_accepted", "target_resample", "bonus"), models="TM + DM"),
    Method(
        "easd",
        "EASD",
        True,
        True,
        True,
        ("draft_accepted", "target_resample", "easd_penalty", "bonus"),
        ("easd_penalty",),
        ("penalty", "penalties"),
        "TM + DM",
    ),
    Method(
        "mti",
        "MTI",
        False,
        True,
        False,
        ("target", "mti_guided"),
        ("mti_guided",),
        ("guided token", "guided tokens"),
        "TM",
        guides=True,
        grid=("mti_tau", "mti_omega"),  # the paper's "intervention scale β" may be either ω or τ: docs/method.md
    ),
    Method(
        "rsd",
        "RSD",
        True,
        True,
        False,
        ("draft", "target"),
        ("target",),
        ("rewritten token", "rewritten tokens"),
        "TM + DM + PRM",
        grid=("rsd_delta",),
    ),
    Method("target", "target only", False, True, False, ("target",), models="TM"),
    Method("draft", "draft only", True, False, False, ("draft",), models="DM"),
)
METHODS: dict[str, Method] = {method.name: method for method in _TABLE}  # by name; settings check names against it
