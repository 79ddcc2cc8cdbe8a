"""Beam search on the draft model: one of the paper's draft-model baselines (N beams on the draft alone).

Its N beams are a group of N rows of the shared batch (easd.method.rows), each taking the batch's draft pass, copied
and dropped as the search goes (`follow`), beside every other generation's rows. Words: a beam's *score* is the sum of
its tokens' log-probabilities; it is *ranked* by score / length^α, α the length penalty (transformers'
`length_penalty`: 1, its default, ranks by the mean log-probability per token; 0 by the sum, where longer beams lose).
One step:
  1. ONE draft pass over every unfinished beam: log q(· | beam) for each; when sampling (temperature > 0, as the
     paper's beam search at 0.7 and top-p 0.8), log of q at that temperature within the top-p nucleus.
  2. Candidates: greedy, each beam's N most likely next tokens; sampled, N (beam, token) pairs drawn without
     replacement from softmax(score + log q) over every beam and token (transformers' beam-search multinomial
     sampling). With every finished beam as it is, the N best ranked are the new beams (EOS finishes a beam).
  3. The rows follow: a beam kept once keeps its row, one kept more than once gets copies of it.
It stops when no unfinished beam ranks above the best finished one (exact with α = 0, where scores only fall as a
beam grows; a heuristic otherwise, like transformers' early_stopping=False), when every beam has finished, or at
max_new_tokens or the context. With N = 1, greedy and α = 0 it is greedy draft-only, token for token. The lane streams
what every beam agrees on, then the best beam's rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .. import acceptance as acc
from ..judging import Block
from ..knobs import knob
from ..origins import DRAFT
from ..settings import DecodeSettings
from ..trace import TokenRecord
from .base import Method

MAX_BEAMS = 64  # each beam is a row of the draft's caches: more only multiplies the cost
MAX_LENGTH_PENALTY = 10.0  # α past this ranks by length alone


@dataclass(frozen=True)
class BeamSettings:
    width: int = knob(4, "how many beams search the draft's continuations", low=1, high=MAX_BEAMS)
    length_penalty: float = knob(
        1.0,
        "α: beams are ranked by summed log-probability / length^α (transformers' length_penalty, 1 its default; 0 ranks "
        "by the sum)",
        low=0,
        high=MAX_LENGTH_PENALTY,
    )


@dataclass
class Search:
    """A beam search's state: its beams (member i of its group of rows holds beams[i]; a finished beam keeps its row,
    idle), how many of the best beam's tokens the lane has, and the best beam once the search is over."""

    beams: list[Beam]
    committed: int = 0
    best: int | None = None

    def copy(self) -> Search:
        return Search([Beam(list(b.tokens), b.score, list(b.records), b.done) for b in self.beams], self.committed, self.best)

    def agreed(self) -> int:
        """How many tokens every beam shares (the best one's all, once the search is over)."""
        if self.best is not None:
            return len(self.beams[self.best].tokens)
        shortest = min(len(b.tokens) for b in self.beams)
        first = self.beams[0].tokens
        return next((i for i in range(shortest) if any(b.tokens[i] != first[i] for b in self.beams)), shortest)


