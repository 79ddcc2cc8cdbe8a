"""Speculative decoding's figures in the field's own terms, counted from traces: the one place that computes them.

vLLM's speculative-decoding metrics (its `SpecDecodingStats` and the Prometheus counters `vllm:spec_decode_*`), which
llama.cpp's server and SGLang's per-request statistics report under the same definitions, and Spec-Bench's "mean
accepted tokens". Words:
  draft              one proposal the target verifies in one pass: an SD or EASD block with k ≥ 1 drafted tokens
                     (vLLM's `num_drafts` counts these; a block near the end with no room to draft is not one).
  draft tokens       the tokens proposed, k per draft (`num_draft_tokens`).
  accepted tokens    drafted tokens kept (`num_accepted_tokens`), and per draft position 1..k
                     (`num_accepted_tokens_per_pos`).
  mean acceptance length   tokens a draft's verification emits, the target's own token included: 1 + accepted / drafts
                     (vLLM's `mean_acceptance_length`; Spec-Bench's "mean accepted tokens" is tokens per target pass,
                     the same count where every target pass verifies a draft).
  draft acceptance rate    accepted / draft tokens (vLLM's `draft_acceptance_rate`).
  conditional acceptance at position i   of the drafts that reached position i (its tokens 1..i−1 accepted), the
                     share whose token i was accepted. vLLM prints `acceptance_rate_per_pos` = accepted at i / all
                     drafts; the conditional rate is that divided by the share of drafts reaching i, and says where
                     the draft loses the target without the earlier positions' losses in it.
  acceptance-length histogram   drafts by the tokens their verification emitted, 1..k+1 (in a summary, a list:
                     the drafts that emitted 1 token, 2 tokens, …).
EASD: a penalty (any method's refusal, `refused`) ends a verification as a rejection does: the penalized token counts as drafted and not accepted, and
the target's token that replaces it is the verification's last. `penalties` are counted beside the rest.
A draft whose accepted tokens end with an end token emits no token of the target's: the histogram counts what it
emitted, the mean acceptance length (vLLM's formula) one more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .origins import DRAFT_ACCEPTED, TARGET_RESAMPLE


class Counted(Protocol):
    """What is counted of a trace (easd.method.trace.Trace, which summarizes itself with this module)."""

    settings: Any  # its DecodeSettings: k, for a CSV trace that lacks its blocks
    records: list  # its TokenRecords: block, origin, draft_token_id
    blocks: list  # its BlockInfos: the tokens each draft proposed


def refused(record) -> bool:
    """A token a method's rule put in place of a draft the standard test kept (EASD's penalty): at a drafted position,
    neither the draft kept nor the target's token after a rejection."""
    return record.draft_token_id is not None and record.origin not in (DRAFT_ACCEPTED.name, TARGET_RESAMPLE.name)


def verified_drafts(trace: Counted) -> Iterator[tuple[int, list, list]]:
    """Each draft the target verified, in order: (its block, the block's records, the records of the positions the
    standard test judged, position 1 first). A position after a rejection or a penalty was never judged, so it has
    no record; a one-model token, or a block with no room to draft, is no draft."""
    by_block: dict[int, list] = {}
    for record in trace.records:
        by_block.setdefault(record.block, []).append(record)
    for index, records in by_block.items():
        judged = [r for r in records if r.draft_token_id is not None]
        if judged:
            yield index, records, judged


@dataclass
class SpecMetrics:
    """The counts, summed over traces; the rates are read from them."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)  # [i]: drafts whose token i + 1 was accepted
    reached_per_position: list[int] = field(default_factory=list)  # [i]: drafts whose token i + 1 the target judged
    lengths: Counter = field(default_factory=Counter)  # tokens emitted per draft -> drafts
    penalties: int = 0  # EASD's refusals, each the end of a verification

    @classmethod
    def of(cls, traces: Iterable[Counted]) -> SpecMetrics:
        metrics = cls()
        for trace in traces:
            metrics.add(trace)
        return metrics

    def add(self, trace: Counted) -> None:
        """Count one trace's drafts. Proposed tokens come from its blocks (a JSON trace, a live run); a CSV trace has
        none, and each draft counts the k it was run with, or fewer where its tokens say so."""
        proposed = {block.index: len(block.drafted) for block in trace.blocks}
        for index, records, judged in verified_drafts(trace):
            accepted = [r for r in judged if r.origin == DRAFT_ACCEPTED.name]
            k = proposed.get(index) or max(trace.settings.k, len(judged))
            self.num_drafts += 1
            self.num_draft_tokens += k
            self.num_accepted_tokens += len(accepted)
            self.penalties += sum(refused(r) for r in judged)
            for position in range(len(judged)):
                self._grow(position + 1)
                self.reached_per_position[position] += 1
                self.accepted_per_position[position] += judged[position].origin == DRAFT_ACCEPTED.name
            self.lengths[len(records)] += 1

    def _grow(self, positions: int) -> None:
        while len(self.reached_per_position) < positions:
            self.reached_per_position.append(0)
            self.accepted_per_position.append(0)

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens emitted per verified draft: 1 + accepted / drafts (None without drafts)."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def conditional_acceptance(self) -> list[float]:
        """Per draft position 1..: of the drafts that reached it, the share accepted there."""
        return [a / r for a, r in zip(self.accepted_per_position, self.reached_per_position)]

    @property
    def acceptance_per_position(self) -> list[float]:
        """Per draft position 1..: accepted there ÷ every draft (vLLM's `acceptance_rate_per_pos`)."""
        return [a / self.num_drafts for a in self.accepted_per_position] if self.num_drafts else []

    @property
    def histogram(self) -> dict[int, int]:
        """Drafts by tokens emitted, in order of length."""
        return dict(sorted(self.lengths.items()))

    def summary(self) -> dict:
        """The figures under their names, as summaries, files and the page print them."""
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "conditional_acceptance": self.conditional_acceptance,
            # drafts that emitted 1, 2, … tokens: a list, as JSON keeps it (a file's and the API's keys must be text)
            "acceptance_length_histogram": [self.lengths[n] for n in range(1, max(self.lengths, default=0) + 1)],
        }

    def line(self) -> str:
        """One line for a terminal: the four figures, then EASD's penalties where there were any."""
        if not self.num_drafts:
            return ""
        positions = " ".join(f"{rate:.2f}" for rate in self.conditional_acceptance)
        histogram = " ".join(f"{length}:{count}" for length, count in self.histogram.items())
        text = (
            f"mean acceptance length {self.mean_acceptance_length:.2f}  draft acceptance rate "
            f"{self.draft_acceptance_rate:.3f}  by position [{positions}]  lengths {{{histogram}}}"
        )
        return text + (f"  penalties {self.penalties}" if self.penalties else "")
