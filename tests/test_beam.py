"""Beam search on the draft (the paper's draft-model baseline), on both backends (tiny pair)."""

import pytest
import torch
from conftest import PROMPTS

from easd.core.beam import beam_search
from easd.core.decoding import Generation, encode_prompt
from easd.core.settings import DecodeSettings
from easd.errors import SettingsError

DRAFT = DecodeSettings(method="draft", max_new_tokens=24)


def summed_log_prob(pair, prompt: str, tokens: list[int]) -> float:
    """log q(tokens | prompt) from one pass over fresh caches: no beam's cache copy involved."""
    context = encode_prompt(pair, prompt, chat=True)
    caches = pair.draft.caches(pair.vocab_size)
    caches.add_row([], len(context) + len(tokens) + 1)
    logits = caches.logits({0: context + tokens}, {0: len(tokens) + 1})[0][:-1]  # [n, V]: each predicts the next token
    return float(torch.log_softmax(logits.double(), dim=-1)[torch.arange(len(tokens)), tokens].sum())


@pytest.mark.parametrize("prompt", PROMPTS)
def test_one_beam_is_greedy_draft_only(tiny_pair, prompt):
    greedy = Generation(tiny_pair, prompt, DRAFT).run()
    beam = beam_search(tiny_pair, prompt, DRAFT, beams=1)
    assert beam.token_ids == greedy.token_ids
    assert [r.h_draft for r in beam.records] == pytest.approx([r.h_draft for r in greedy.records], abs=1e-5)
    assert beam.stats.draft_calls == len(greedy.records) and beam.stats.target_calls == 0


def test_more_beams_find_a_likelier_text_whose_score_a_full_recompute_confirms(tiny_pair):
    greedy = beam_search(tiny_pair, PROMPTS[0], DRAFT, beams=1)
    four = beam_search(tiny_pair, PROMPTS[0], DRAFT, beams=4)
    assert four.token_ids != greedy.token_ids and four.info["beam_score"] > greedy.info["beam_score"]  # the search acts
    for trace in (greedy, four):  # the copied caches computed what a fresh pass computes
        assert trace.info["beam_score"] == pytest.approx(summed_log_prob(tiny_pair, PROMPTS[0], trace.token_ids), abs=1e-3)
    assert four.settings.method == "draft" and {r.origin for r in four.records} == {"draft"} and four.info["beams"] == 4


@pytest.mark.parametrize(
    "settings, beams, message",
    [
        (DRAFT, 0, "from 1 to 64"),
        (DRAFT, 65, "from 1 to 64"),
        (DecodeSettings(method="sd"), 4, "use it with method draft"),
        (DecodeSettings(method="draft", temperature=0.7), 4, "set temperature 0"),
    ],
)
def test_bad_beams_are_refused_naming_the_flag(hf_tiny_pair, settings, beams, message):
    with pytest.raises(SettingsError) as err:
        beam_search(hf_tiny_pair, PROMPTS[0], settings, beams)
    assert err.value.flag == "--beams" and message in err.value.message
