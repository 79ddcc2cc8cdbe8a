"""Beam search on the draft model: one of the paper's draft-model baselines (N beams on the draft alone).

It is in the methods' table, but not a row of the batch (easd.method.step): its N beams are N rows of ONE
generation, copied and dropped as the search goes, so it decodes alone (`decode`), on the draft's caches
(easd.method.seam), and returns the best beam's trace (its tokens' origin: draft). Words: a beam's *score* is the sum of its tokens' log-probabilities; it is
*ranked* by score / length^α, α the length penalty (transformers' `length_penalty`: 1, its default, ranks by the mean
log-probability per token; 0 by the sum, where longer beams lose). One step:
  1. ONE draft pass over every unfinished beam: log q(· | beam) for each; when sampling (temperature > 0, as the
     paper's beam search at 0.7 and top-p 0.8), log of q at that temperature within the top-p nucleus.
  2. Candidates: greedy, each beam's N most likely next tokens; sampled, N (beam, token) pairs drawn without
     replacement from softmax(score + log q) over every beam and token (transformers' beam-search multinomial
     sampling). With every finished beam as it is, the N best ranked are the new beams (EOS finishes a beam).
  3. The caches follow: a beam kept once keeps its row, one kept more than once gets copies of it.
It stops when no unfinished beam ranks above the best finished one (exact with α = 0, where scores only fall as a
beam grows; a heuristic otherwise, like transformers' early_stopping=False), when every beam has finished, or at
max_new_tokens or the context. With N = 1, greedy and α = 0 it is greedy draft-only, token for token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from ...errors import EasdError
from .. import acceptance as acc
from ..judging import Recorder
from ..knobs import knob
from ..origins import DRAFT
from ..pair import ModelPair
from ..prompts import encode_prompt
from ..seam import follow
from ..settings import DecodeSettings
from ..trace import RunStats, TokenRecord, Trace, software_versions
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


@dataclass(frozen=True, kw_only=True)
class Searched(Method):
    """Beam search on the draft: decoded alone, not as a row of the batch (`decode`)."""

    in_batch: bool = False

    def decode(self, pair: ModelPair, prompt: str, settings: DecodeSettings, chat: bool = True, system: str = "") -> Trace:
        """The best continuation the search finds (see `beam_search`)."""
        return beam_search(pair, prompt, settings, chat, system)

    def judge(self, plan):
        raise EasdError("beam search decodes alone, not as a row of a batch: decode it with its method's decode()")

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
    name="beam", title="beam search", models="DM", origins=(DRAFT,), settings=BeamSettings, variant_form="beam:N or beam:N/α"
)


@dataclass
class Beam:
    tokens: list[int]  # generated so far
    score: float = 0.0  # summed log-probability of `tokens` under the draft (at the run's temperature, in its nucleus)
    records: list[TokenRecord] = field(default_factory=list)
    done: bool = False  # ended with EOS

    def rank(self, alpha: float) -> float:
        return self.score / max(len(self.tokens), 1) ** alpha


def beam_search(pair: ModelPair, prompt: str, settings: DecodeSettings, chat: bool = True, system: str = "") -> Trace:
    """The best continuation the search (BEAM's own settings in `settings`) finds on the draft; its trace's tokens are
    the draft's (info: beams, beam_length_penalty, beam_score, the best beam's rank)."""
    search = BEAM.own(settings.validate())
    generator = None if settings.greedy else torch.Generator(device=pair.device).manual_seed(settings.seed)
    started = time.perf_counter()
    prompt_ids = encode_prompt(pair, prompt, chat, system)
    limit = min(settings.max_new_tokens, pair.context_length - len(prompt_ids))
    recorder = Recorder(pair, settings)
    caches, room = pair.draft.caches(pair.vocab_size), len(prompt_ids) + limit + 1
    caches.add_row(prompt_ids[:-1], room)
    live, finished, steps, draft_seconds = [Beam([])], [], 0, 0.0
    while live and len(live[0].tokens) < limit and not _settled(live, finished, search.length_penalty):
        sequences = {row: prompt_ids + beam.tokens for row, beam in enumerate(live)}
        passed = time.perf_counter()
        out = caches.logits(sequences, dict.fromkeys(sequences, 1))  # {row: [1, V]}
        draft_seconds += time.perf_counter() - passed
        steps += 1
        chosen = _best(live, finished, out, search, settings, generator)
        finished = [beam for _, beam, _, _ in chosen if beam.done]
        extended = [
            (row, _extend(beam, token, value, out[row], recorder, pair))
            for row, beam, token, value in chosen
            if token is not None
        ]
        live = [beam for _, beam in extended if not beam.done]
        finished += [beam for _, beam in extended if beam.done]
        _follow(caches, [row for row, beam in extended if not beam.done], live, prompt_ids, room)
    best = max(live + finished, key=lambda beam: beam.rank(search.length_penalty))
    trace = _trace(pair, prompt, settings, search, best, len(prompt_ids), steps, time.perf_counter() - started, draft_seconds)
    trace.system = system
    return trace


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


def _extend(beam: Beam, token: int, log_q: float, logits: torch.Tensor, recorder: Recorder, pair: ModelPair) -> Beam:
    """`beam` followed by `token`, with the token's draft-only record (its entropy and top candidates).  logits: [1, V]"""
    position = len(beam.tokens)
    record = recorder.single_record(position, position, token, logits, "draft")
    return Beam(beam.tokens + [token], beam.score + log_q, beam.records + [record], token in pair.eos_ids)


def _follow(caches, parents: list[int], live: list[Beam], prompt_ids: list[int], room: int) -> None:
    """Make row i of the caches hold live[i]'s context, from the rows of its parents (`parents[i]`, in the old order);
    `live` is reordered to match the rows (easd.method.seam.follow)."""
    contexts = [prompt_ids + beam.tokens[:-1] for beam in live]  # a parent's row holds all but the newest token
    order = follow(caches, parents, contexts, room)
    live[:] = [live[i] for i in order]


def _trace(
    pair: ModelPair,
    prompt: str,
    settings: DecodeSettings,
    search: BeamSettings,
    best: Beam,
    prompt_tokens: int,
    steps: int,
    seconds: float,
    draft_seconds: float,
) -> Trace:
    trace = Trace(
        settings,
        pair.draft_name,
        pair.target_name,
        records=best.records,
        prompt=prompt,
        info={
            **pair.info,
            **software_versions(),
            "beams": search.width,
            "beam_length_penalty": search.length_penalty,
            "beam_score": best.score,
            "beam_rank": best.rank(search.length_penalty),
        },
    )
    trace.stats = RunStats(
        prompt_tokens=prompt_tokens,
        seconds=seconds,
        target_calls=0,
        draft_calls=steps,
        target_seconds=0.0,
        draft_seconds=draft_seconds,
        stop_reason="eos" if best.done else ("max_new_tokens" if len(best.tokens) >= settings.max_new_tokens else "context"),
    )
    return trace