@dataclass(frozen=True, kw_only=True)
class Searched(Method):
    """Beam search on the draft: its beams a group of rows of the batch (the module's docstring)."""

    def start(self, generation) -> Search:
        return Search([Beam([])])

    def copy_state(self, state: Search) -> Search:
        return state.copy()

    def lane_facts(self, trace, summary: dict) -> list[tuple[str, object]]:
        """Its beams, then the draft's passes (each scores every beam)."""
        return [("beams", self.own(trace.settings).width), *super().lane_facts(trace, summary)]

    def width(self, generation) -> int:
        """A row of the batch per beam: all of them from the start, the first holding the one empty beam."""
        return self.own(generation.settings).width

    def sequence(self, generation, member: int) -> list[int]:
        beams = generation.state.beams
        return generation.prompt_ids + (beams[member].tokens if member < len(beams) else [])

    def plan_member(self, generation, member: int) -> tuple[int, bool]:
        """An unfinished beam takes the draft's pass; a finished one, an empty row or every one once the search is
        over takes none."""
        search = generation.state
        beam = search.beams[member] if member < len(search.beams) else None
        live = search.best is None and beam is not None and not beam.done and len(beam.tokens) < _limit(generation)
        return int(live), False

    def propose(self, plan, logits):
        """Nothing: the step keeps the beam's logits (plan.q_logits), which the search ranks in `judge_group`."""
        return None

    def judge_group(self, plans: list) -> Block:
        """One step of the search: the N best ranked of the live beams' candidates and the finished beams; the rows
        follow the beams they came from; when no live beam can rank above the best finished one, or none is left,
        the best beam is the answer. The block: what every beam agrees on that the lane does not have yet."""
        generation, search = plans[0].generation, plans[0].generation.state
        own, settings, pair = self.own(generation.settings), generation.settings, generation.pair
        searched = {plan.member: plan for plan in plans if plan.q_logits}
        if searched:
            live = [search.beams[m] for m in searched]
            finished = [b for b in search.beams if b.done]
            out = {i: searched[m].q_logits[0] for i, m in enumerate(searched)}  # {live index: [1, V]}
            generator = None if settings.greedy else generation.generator
            chosen = _best(live, finished, out, own, settings, generator)
            members = list(searched)
            extended = [
                (members[row], _extend(beam, t, value, out[row], generation.recorder, pair))
                for row, beam, t, value in chosen
                if t is not None
            ]
            for member, beam in extended:
                searched[member].keep = [beam.tokens[-1]]  # its row computed the parent's last token: keep it
            growing = _first_children_first([(m, b) for m, b in extended if not b.done])
            ended = [(_member(search, b), b) for _, b, t, _ in chosen if t is None] + [(m, b) for m, b in extended if b.done]
            parents = [m for m, _ in growing + ended]
            beams = [b for _, b in growing + ended]
            search.beams = beams
            generation.parents = parents
        limit = _limit(generation)
        live = [b for b in search.beams if not b.done and len(b.tokens) < limit]
        finished = [b for b in search.beams if b.done or len(b.tokens) >= limit]
        if search.best is None and (not live or _settled(live, finished, own.length_penalty)):
            search.best = max(range(len(search.beams)), key=lambda i: search.beams[i].rank(own.length_penalty))
            best = search.beams[search.best]
            generation.trace.info |= {
                "beams": own.width,
                "beam_length_penalty": own.length_penalty,
                "beam_score": best.score,
                "beam_rank": best.rank(own.length_penalty),
            }
        agreed = search.agreed()
        records = search.beams[search.best or 0].records[search.committed : agreed]
        search.committed = agreed
        return Block(plans[0].block, [], records, DRAFT.name, generation)

    def ended(self, generation) -> str | None:
        """Over when the best beam's tokens are all in the trace (an end token or the budget ends it first)."""
        search = generation.state
        return "max_new_tokens" if search.best is not None and search.committed >= search.agreed() else None

    def variant(self, spec: str, settings: DecodeSettings) -> DecodeSettings:
        """beam:N, N beams ranked by mean log-probability per token (α = 1, transformers' default), or beam:N/α with
        another length penalty (beam:4/0 ranks by the sum)."""
        width, _, alpha = spec.partition("/")
        try:
            own = BeamSettings(width=int(width), length_penalty=float(alpha or 1.0))
        except ValueError:
            raise ValueError("must be beam:N or beam:N/α, N beams, α the length penalty (e.g. beam:4, beam:4/0)") from None
        return replace(settings, method=self.name).with_own(self.name, own).validate()

    def describe(self, settings: DecodeSettings) -> str:
        """What a table says about the row: "4 beams on the draft, sampled at temperature 0.7, top-p 0.8, ranked by …"."""
        own = self.own(settings)
        drawn = "greedy" if settings.greedy else f"sampled at temperature {settings.temperature:g}, top-p {settings.top_p:g}"
        ranked = "summed log-probability" if own.length_penalty == 0 else f"log-probability / length^{own.length_penalty:g}"
        return f"{own.width} beams on the draft, {drawn}, ranked by {ranked}"


BEAM = Searched(
    name="beam",
    title="beam search",
    models="DM",
    origins=(DRAFT,),
    settings=BeamSettings,
    variant_form="beam:N or beam:N/α",
    grouped=True,
)


