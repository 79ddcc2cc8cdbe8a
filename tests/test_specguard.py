"""SpecGuard (easd/method/methods/specguard.py): a kept step is the draft's, a recomputed step is the target's, and each
decision is what its scores, recomputed here by fresh passes of the models, say."""

import math

import pytest
import torch
from conftest import PROMPTS

from easd.cli import main
from easd.errors import SettingsError
from easd.method import acceptance as acc
from easd.method.generation import Generation
from easd.method.methods import METHODS, make_settings
from easd.method.methods.specguard import SpecGuardRecord, confidence, consistency, rollout_grounding, score
from easd.method.prompts import encode_prompt
from easd.render.lanes import lane_title

SPECGUARD = dict(method="specguard", max_new_tokens=48, specguard_delimiter=" ", specguard_weight=0.5)


def test_consistency_and_score():
    assert consistency([[1, 2, 3]]) == [1.0]
    same, other = [1, 2, 3], [7, 8, 9]
    assert consistency([same, same, other]) == [0.5, 0.5, 0.0]  # each like one of the two others
    assert score(None, 0.3, 0.5) == 0.3 and score(0.9, 0.3, 0.5) == pytest.approx(0.6)


def test_confidence_is_the_least_likely_tokens_min_max_normalised_log_probability():
    """By hand: log-probabilities (−1, −2, −5) at one position and (−0.5, −3, −4) at the next; the step's tokens are
    the 2nd and the 1st. Normalised: (−2 − (−5)) / (−1 − (−5)) = 0.75 and 1; the least is 0.75. A mean of the two
    positions' probabilities (the earlier reading) would be far higher."""
    log_p = torch.log(torch.tensor([[1.0, 1 / math.e, math.exp(-4)], [1.0, math.exp(-2.5), math.exp(-3.5)]]))
    logits = log_p + 7.0  # logits: any shift gives the same distribution
    assert confidence(logits, [1, 0]) == pytest.approx(0.75, abs=1e-6)
    assert confidence(logits, [0, 0]) == pytest.approx(1.0) and confidence(logits, [2, 0]) == pytest.approx(0.0, abs=1e-6)


def test_grounding_is_attention_rollout_by_hand():
    """A context of 3 tokens (the first a sink) and a step of 2, one layer then a second. By hand, layer 1: token 3
    attends [0.5 sink, 0.3, 0.196, 0.004] (the sink dropped, the 0.004 is 0.008 of the rest and pruned: all in the
    context), so after the residual its share is 0.5; token 4 attends [0.4, 0.1, 0.1, 0.2, 0.2] -> without the sink
    [1/6, 1/6, 1/3, 1/3]: context 1/3 + step (1/3 · 0 own share of token 3 so far, 1/3 · its own 0) -> 0.5 · 1/3.
    Layer 2 (the same weights): token 3: 0.5 · 1 + 0.5 · 0.5 = 0.75; token 4: 0.5 · (1/3 + 1/3 · 0.5 + 1/3 · 1/6)
    + 0.5 · 1/6. The step's grounding is its least grounded token's."""
    layer = torch.tensor(
        [[0.5, 0.3, 0.196, 0.004, 0.0], [0.4, 0.1, 0.1, 0.2, 0.2]], dtype=torch.float64
    )  # rows: the step's 2 tokens; keys: all 5
    first = 0.5 * (1 / 3)
    second = 0.5 * (1 / 3 + 1 / 3 * 0.5 + 1 / 3 * first) + 0.5 * first
    assert rollout_grounding(layer[None], 3) == pytest.approx(first)
    assert rollout_grounding(torch.stack([layer, layer]), 3) == pytest.approx(min(0.75, second))


def _steps(trace):
    """The run's steps in order: (its origin, its records)."""
    steps: dict[int, list] = {}
    for record in trace.records:
        assert isinstance(record.own, SpecGuardRecord)
        steps.setdefault(record.own.specguard_step, []).append(record)
    return [(records[0].origin, records) for records in steps.values()]


