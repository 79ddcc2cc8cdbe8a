"""The decoding invariants listed in docs/testing.md, "What the suite covers", on the tiny random pair (float32)."""

import dataclasses
import threading
from collections import Counter

import pytest
from bounds import pair_rounding, same_entropies
from conftest import PROMPTS

from easd.errors import SettingsError
from easd.method.acceptance import rule_fires
from easd.method.generation import Generation
from easd.method.settings import DecodeSettings
from easd.method.summary import summarize

SAMPLING = dict(temperature=1.0, top_p=0.95)


@pytest.fixture(scope="module")
def decoded():
    """This module's runs by backend and arguments: several invariants below read the same runs (SD and EASD at the
    same seeds, target-only beside every k), each decoded once. No test changes a trace it reads."""
    return {}


@pytest.fixture
def run(run, tiny_pair, decoded):
    """conftest's `run`, each run remembered in `decoded` (a test's own pair is decoded afresh)."""

    def remembered(prompt: str = PROMPTS[0], pair=None, **settings):
        if pair is not None:
            return run(prompt, pair=pair, **settings)
        key = (tiny_pair.backend, prompt, tuple(sorted(settings.items())))
        if key not in decoded:
            decoded[key] = run(prompt, **settings)
        return decoded[key]

    return remembered


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_sd_equals_greedy_target(run, prompt, k):
    target = run(prompt, method="target", max_new_tokens=40)
    sd = run(prompt, method="sd", k=k, max_new_tokens=40)
    assert sd.token_ids == target.token_ids
    assert summarize(sd)["draft_acceptance_rate"] < 1  # the draft was wrong sometimes: equality was earned


def test_the_rule_can_read_the_sampling_distributions_entropy(run, tiny_pair):
    """--entropy sampling: H of softmax(z / T), which is below temperature 1's wherever T < 1 (top-p 1 here, so that
    this holds for every token); SD's tokens do not depend on it, EASD's rule reads it and the trace holds it."""
    sampled = dict(temperature=0.6, top_p=1.0, max_new_tokens=40, seed=3)
    at_one, at_t = (run(method="sd", entropy=e, **sampled) for e in ("temperature-1", "sampling"))
    assert at_one.token_ids == at_t.token_ids
    for a, b in zip(at_one.records, at_t.records):
        assert b.h_target < a.h_target
        assert (a.h_draft is None) == (b.h_draft is None) and (a.h_draft is None or b.h_draft < a.h_draft)
    easd = run(method="easd", entropy="sampling", tau_h=0.5 * max(r.h_target for r in at_t.records), **sampled)
    examined = [r for r in easd.records if r.h_draft is not None]
    assert any(r.triggered for r in examined) and not all(r.triggered for r in examined)  # the test can tell
    for r in examined:  # the rule fired on the recorded (sampling) entropies, as the what-if reads them
        assert r.triggered == rule_fires(
            h_draft=r.h_draft,
            h_target=r.h_target,
            overlap=round(r.overlap * 5),
            rule="full",
            tau_h=easd.settings.tau_h,
            tau_o=0.8,
            top_n=5,
        )
    target = run(method="target", entropy="sampling", **sampled)  # a model alone records the same H
    delta = pair_rounding(tiny_pair) / sampled["temperature"]  # z / T moves by δ / T
    assert same_entropies([target.records[0].h_target], [at_t.records[0].h_target], delta)
    with pytest.raises(SettingsError, match="temperature above 0"):
        DecodeSettings(entropy="sampling", temperature=0).validate()


def test_draft_alone_differs_from_target(run):
    assert run(method="draft", max_new_tokens=40).token_ids != run(method="target", max_new_tokens=40).token_ids


@pytest.mark.parametrize("sampling", [{}, SAMPLING])
def test_easd_that_never_fires_equals_sd(run, sampling):
    for seed in range(3):
        sd = run(method="sd", seed=seed, max_new_tokens=40, **sampling)
        easd = run(method="easd", tau_h=1e9, seed=seed, max_new_tokens=40, **sampling)
        assert easd.token_ids == sd.token_ids
        assert [r.origin for r in easd.records] == [r.origin for r in sd.records]


@pytest.mark.parametrize("sampling", [{}, SAMPLING])
def test_sd_and_easd_agree_up_to_the_first_penalty(run, sampling):
    forks = 0
    for seed in range(4):
        sd = run(method="sd", seed=seed, max_new_tokens=48, **sampling)
        easd = run(method="easd", seed=seed, max_new_tokens=48, **sampling)
        first = summarize(easd)["first_penalty_position"]
        if first is None:
            assert easd.token_ids == sd.token_ids
            continue
        forks += 1
        assert easd.token_ids[:first] == sd.token_ids[:first]
        assert first_difference(easd.token_ids, sd.token_ids) == first
        # SD kept that very draft, and recorded that the rule fired there
        assert sd.records[first].origin == "draft_accepted" and sd.records[first].triggered
    assert forks >= 2  # penalties happen in these runs, so the test can fail


