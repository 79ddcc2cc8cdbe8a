"""SpecGuard (easd/method/methods/specguard.py): a kept step is the draft's, a recomputed step is the target's, and each
decision is what its scores, recomputed here by fresh passes of the models, say."""

import math

import pytest
import torch
from conftest import PROMPTS

from easd.cli import main
from easd.errors import SettingsError
from easd.method.generation import Generation
from easd.method.methods import make_settings
from easd.method.methods.specguard import SpecGuardRecord, consistency, score
from easd.method.prompts import encode_prompt
from easd.render.lanes import lane_title

SPECGUARD = dict(method="specguard", max_new_tokens=48, specguard_delimiter=" ", specguard_weight=0.5)


def test_consistency_and_score():
    assert consistency([[1, 2, 3]]) == [1.0]
    same, other = [1, 2, 3], [7, 8, 9]
    assert consistency([same, same, other]) == [0.5, 0.5, 0.0]  # each like one of the two others
    assert score(None, 0.3, 0.5) == 0.3 and score(0.9, 0.3, 0.5) == pytest.approx(0.6)


def _steps(trace):
    """The run's steps in order: (its origin, its records)."""
    steps: dict[int, list] = {}
    for record in trace.records:
        assert isinstance(record.own, SpecGuardRecord)
        steps.setdefault(record.own.specguard_step, []).append(record)
    return [(records[0].origin, records) for records in steps.values()]


@pytest.mark.parametrize("threshold", [0.65, 0.75])
def test_each_decision_is_what_its_scores_recomputed_say(hf_tiny_pair, threshold):
    """For every step: its confidence (the draft's geometric-mean probability of the chosen tokens) and grounding (the
    draft's attention share to the context) recomputed by fresh passes over the prefix; the score against the
    threshold says kept or recomputed; a kept step's tokens are the draft's, a recomputed step's the target's own
    greedy choices. Both thresholds split this run's steps, so the test can fail either way."""
    pair = hf_tiny_pair
    trace = Generation(pair, PROMPTS[0], make_settings(**SPECGUARD, specguard_threshold=threshold)).run()
    tokens = encode_prompt(pair, PROMPTS[0], chat=True) + trace.token_ids
    prompt = len(tokens) - len(trace.records)
    steps = _steps(trace)
    assert {origin for origin, _ in steps} == {"specguard_kept", "specguard_target"}
    for origin, records in steps:
        found, start = records[0].own, prompt + records[0].position
        assert found.specguard_score == pytest.approx(score(found.specguard_grounding_score, found.specguard_confidence, 0.5))
        assert (origin == "specguard_kept") == (found.specguard_score >= threshold)
        if origin == "specguard_kept":  # the draft's tokens: its own probabilities and attention, recomputed
            step = [r.token_id for r in records]
            with torch.no_grad():
                logits = pair.draft.module(torch.tensor([tokens[: start + len(step)]])).logits[0, start - 1 : -1].float()
            log_q = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(step)[:, None])
            assert found.specguard_confidence == pytest.approx(math.exp(float(log_q.mean())), rel=1e-4)
            grounding = pair.draft.attention_share(tokens[: start + len(step)], start)
            assert found.specguard_grounding_score == pytest.approx(grounding, rel=1e-4)
        else:  # the target's greedy tokens, each its argmax after the prefix
            for record in records:
                at = prompt + record.position
                with torch.no_grad():
                    logits = pair.target.module(torch.tensor([tokens[:at]])).logits[0, -1, : pair.vocab_size]
                assert record.token_id == int(logits.argmax())


def test_thresholds_at_the_ends_keep_every_step_or_none(hf_tiny_pair):
    kept = Generation(hf_tiny_pair, PROMPTS[1], make_settings(**SPECGUARD, specguard_threshold=0.0)).run()
    assert {origin for origin, _ in _steps(kept)} == {"specguard_kept"} and kept.stats.target_calls == 0
    rewritten = Generation(hf_tiny_pair, PROMPTS[1], make_settings(**SPECGUARD, specguard_threshold=1.0)).run()
    assert {origin for origin, _ in _steps(rewritten)} == {"specguard_target"}
    assert rewritten.stats.target_calls == len(rewritten.records)  # a token a target pass


def test_without_attention_weights_it_refuses_or_runs_on_confidence_under_a_label_that_says_so(tiny_pair):
    if tiny_pair.draft.has_attention:
        pytest.skip("transformers has attention weights: the other backend of this parametrization is the one tested")
    with pytest.raises(SettingsError) as caught:
        Generation(tiny_pair, PROMPTS[0], make_settings(**SPECGUARD))
    assert caught.value.setting == "specguard_grounding" and "transformers" in caught.value.message
    trace = Generation(tiny_pair, PROMPTS[0], make_settings(**SPECGUARD, specguard_grounding="none")).run()
    assert all(r.own.specguard_grounding_score is None for r in trace.records)
    assert lane_title("left", trace) == "SpecGuard, confidence only"


def test_the_command_line_names_the_flag_on_llama_cpp(capsys):
    command = ["generate", "--pair", "tiny-random", "--backend", "llama.cpp", "--method", "specguard", "--prompt", "x"]
    assert main(command) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the lines naming the pair it loaded
    assert last.startswith("error: --specguard-grounding: attention needs the draft's attention weights")


def test_the_attention_share_is_that_of_one_whole_pass(hf_tiny_pair):
    """The seam's attention_share (the context cached, then the step with its attention weights) against one eager pass
    over the whole text: the step's rows of every layer's and head's attention, the first key left out."""
    model = hf_tiny_pair.draft.module
    tokens = encode_prompt(hf_tiny_pair, PROMPTS[0], chat=True) + [5, 17, 33, 60]
    start = len(tokens) - 4
    kind = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            weights = model(torch.tensor([tokens]), output_attentions=True).attentions
    finally:
        model.set_attn_implementation(kind)
    rows = torch.stack([layer[0, :, start:, 1:] for layer in weights]).float()  # [layers, heads, step, keys but the first]
    expected = float((rows[..., : start - 1].sum(-1) / rows.sum(-1)).mean())
    assert hf_tiny_pair.draft.attention_share(tokens, start) == pytest.approx(expected, rel=1e-4)
    assert model.config._attn_implementation == kind  # the shared model is left as it was


def test_bench_runs_it_on_llama_cpp_by_confidence_where_told(capsys):
    """bench takes every method's own settings as generate does: on llama.cpp SpecGuard's row is left out, saying why,
    unless --specguard-grounding none, which every row then holds and the header says."""
    command = ["bench", "--pair", "tiny-random", "--backend", "llama.cpp", "--methods", "specguard"]
    command += ["--prompts", "1", "--max-new-tokens", "8", "--repeats", "1"]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "SpecGuard (threshold=0.7): not run here: --specguard-grounding: attention needs the draft's attention" in out
    assert main([*command, "--specguard-grounding", "none"]) == 0
    out = capsys.readouterr().out
    assert "methods' own settings, every row: specguard_grounding=none" in out and "not run here" not in out
    assert "llama.cpp SpecGuard (threshold=0.7) ÷ target-only" in out