def _full_rollout(model, tokens: list[int], start: int) -> float:
    """The rollout as its paper defines it, on whole matrices from one eager pass over the whole text: each of the last
    3 layers' attention (heads averaged), the sink column dropped, weights under 0.01 pruned, rows renormalised, then
    0.5 A + 0.5 I; their product, top layer first; each step token's mass on the context; the least of them."""
    kind = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            layers = model(torch.tensor([tokens]), output_attentions=True).attentions[-3:]
    finally:
        model.set_attn_implementation(kind)
    rollout = torch.eye(len(tokens), dtype=torch.float64)
    for attention in layers:
        a = attention[0].double().mean(0)
        a[1:, 0] = 0.0  # the sink left out (the sink's own row attends only to itself)
        a = a / a.sum(-1, keepdim=True)
        a = a.masked_fill(a < 0.01, 0.0)
        a = a / a.sum(-1, keepdim=True)
        rollout = (0.5 * a + 0.5 * torch.eye(len(tokens), dtype=torch.float64)) @ rollout
    return float(rollout[start:, :start].sum(-1).min())


@pytest.mark.parametrize(("scorer", "threshold"), [("draft", 0.75), ("draft", 0.85), ("target", 0.87)])
def test_each_decision_is_what_its_scores_recomputed_say(hf_tiny_pair, scorer, threshold):
    """For every step: its confidence (the scorer's least likely token, min-max normalised) and its grounding (attention
    rollout over the scorer's last 3 layers) recomputed by one fresh pass over the whole text, the rollout on whole
    matrices; the score against the threshold says kept or recomputed; a kept step's tokens are the draft's, a
    recomputed step's the target's own greedy choices. Each setting splits this run's steps, so the test can fail
    either way."""
    pair = hf_tiny_pair
    settings = make_settings(**SPECGUARD, specguard_threshold=threshold, specguard_scorer=scorer)
    trace = Generation(pair, PROMPTS[0], settings).run()
    assert METHODS["specguard"].own(trace.settings).grounding == "attention"  # "auto" on transformers
    model = (pair.draft if scorer == "draft" else pair.target).module
    tokens = encode_prompt(pair, PROMPTS[0], chat=True) + trace.token_ids
    prompt = len(tokens) - len(trace.records)
    steps = _steps(trace)
    assert {origin for origin, _ in steps} == {"specguard_kept", "specguard_target"}
    for origin, records in steps:
        found, start = records[0].own, prompt + records[0].position
        assert found.specguard_score == pytest.approx(score(found.specguard_grounding_score, found.specguard_confidence, 0.5))
        assert (origin == "specguard_kept") == (found.specguard_score >= threshold)
        if origin == "specguard_kept":  # the scorer's probabilities and attention over the step, recomputed
            step = [r.token_id for r in records]
            with torch.no_grad():
                logits = model(torch.tensor([tokens[: start + len(step)]])).logits[0, start - 1 : -1, : pair.vocab_size]
            log_p = torch.log_softmax(logits.float(), dim=-1)
            picked = log_p.gather(-1, torch.tensor(step)[:, None]).squeeze(-1)
            normalised = (picked - log_p.min(-1).values) / (log_p.max(-1).values - log_p.min(-1).values)
            assert found.specguard_confidence == pytest.approx(float(normalised.min()), abs=1e-5)
            grounding = _full_rollout(model, tokens[: start + len(step)], start)
            assert found.specguard_grounding_score == pytest.approx(grounding, abs=1e-5)
        else:  # the target's greedy tokens, each its argmax after the prefix
            for record in records:
                at = prompt + record.position
                with torch.no_grad():
                    logits = pair.target.module(torch.tensor([tokens[:at]])).logits[0, -1, : pair.vocab_size]
                assert record.token_id == int(logits.argmax())
    if scorer == "draft":
        assert trace.stats.target_calls == sum(len(r) for o, r in steps if o == "specguard_target")  # kept steps: none
    else:  # one pass scores each step, and a refused step's first token comes from it
        assert trace.stats.target_calls == len(steps) + sum(len(r) - 1 for o, r in steps if o == "specguard_target")
    assert trace.stats.scoring_calls == len(steps)  # the attention pass, outside the batch, counted


