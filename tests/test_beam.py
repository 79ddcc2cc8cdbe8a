"""Beam search on the draft (the paper's draft-model baseline), on both backends (tiny pair)."""

from dataclasses import replace

import pytest
import torch
from bounds import pair_rounding, same_entropies
from conftest import PROMPTS

from easd.errors import SettingsError
from easd.method import acceptance as acc
from easd.method.generation import Generation
from easd.method.methods import make_settings, with_values
from easd.method.methods.beam import Beam, _settled
from easd.method.prompts import encode_prompt
from easd.method.settings import DecodeSettings

DRAFT = DecodeSettings(method="draft", max_new_tokens=24)


def beams(width: int, length_penalty: float = 1.0, base: DecodeSettings = DRAFT) -> DecodeSettings:
    """Beam search's settings: `width` beams ranked by log-probability / length^α, sampled as `base` says."""
    return with_values(base, method="beam", beam_width=width, beam_length_penalty=length_penalty)


def beam_search(pair, prompt: str, settings: DecodeSettings):
    """The best beam's trace: a generation of the batch whose beams are its rows."""
    return Generation(pair, prompt, settings).run()


def draft_logits(pair, prompt: str, tokens: list[int]) -> torch.Tensor:
    """The draft's logits for each of `tokens` from one pass over fresh caches: no beam's cache copy involved.  [n, V]"""
    context = encode_prompt(pair, prompt, chat=True)
    caches = pair.draft.caches(pair.vocab_size)
    caches.add_row([], len(context) + len(tokens) + 1)
    return caches.logits({0: context + tokens}, {0: len(tokens) + 1})[0][:-1]  # each predicts the next token


def summed_log_prob(pair, prompt: str, tokens: list[int]) -> float:
    """log q(tokens | prompt), the draft's own probabilities."""
    logits = draft_logits(pair, prompt, tokens)
    return float(torch.log_softmax(logits.double(), dim=-1)[torch.arange(len(tokens)), tokens].sum())


@pytest.mark.parametrize("prompt", PROMPTS)
def test_one_beam_is_greedy_draft_only(tiny_pair, prompt):
    greedy = Generation(tiny_pair, prompt, DRAFT).run()
    beam = beam_search(tiny_pair, prompt, beams(1))
    assert beam.token_ids == greedy.token_ids
    assert same_entropies([r.h_draft for r in beam.records], [r.h_draft for r in greedy.records], pair_rounding(tiny_pair))
    assert beam.stats.draft_calls == len(greedy.records) and beam.stats.target_calls == 0


def test_more_beams_find_a_likelier_text_whose_score_a_full_recompute_confirms(tiny_pair):
    greedy = beam_search(tiny_pair, PROMPTS[0], beams(1, 0))
    four = beam_search(tiny_pair, PROMPTS[0], beams(4, 0))
    assert four.token_ids != greedy.token_ids and four.info["beam_score"] > greedy.info["beam_score"]  # the search acts
    for trace in (greedy, four):  # the copied caches computed what a fresh pass computes
        assert trace.info["beam_score"] == pytest.approx(summed_log_prob(tiny_pair, PROMPTS[0], trace.token_ids), abs=1e-3)
    assert four.settings.method == "beam" and {r.origin for r in four.records} == {"draft"} and four.info["beams"] == 4


def test_a_length_penalty_ranks_by_the_mean_so_a_long_beam_can_still_beat_a_short_finished_one():
    short = Beam([1, 2], score=-2.0, done=True)  # mean -1 per token
    long = Beam([1, 2, 3, 4, 5, 6], score=-3.0)  # mean -0.5 per token, still growing
    assert _settled([long], [short], alpha=0)  # summed: -3 can only fall further below -2, so the search is over
    assert not _settled([long], [short], alpha=1)  # per token it ranks above the finished beam: go on
    assert long.rank(1) == -0.5 and short.rank(0) == -2.0


def test_sampled_beams_draw_from_the_nucleus_at_the_temperature_and_score_what_they_drew(tiny_pair):
    sampled = DecodeSettings(method="draft", max_new_tokens=16, temperature=0.7, top_p=0.8, seed=3)
    runs = [beam_search(tiny_pair, PROMPTS[0], beams(4, base=replace(sampled, seed=seed))) for seed in (3, 3, 4, 5, 6)]
    assert runs[0].token_ids == runs[1].token_ids  # a seed fixes the draw
    assert len({tuple(run.token_ids) for run in runs}) > 1  # other seeds draw again
    for trace in runs:
        tokens = trace.token_ids
        q = acc.sampling_probs(draft_logits(tiny_pair, PROMPTS[0], tokens), 0.7, 0.8)[torch.arange(len(tokens)), tokens]
        assert (q > 0).all()  # no token from outside the top-p nucleus
        assert trace.info["beam_score"] == pytest.approx(float(q.double().log().sum()), abs=1e-3)
        assert trace.info["beam_rank"] == pytest.approx(trace.info["beam_score"] / len(tokens))  # α = 1 by default
    greedy = beam_search(tiny_pair, PROMPTS[0], beams(4))
    assert runs[0].token_ids != greedy.token_ids  # sampling changed the search


@pytest.mark.parametrize(
    "values, flag, message",
    [
        ({"beam_width": 0}, "--beam-width", "an integer from 1 to 64"),
        ({"beam_width": 65}, "--beam-width", "an integer from 1 to 64"),
        ({"beam_length_penalty": -1.0}, "--beam-length-penalty", "a number from 0 to 10"),
        ({"beam_length_penalty": float("nan")}, "--beam-length-penalty", "a number from 0 to 10"),
    ],
)
def test_bad_beams_are_refused_naming_the_flag(hf_tiny_pair, values, flag, message):
    with pytest.raises(SettingsError) as err:
        beam_search(hf_tiny_pair, PROMPTS[0], make_settings(method="beam", **values))
    assert err.value.flag == flag and message in err.value.message