@pytest.mark.parametrize("sampling", [{}, SAMPLING])
def test_penalized_position_never_emits_its_draft_token(run, sampling):
    penalties = [
        r
        for seed in range(4)
        for r in run(method="easd", seed=seed, max_new_tokens=48, **sampling).records
        if r.origin == "easd_penalty"
    ]
    assert len(penalties) >= 3
    for record in penalties:
        assert record.token_id != record.draft_token_id
        assert record.triggered and record.accept_prob > 0


def test_greedy_penalty_emits_best_other_target_token(run):
    penalties = [r for r in run(method="easd", max_new_tokens=64).records if r.origin == "easd_penalty"]
    assert penalties
    for record in penalties:
        best_other = next(token for token, _, _ in record.target_top if token != record.draft_token_id)
        assert record.token_id == best_other


@pytest.mark.parametrize(
    "method, sampling", [("sd", {}), ("easd", {}), ("sd", SAMPLING), ("easd", SAMPLING), ("target", SAMPLING)]
)
def test_cached_loop_equals_recomputation_from_scratch(run, tiny_pair, method, sampling):
    cached = run(method=method, seed=3, max_new_tokens=40, **sampling)
    scratch = run(method=method, seed=3, max_new_tokens=40, use_cache=False, **sampling)
    assert cached.token_ids == scratch.token_ids
    assert [a.origin for a in cached.records] == [b.origin for b in scratch.records]
    entropies = [[r.h_target for r in trace.records] for trace in (cached, scratch)]
    assert same_entropies(*entropies, pair_rounding(tiny_pair))  # float32 sums grouped otherwise (tests/bounds.py)


def test_every_origin_occurs_in_ordinary_runs(run):
    origins = Counter(r.origin for seed in range(3) for r in run(method="easd", seed=seed, max_new_tokens=48, **SAMPLING).records)
    assert {"draft_accepted", "target_resample", "easd_penalty", "bonus"} <= set(origins)


def test_trace_fields_exist_exactly_where_they_should(run):
    for record in run(method="easd", max_new_tokens=48).records:
        assert record.h_target is not None and len(record.target_top) == 5
        if record.origin == "bonus":
            assert record.draft_token_id is None and record.h_draft is None and record.triggered is None and not record.draft_top
        else:
            assert record.draft_token_id is not None and 0 <= record.overlap <= 1 and len(record.draft_top) == 5
            assert (record.origin == "draft_accepted") == (record.token_id == record.draft_token_id)
    for record in run(method="target", max_new_tokens=8).records:
        assert record.origin == "target" and record.draft_token_id is None and record.h_draft is None and record.h_target > 0


def test_max_new_tokens_is_exact_even_mid_block(run):
    for max_new in (1, 2, 7):
        trace = run(method="sd", k=4, max_new_tokens=max_new)
        assert len(trace.records) == max_new and trace.stats.stop_reason == "max_new_tokens"
        assert [r.position for r in trace.records] == list(range(max_new))


def test_one_target_call_per_block(run):
    trace = run(method="sd", k=4, max_new_tokens=40)
    assert trace.stats.target_calls == len({r.block for r in trace.records})


def test_stops_at_eos(tiny_pair, run):
    tokens = run(method="sd", max_new_tokens=30).token_ids
    pretend_eos = tokens[10]
    trace = run(method="sd", max_new_tokens=30, pair=dataclasses.replace(tiny_pair, eos_ids=frozenset({pretend_eos})))
    assert trace.token_ids == tokens[: tokens.index(pretend_eos) + 1]
    assert trace.stats.stop_reason == "eos"


def test_leaving_the_stream_keeps_what_was_emitted(tiny_pair):
    generation = Generation(tiny_pair, PROMPTS[0], DecodeSettings(method="sd", max_new_tokens=100))
    seen = []
    for block in generation:
        seen.extend(block.records)
        if len(seen) >= 5:
            break
    assert generation.trace.records == seen and generation.trace.stats.stop_reason == "stopped"


def test_stop_from_another_thread(tiny_pair):
    generation = Generation(tiny_pair, PROMPTS[0], DecodeSettings(method="easd", max_new_tokens=400))
    blocks = iter(generation)
    next(blocks)
    threading.Thread(target=generation.stop).start()
    rest = list(blocks)
    assert generation.trace.stats.stop_reason == "stopped" and len(generation.trace.records) < 400
    assert len(rest) <= 1