def test_thresholds_at_the_ends_keep_every_step_or_none(hf_tiny_pair):
    kept = Generation(hf_tiny_pair, PROMPTS[1], make_settings(**SPECGUARD, specguard_threshold=0.0)).run()
    assert {origin for origin, _ in _steps(kept)} == {"specguard_kept"} and kept.stats.target_calls == 0
    rewritten = Generation(hf_tiny_pair, PROMPTS[1], make_settings(**SPECGUARD, specguard_threshold=1.0)).run()
    assert {origin for origin, _ in _steps(rewritten)} == {"specguard_target"}
    assert rewritten.stats.target_calls == len(rewritten.records)  # a token a target pass


def test_without_attention_weights_it_runs_on_confidence_by_default_and_says_so(tiny_pair):
    """grounding "auto" (the default): attention where the runtime has it, confidence alone on llama.cpp, the trace's
    settings, its records and the lane's title saying which; "attention" asked for there is refused, naming it."""
    if tiny_pair.draft.has_attention:
        pytest.skip("transformers has attention weights: the other backend of this parametrization is the one tested")
    trace = Generation(tiny_pair, PROMPTS[0], make_settings(**SPECGUARD)).run()
    assert METHODS["specguard"].own(trace.settings).grounding == "none"
    assert all(r.own.specguard_grounding_score is None for r in trace.records) and trace.stats.scoring_calls == 0
    assert lane_title("left", trace) == "SpecGuard, confidence only"
    with pytest.raises(SettingsError) as caught:
        Generation(tiny_pair, PROMPTS[0], make_settings(**SPECGUARD, specguard_grounding="attention"))
    assert caught.value.setting == "specguard_grounding" and "transformers" in caught.value.message


def test_the_command_line_runs_it_on_llama_cpp_and_names_the_flag_where_attention_is_asked(capsys):
    command = ["generate", "--pair", "tiny-random", "--backend", "llama.cpp", "--method", "specguard", "--prompt", "x"]
    assert main([*command, "--max-new-tokens", "8"]) == 0  # a newcomer's first try runs
    assert main([*command, "--specguard-grounding", "attention"]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the lines naming the pair it loaded
    assert last.startswith("error: --specguard-grounding: attention needs the draft's attention weights")


def test_candidates_honour_their_nucleus(hf_tiny_pair):
    """Every token of every candidate step lies within the draft's top-p nucleus at SpecGuard's temperature (a nucleus
    small enough to exclude much), recomputed by fresh passes; at temperature 0 one greedy candidate is drafted."""
    pair = hf_tiny_pair
    settings = make_settings(**SPECGUARD, specguard_top_p=0.3, specguard_threshold=0.0, specguard_temperature=1.0)
    trace = Generation(pair, PROMPTS[1], settings).run()
    tokens = encode_prompt(pair, PROMPTS[1], chat=True) + trace.token_ids
    prompt = len(tokens) - len(trace.records)
    with torch.no_grad():
        logits = pair.draft.module(torch.tensor([tokens])).logits[0, prompt - 1 : -1, : pair.vocab_size]
    nucleus = acc.Sampling(1.0, 0.3).probs(logits)  # [tokens, V]
    assert all(float(nucleus[i, r.token_id]) > 0 for i, r in enumerate(trace.records))
    assert float((acc.Sampling(1.0).probs(logits) > 0).float().sum(-1).min()) > float((nucleus > 0).float().sum(-1).max())
    greedy = Generation(pair, PROMPTS[1], make_settings(**SPECGUARD, specguard_temperature=0)).run()
    assert all(len(r.own.specguard_drafts) == 1 for r in greedy.records)


def test_bench_runs_it_on_llama_cpp_by_confidence(capsys):
    """bench takes every method's own settings as generate does: on llama.cpp SpecGuard's rows run on confidence alone
    by default, and an explicit --specguard-grounding attention leaves them out, saying why."""
    command = ["bench", "--pair", "tiny-random", "--backend", "llama.cpp", "--methods", "specguard"]
    command += ["--prompts", "1", "--max-new-tokens", "8", "--repeats", "1"]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "llama.cpp SpecGuard (threshold=0.7) ÷ target-only" in out and "not run here" not in out
    assert main([*command, "--specguard-grounding", "attention"]) == 0
    out = capsys.readouterr().out
    assert "SpecGuard (threshold=0.7): not run here: --specguard-grounding: attention needs the draft's attention" in out
