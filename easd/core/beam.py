"""Beam search on the draft model: one of the paper's draft-model baselines (N beams, scored by summed log-probability).

It is not a decoding method of the loop (easd.core.decoding): its N beams are N rows of ONE generation, copied
and dropped as the search goes, so it runs on its own, on the draft's caches (easd.core.seam), and returns a
draft-only trace of the best beam. One step:
  1. ONE draft pass over every unfinished beam: log q(· | beam) for each.
  2. Every (beam, token) among each beam's N most likely tokens, and every finished beam as it is, ranked by
     summed log-probability; the best N are the new beams (a beam that chose EOS is finished).
  3. The caches follow: a beam kept once keeps its row, one kept more than once gets copies of it.
It stops when no unfinished beam can still beat the best finished one (scores only fall as a beam grows), when
every beam has finished, or at max_new_tokens or the context. With N = 1 it is greedy draft-only, token for token.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import torch

from ..errors import SettingsError
from .decoding import Recorder, encode_prompt
from .pair import ModelPair
from .settings import DecodeSettings
from .trace import RunStats, TokenRecord, Trace, software_versions

MAX_BEAMS = 64  # each beam is a row of the draft's caches: more only multiplies the cost


@dataclass
class Beam:
    tokens: list[int]  # generated so far
    score: float = 0.0  # summed log-probability of `tokens` under the draft (temperature 1)
    records: list[TokenRecord] = field(default_factory=list)
    done: bool = False  # ended with EOS


def check_beams(beams: int, settings: DecodeSettings) -> None:
    """SettingsError (named --beams) unless `beams` fits `settings`: a whole number of beams, on the draft, greedily."""
    if isinstance(beams, bool) or not isinstance(beams, int) or not 1 <= beams <= MAX_BEAMS:
        raise SettingsError("beams", f"must be a whole number from 1 to {MAX_BEAMS} (got {beams!r})")
    if beams > 1 and settings.method != "draft":
        raise SettingsError("beams", f"searches with the draft model: use it with method draft (got {settings.method})")
    if beams > 1 and not settings.greedy:
        raise SettingsError("beams", "ranks beams by their probability, with no sampling: set temperature 0")


def beam_search(pair: ModelPair, prompt: str, settings: DecodeSettings, beams: int, chat: bool = True) -> Trace:
    """The draft's most likely continuation that `beams` beams find; a draft-only trace (info["beams"], info["beam_score"])."""
    check_beams(beams, settings.validate())
    started = time.perf_counter()
    prompt_ids = encode_prompt(pair, prompt, chat)
    limit = min(settings.max_new_tokens, pair.context_length - len(prompt_ids))
    recorder = Recorder(pair, dataclasses.replace(settings, method="draft"))
    caches, room = pair.draft.caches(pair.vocab_size), len(prompt_ids) + limit + 1
    caches.add_row(prompt_ids[:-1], room)
    live, finished, steps, draft_seconds = [Beam([])], [], 0, 0.0
    while live and len(live[0].tokens) < limit and not _settled(live, finished):
        sequences = {row: prompt_ids + beam.tokens for row, beam in enumerate(live)}
        passed = time.perf_counter()
        out = caches.logits(sequences, dict.fromkeys(sequences, 1))  # {row: [1, V]}
        draft_seconds += time.perf_counter() - passed
        steps += 1
        chosen = _best(live, finished, out, beams)
        finished = [beam for _, beam, _ in chosen if beam.done]
        extended = [(row, _extend(beam, token, out[row], recorder, pair)) for row, beam, token in chosen if token is not None]
        live = [beam for _, beam in extended if not beam.done]
        finished += [beam for _, beam in extended if beam.done]
        _follow(caches, [row for row, beam in extended if not beam.done], live, prompt_ids, room)
    best = max(live + finished, key=lambda beam: beam.score)
    return _trace(pair, prompt, settings, beams, best, len(prompt_ids), steps, time.perf_counter() - started, draft_seconds)


def _settled(live: list[Beam], finished: list[Beam]) -> bool:
    """No unfinished beam can still beat the best finished one: a longer beam's score only falls."""
    return bool(finished) and max(b.score for b in finished) >= max(b.score for b in live)


def _best(live: list[Beam], finished: list[Beam], out: dict, beams: int) -> list[tuple[int, Beam, int | None]]:
    """The `beams` best of every live beam's `beams` most likely next tokens and every finished beam (token None)."""
    candidates = [(beam.score, -1, beam, None) for beam in finished]
    for row, beam in enumerate(live):
        log_q = torch.log_softmax(out[row][0].float(), dim=-1)  # [V]
        values, tokens = log_q.topk(beams)
        candidates += [(beam.score + value, row, beam, token) for value, token in zip(values.tolist(), tokens.tolist())]
    candidates.sort(key=lambda c: c[0], reverse=True)  # stable: among equal scores, the earlier beam and token first
    return [(row, beam, token) for _, row, beam, token in candidates[:beams]]


def _extend(beam: Beam, token: int, logits: torch.Tensor, recorder: Recorder, pair: ModelPair) -> Beam:
    """`beam` followed by `token`, with the token's draft-only record (its entropy and top candidates).  logits: [1, V]"""
    position = len(beam.tokens)
    record = recorder.single_record(position, position, token, logits)
    score = beam.score + float(torch.log_softmax(logits[0].float(), dim=-1)[token])
    return Beam(beam.tokens + [token], score, beam.records + [record], token in pair.eos_ids)


def _follow(caches, parents: list[int], live: list[Beam], prompt_ids: list[int], room: int) -> None:
    """Make row i of the caches hold live[i]'s context, from the rows of its parents (`parents[i]`, in the old order):
    a parent kept once keeps its row, one kept again gets a copy of it. `live` is reordered to match the rows."""
    kept = list(dict.fromkeys(parents))  # first uses, in order
    copies = [(i, parent) for i, parent in enumerate(parents) if parents.index(parent) != i]
    states = {parent: caches.save_row(parent) for _, parent in copies}
    caches.keep_rows(kept)
    for i, parent in copies:
        context = prompt_ids + live[i].tokens[:-1]  # what the parent's row holds: the newest token is computed next pass
        caches.add_row(context, room, start=states[parent])
    order = [parents.index(parent) for parent in kept] + [i for i, _ in copies]  # the beam each row now holds
    live[:] = [live[i] for i in order]


def _trace(
    pair: ModelPair,
    prompt: str,
    settings: DecodeSettings,
    beams: int,
    best: Beam,
    prompt_tokens: int,
    steps: int,
    seconds: float,
    draft_seconds: float,
) -> Trace:
    trace = Trace(
        dataclasses.replace(settings, method="draft"),
        pair.draft_name,
        pair.target_name,
        records=best.records,
        prompt=prompt,
        info={**pair.info, **software_versions(), "beams": beams, "beam_score": best.score},
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