@dataclass
class Beam:
    tokens: list[int]  # generated so far
    score: float = 0.0  # summed log-probability of `tokens` under the draft (at the run's temperature, in its nucleus)
    records: list[TokenRecord] = field(default_factory=list)
    done: bool = False  # ended with EOS

    def rank(self, alpha: float) -> float:
        return self.score / max(len(self.tokens), 1) ** alpha


def _first_children_first(growing: list[tuple[int, Beam]]) -> list[tuple[int, Beam]]:
    """The growing beams (each with its parent's member), each parent's first child first, in order, then the others:
    the rows' order after they follow (the first child keeps its parent's row, the others get copies), in which the
    next step's draws are made."""
    parents = [m for m, _ in growing]
    firsts = [i for i, m in enumerate(parents) if parents.index(m) == i]
    return [growing[i] for i in firsts] + [growing[i] for i in range(len(growing)) if i not in firsts]


def _member(search: Search, beam: Beam) -> int:
    """The member whose row holds `beam`."""
    return next(i for i, b in enumerate(search.beams) if b is beam)


def _limit(generation) -> int:
    """The most tokens a beam may hold: the budget, within the context."""
    return min(generation.settings.max_new_tokens, generation.pair.context_length - generation.prompt_length)


def _settled(live: list[Beam], finished: list[Beam], alpha: float) -> bool:
    """No unfinished beam ranks above the best finished one (with α = 0 none can again: a longer beam's score only falls)."""
    return bool(finished) and max(b.rank(alpha) for b in finished) >= max(b.rank(alpha) for b in live)


def _best(
    live: list[Beam], finished: list[Beam], out: dict, search: BeamSettings, settings: DecodeSettings, generator
) -> list[tuple[int, Beam, int | None, float]]:
    """(row, beam, token, log q of token) for the `beams` best ranked of the live beams' candidates (step 2 of the
    module docstring) and every finished beam (row -1, token None)."""
    beams, alpha = search.width, search.length_penalty
    log_q = torch.stack([_log_q(out[row][0], settings) for row in range(len(live))])  # [R, V]
    if generator is None:  # each beam's `beams` most likely tokens
        values, tokens = log_q.topk(beams, dim=-1)  # [R, beams]
        rows = torch.arange(len(live))[:, None].expand_as(tokens)
    else:  # `beams` pairs without replacement from softmax(score + log q): the Gumbel top-k trick
        joint = log_q + torch.tensor([b.score for b in live], device=log_q.device)[:, None]  # [R, V]
        uniform = torch.rand(joint.shape, generator=generator, device=joint.device).clamp_min(1e-20)
        drawn = (joint - torch.log(-torch.log(uniform))).flatten().topk(min(beams, int(torch.isfinite(joint).sum())))
        rows, tokens = drawn.indices // joint.shape[1], drawn.indices % joint.shape[1]
        values = log_q.flatten()[drawn.indices]
    candidates = [(beam.rank(alpha), -1, beam, None, 0.0) for beam in finished]
    for row, token, value in zip(rows.flatten().tolist(), tokens.flatten().tolist(), values.flatten().tolist()):
        beam = live[row]
        rank = (beam.score + value) / (len(beam.tokens) + 1) ** alpha
        candidates.append((rank, row, beam, token, value))
    candidates.sort(key=lambda c: c[0], reverse=True)  # stable: among equal ranks, the earlier beam and token first
    return [(row, beam, token, value) for _, row, beam, token, value in candidates[:beams]]


def _log_q(logits: torch.Tensor, settings: DecodeSettings) -> torch.Tensor:
    """log q(·) as the search scores it: the draft's own when greedy; when sampling, at the run's temperature within
    its top-p nucleus (-inf outside it).  [V] -> [V]"""
    if settings.greedy:
        return torch.log_softmax(logits.float(), dim=-1)
    return torch.log(acc.sampling_probs(logits[None], settings.temperature, settings.top_p)[0])


def _extend(beam: Beam, token: int, log_q: float, logits: torch.Tensor, recorder, pair) -> Beam:
    """`beam` followed by `token`, with the token's draft-only record (its entropy and top candidates).  logits: [1, V]"""
    position = len(beam.tokens)
    record = recorder.single_record(position, position, token, logits, "draft")
    return Beam(beam.tokens + [token], beam.score + log_q, beam.records + [record], token in pair.eos_ids)
