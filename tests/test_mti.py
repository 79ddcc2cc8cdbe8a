"""MTI (method `mti`): guidance away from a negative prompt where the target is unsure, on both backends (tiny pair)."""

import pytest
from bounds import logit_rounding, probability_rounding
from conftest import PROMPTS

from easd.errors import SettingsError
from easd.method import acceptance as acc
from easd.method.generation import Generation
from easd.method.methods import make_settings, settings_values
from easd.method.methods.mti import guided_logits
from easd.method.prompts import encode_prompt
from easd.method.settings import DecodeSettings
from easd.method.step import Batch
from easd.method.summary import summarize
from easd.traces import files as trace_io

MTI = dict(method="mti", max_new_tokens=32)


def test_mti_above_every_entropy_is_target_only(run):
    target = run(method="target", max_new_tokens=32)
    mti = run(**MTI, mti_tau=1e9)
    assert mti.token_ids == target.token_ids
    assert summarize(mti)["interventions"] == 0 and mti.stats.target_calls == target.stats.target_calls


def test_mti_with_omega_one_is_target_only_though_it_guides_every_token(run):
    target = run(method="target", max_new_tokens=32)
    mti = run(**MTI, mti_tau=0.0, mti_omega=1.0)
    assert mti.token_ids == target.token_ids
    assert {r.origin for r in mti.records} == {"mti_guided"}  # every position took the extra pass, to no effect


def test_guidance_changes_tokens_and_costs_one_target_pass_per_guided_token(run):
    target = run(method="target", max_new_tokens=32)
    mti = run(**MTI, mti_tau=0.0, mti_omega=4.0)
    assert mti.token_ids != target.token_ids  # the guidance acts: the tests above could fail
    guided = summarize(mti)["interventions"]
    assert guided == len(mti.records)
    assert mti.stats.target_calls == target.stats.target_calls + guided - (len(target.records) - len(mti.records))


def test_only_positions_above_tau_are_guided(run):
    mti = run(**MTI, mti_tau=2.0)
    guided = [r.origin == "mti_guided" for r in mti.records]
    assert guided == [r.h_target > 2.0 for r in mti.records]
    assert any(guided) and not all(guided)  # τ splits this run, so the test can fail both ways
    assert all(len(r.own.guided_top) == 5 for r in mti.records if r.origin == "mti_guided")
    assert all(r.own is None for r in mti.records if r.origin == "target")


def full_recompute(pair, tokens: list[int]):
    """The target's logits after `tokens`, in one pass over fresh caches.  -> [1, V]"""
    caches = pair.target.caches(pair.vocab_size)
    caches.add_row([], len(tokens) + 1)
    return caches.logits({0: tokens}, {0: 1})[0]


def test_guided_logits_from_the_row_equal_a_full_recompute_with_the_negative_prompt(tiny_pair):
    settings = make_settings(**MTI, mti_tau=0.0)
    generation = Generation(tiny_pair, PROMPTS[1], settings)
    trace = generation.run()
    negative = tiny_pair.tokenizer.encode(settings_values(settings)["mti_negative"])
    omega = 1.5
    for record in trace.records[:12]:
        context = generation.prompt_ids + trace.token_ids[: record.position]
        conditional, unconditional = full_recompute(tiny_pair, context), full_recompute(tiny_pair, context + negative)
        guided = guided_logits(conditional, unconditional, omega)
        probs, ids = acc.raw_probs(guided).topk(5)
        assert [c[0] for c in record.own.guided_top] == ids[0].tolist()
        expected = probs[0].tolist()
        if tiny_pair.backend == "llama.cpp":  # exact kernels: a row's logits do not depend on the pass's shape
            assert [c[2] for c in record.own.guided_top] == expected
        else:  # float32: a cache's sums and a full recompute's are grouped differently (tests/bounds.py)
            delta = max(logit_rounding(conditional), logit_rounding(unconditional))
            moved = (abs(1 - omega) + omega) * 2 * delta  # the guided logits: two log-softmaxes, weighted
            assert [c[2] for c in record.own.guided_top] == pytest.approx(expected, rel=probability_rounding(moved))


