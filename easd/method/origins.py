"""Where a token came from: an origin, declared once by the method whose rows say it, with everything the rest of
the project shows of it (the lanes' legend and colour, the inspector's sentence, the stepper's words, the fields a
row of it must carry). The five below belong to no one method (every speculative method's block, and a model alone);
a method with an origin of its own declares it in its module (EASD's penalty, MTI's guided token) and lists it in
its `origins`. easd.method.methods.origins() is every origin of the table, by name.

Roles: what the token is to a speculative block, which the lanes, the stepper and the inspector read instead of names
(the counts, easd.method.spec_metrics, read a drafted position's outcome: kept, rejected, or refused by a rule):
  accepted   a drafted token the target's test kept
  rejected   the target's token after its test rejected a draft (the block's end)
  refused    the target's token after the method's own rule refused a draft the test kept (EASD's penalty)
  bonus      the target's token after every draft was kept
  chosen     a token one model chose, not as part of a draft's check (target-only, draft-only, MTI, RSD)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ROLES = ("accepted", "rejected", "refused", "bonus", "chosen")
BLOCK_END_ROLES = ("rejected", "refused", "bonus")  # a speculative block ends with one of these
# what a style may say: CSS declarations only, so that no declaration can close the style sheet or open a tag
_STYLE = re.compile(r"[a-z-]+\s*:\s*[#\w\s.%(),-]+(;\s*[a-z-]+\s*:\s*[#\w\s.%(),-]+)*;?")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Origin:
    """One origin: its name in traces, how the page shows it and what it means."""

    name: str  # as a trace's `origin` column says it; a lowercase identifier
    label: str  # the legend's words ("EASD penalty")
    style: str  # the lanes' CSS for its tokens (Okabe–Ito colours; a mark beyond colour where it matters)
    role: str  # one of ROLES
    # the inspector's sentence: {drafted} and {chosen} become the tokens, {odds} the drafted token's q, p and
    # acceptance probability
    says: str
    ended: str = ""  # the stepper's "why the block ended", for a role that ends a block
    writer: str = "target"  # the model whose token it is (its top candidates are the inspector's), "draft" or "target"
    needs: tuple[str, ...] = ()  # trace fields every row of this origin carries (the schema checks them)

    def __post_init__(self):
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"an origin's name must be a lowercase identifier (got {self.name!r})")
        if self.role not in ROLES:
            raise ValueError(f"origin {self.name}: role must be one of {', '.join(ROLES)} (got {self.role!r})")
        if not _STYLE.fullmatch(self.style.strip()):
            raise ValueError(f"origin {self.name}: style must be CSS declarations such as 'background: #f0e442;'")

    @property
    def ends_block(self) -> bool:
        return self.role in BLOCK_END_ROLES

    def css(self) -> str:
        """Its rule of the lanes' style sheet."""
        return f".o-{self.name} {{ {self.style.strip()} }}"


# the fields the standard test fills at a drafted position (a block's examined tokens)
TESTED = ("draft_token_id", "draft_token_text", "p_draft", "p_target", "accept_prob")

DRAFT_ACCEPTED = Origin(
    "draft_accepted",
    "draft accepted",
    "background: #cde8f8;",  # sky blue: the draft's token, kept
    "accepted",
    "The draft proposed {drafted} {odds}; the target's test kept it.",
    ended="the run ended inside the block (an end token, or the token limit)",
    needs=TESTED,
    writer="draft",
)
TARGET_RESAMPLE = Origin(
    "target_resample",
    "target resampled",
    "background: #f7d9a0;",  # orange: the target's replacement after a rejection
    "rejected",
    "The draft proposed {drafted} {odds}; the target's test rejected it, so {chosen} was drawn from the residual max(0, p − q).",
    ended="the target's standard test rejected a draft",
    needs=TESTED,
)
BONUS = Origin(
    "bonus",
    "bonus (target)",
    "background: #b3e3d3;",  # bluish green: the target's free extra token
    "bonus",
    "All drafts of the block were kept, so the target added {chosen} from its own next-token distribution.",
    ended="every draft was accepted, so the target added a bonus token",
)
TARGET = Origin(
    "target", "target only", "background: #e6e6e6;", "chosen", "The target alone chose {chosen}.", needs=("h_target",)
)
DRAFT = Origin(
    "draft", "draft only", "background: #e6e6e6;", "chosen", "The draft alone chose {chosen}.", needs=("h_draft",), writer="draft"
)
ALONE = (TARGET.name, DRAFT.name)  # a model alone's tokens: plain grey, left out of the legend
SPECULATIVE = (DRAFT_ACCEPTED, TARGET_RESAMPLE, BONUS)  # the origins of SD's block