def test_prompt_longer_than_the_context_is_refused(tiny_pair):
    with pytest.raises(SettingsError, match="--prompt.*context is 512 tokens"):
        Generation(tiny_pair, "apples " * 600, DecodeSettings())


def test_generation_stops_at_the_context_limit(tiny_pair):
    trace = Generation(tiny_pair, "apples " * 250, DecodeSettings(method="sd", max_new_tokens=500), chat=False).run()
    assert trace.stats.prompt_tokens + len(trace.records) == 512 and trace.stats.stop_reason == "context"


def test_empty_prompt_is_refused(tiny_pair):
    with pytest.raises(SettingsError, match="--prompt"):
        Generation(tiny_pair, "   \n", DecodeSettings())


def test_chat_template_is_used_unless_raw(tiny_pair):
    chat = Generation(tiny_pair, "hi", DecodeSettings())
    raw = Generation(tiny_pair, "hi", DecodeSettings(), chat=False)
    shown = lambda ids: "".join(tiny_pair.tokenizer.text(i) for i in ids)  # noqa: E731 (special tokens included)
    assert shown(chat.prompt_ids).startswith("<|im_start|>user\nhi<|im_end|>")
    assert tiny_pair.tokenizer.decode(chat.prompt_ids).startswith("user\nhi")  # decode leaves special tokens out
    assert shown(raw.prompt_ids) == "hi"


LONG_PROMPT = "apples and pears " * 50  # about 350 tokens: a prompt computed in two passes of PREFILL_CHUNK


def test_a_long_prompt_computed_in_pieces_decodes_as_in_one_pass(tiny_pair, monkeypatch):
    from easd.method import rows

    settings = DecodeSettings(method="sd", max_new_tokens=24)
    pieces = Generation(tiny_pair, LONG_PROMPT, settings, chat=False)
    assert pieces.prompt_length > rows.PREFILL_CHUNK
    in_pieces = pieces.run()
    monkeypatch.setattr(rows, "PREFILL_CHUNK", 10_000)
    whole = Generation(tiny_pair, LONG_PROMPT, settings, chat=False).run()
    assert in_pieces.token_ids == whole.token_ids
    entropies = [[r.h_target for r in trace.records] for trace in (in_pieces, whole)]
    assert same_entropies(*entropies, pair_rounding(tiny_pair))


def test_stop_during_a_long_prompt_is_heard_before_the_row_takes_a_step(tiny_pair, monkeypatch):
    """On the embedded pair a 2,375-token prompt took 75 s in one pass, and Stop waited for it all."""
    from easd.method import rows, step

    monkeypatch.setattr(rows, "PREFILL_CHUNK", 1)  # a pass per prompt token: the prompt takes a while even here
    generation = Generation(tiny_pair, LONG_PROMPT, DecodeSettings(method="sd", max_new_tokens=24), chat=False)
    stopper = []

    def stop_soon(batch):  # once, as the row joins: Stop lands while its prompt is being computed
        if not stopper:
            stopper.append(threading.Timer(0.05, generation.stop))
            stopper[0].start()

    blocks = list(step.Batch(tiny_pair, [generation], at_boundary=stop_soon))
    assert blocks == [] and generation.trace.records == [] and generation.trace.stats.stop_reason == "stopped"


def test_a_long_prompt_is_computed_between_the_other_rows_steps(tiny_pair, monkeypatch):
    """In the app's shared batch a long prompt no longer pauses everyone: the others step between its pieces."""
    from easd.method import rows, step

    monkeypatch.setattr(rows, "PREFILL_CHUNK", 16)  # about 22 pieces for this prompt
    settings = DecodeSettings(method="sd", max_new_tokens=200)
    running = Generation(tiny_pair, "def add(a, b):", settings)
    joining = Generation(tiny_pair, LONG_PROMPT, replace_max(settings, 24), chat=False)
    batch = step.Batch(tiny_pair, [running], prompts_between_steps=True)
    while_joining, asked = [], False  # the running row's blocks while the joining row's prompt was being computed
    for block in batch:
        if len(running.trace.records) >= 8 and not asked:
            batch.add(joining)  # it joins at the next boundary, with a prompt of about 350 tokens
            asked = True
        if batch.rows.prompts and block.generation is running:
            while_joining.append(block)
    assert len(while_joining) >= 10  # the running row went on while the long prompt was computed
    assert joining.trace.token_ids == Generation(tiny_pair, LONG_PROMPT, replace_max(settings, 24), chat=False).run().token_ids


def replace_max(settings: DecodeSettings, n: int) -> DecodeSettings:
    return dataclasses.replace(settings, max_new_tokens=n)