def test_an_mti_row_in_a_batch_equals_its_solo_run(tiny_pair):
    settings = [
        make_settings(**MTI, mti_tau=1.0),
        DecodeSettings(method="sd", max_new_tokens=32),
        make_settings(**MTI, mti_tau=0.5, mti_omega=2.0),
        DecodeSettings(method="target", max_new_tokens=32),
    ]
    prompts = [PROMPTS[0], PROMPTS[0], PROMPTS[1], PROMPTS[2]]
    batched = Batch(tiny_pair, [Generation(tiny_pair, p, s) for p, s in zip(prompts, settings)]).run()
    for trace, prompt, each in zip(batched, prompts, settings):
        solo = Generation(tiny_pair, prompt, each).run()
        assert trace.token_ids == solo.token_ids
        assert [r.origin for r in trace.records] == [r.origin for r in solo.records]
    assert sum(summarize(t)["interventions"] for t in batched) > 0


def test_an_mti_run_round_trips_through_csv_and_json(hf_tiny_pair, tmp_path):
    settings = make_settings(**MTI, mti_tau=1.5, mti_omega=2.0, mti_negative="=WRONG ANSWER")
    runs = [Generation(hf_tiny_pair, PROMPTS[0], settings).run(), Generation(hf_tiny_pair, PROMPTS[0], DecodeSettings()).run()]
    for write, read, name in (
        (trace_io.write_csv, trace_io.read_csv, "t.csv"),
        (trace_io.write_json, trace_io.read_json, "t.json"),
    ):
        write(runs, tmp_path / name)
        back = read(tmp_path / name)
        assert back[0].settings == settings  # every setting is a column, MTI's own included
        assert back[0].records == runs[0].records
        assert back[1].records == runs[1].records  # the EASD run's guided columns are empty and read back as none
    assert "'=WRONG ANSWER" in (tmp_path / "t.csv").read_text()  # a spreadsheet shows it as text, never runs it


@pytest.mark.parametrize(
    "settings, setting",
    [
        (dict(mti_tau=-0.1), "mti_tau"),
        (dict(mti_omega=0.5), "mti_omega"),
        (dict(mti_omega=11.0), "mti_omega"),
        (dict(mti_negative="  "), "mti_negative"),
        (dict(mti_negative="x" * 1001), "mti_negative"),
    ],
)
def test_settings_out_of_range_name_themselves(settings, setting):
    with pytest.raises(SettingsError) as err:
        make_settings(method="mti", **settings).validate()
    assert err.value.setting == setting


def test_a_negative_prompt_that_leaves_no_room_in_the_context_is_refused(hf_tiny_pair):
    negative = " OUTPUT ERROR" * 20  # 260 tokens: the tiny tokenizer spells most words out
    room = hf_tiny_pair.context_length - len(hf_tiny_pair.tokenizer.encode(negative))
    prompt = "apples " * 400
    while len(encode_prompt(hf_tiny_pair, prompt, chat=True)) >= room:
        prompt = prompt[: int(len(prompt) * 0.9)]
    Generation(hf_tiny_pair, prompt, make_settings(**MTI, mti_negative=negative))  # fits: no error
    longer = prompt + "apples " * 20
    with pytest.raises(SettingsError) as err:
        Generation(hf_tiny_pair, longer, make_settings(**MTI, mti_negative=negative))
    assert err.value.setting == "mti_negative" and "no room left" in err.value.message
    Generation(hf_tiny_pair, longer, DecodeSettings(method="target"))  # the prompt alone fits: the negative prompt is why


def test_near_the_end_of_the_context_mti_keeps_room_for_its_negative_prompt(hf_tiny_pair):
    prompt = "apples " * 400
    while len(encode_prompt(hf_tiny_pair, prompt, chat=True)) > hf_tiny_pair.context_length - 40:
        prompt = prompt[: int(len(prompt) * 0.95)]
    trace = Generation(hf_tiny_pair, prompt, make_settings(method="mti", mti_tau=0.0, max_new_tokens=100)).run()
    negative = len(hf_tiny_pair.tokenizer.encode(settings_values(DecodeSettings())["mti_negative"]))
    assert trace.stats.stop_reason == "context"
    assert trace.stats.prompt_tokens + len(trace.records) + negative <= hf_tiny_pair.context_length
