"""The batched engine: every row of a batch decodes exactly as if it ran alone (tiny random pair, float32)."""

import dataclasses
import itertools

import pytest
import torch
from bounds import pair_rounding, same_entropies
from conftest import PROMPTS

from easd.backends.transformers import COMPACT_SLACK
from easd.errors import SettingsError
from easd.method import acceptance as acc
from easd.method.generation import Generation
from easd.method.prompts import encode_prompt
from easd.method.settings import DecodeSettings
from easd.method.step import Batch
from easd.method.summary import summarize

LONG = "A small draft model proposes a few tokens, and the larger target model checks them all in one pass. " * 3
MIXED = [
    dict(method="sd", k=4),
    dict(method="easd", k=2, temperature=1.0, top_p=0.9, seed=5),
    dict(method="target", temperature=0.7, seed=1),
    dict(method="easd", rule="no_overlap", tau_h=0.8, k=6),
    dict(method="draft"),
    dict(method="sd", k=1, temperature=1.0, seed=9),
    dict(method="easd", rule="target_entropy_only", tau_h=1.2, k=3, temperature=0.9, seed=3),
    dict(method="easd", rule="no_draft_entropy", tau_o=0.6, k=5),
]


def rows(pair, count: int, max_new_tokens: int = 40) -> list[Generation]:
    prompts = itertools.cycle([*PROMPTS, LONG, "hi"])
    return [
        Generation(pair, next(prompts), DecodeSettings(max_new_tokens=max_new_tokens + 3 * i, **MIXED[i % len(MIXED)]))
        for i in range(count)
    ]


def solo(generation: Generation):
    return Generation(generation.pair, generation.prompt, generation.settings, chat=generation.chat).run()


def assert_same_run(batched, alone, delta: float):
    assert batched.token_ids == alone.token_ids
    assert [r.origin for r in batched.records] == [r.origin for r in alone.records]
    assert [r.block for r in batched.records] == [r.block for r in alone.records]
    for a, b in zip(batched.records, alone.records):
        assert a.triggered == b.triggered and a.draft_token_id == b.draft_token_id
    # float32 sums grouped otherwise in a batch: equal to the rounding tests/bounds.py derives
    assert same_entropies([r.h_target for r in batched.records], [r.h_target for r in alone.records], delta)
    assert (batched.stats.target_calls, batched.stats.draft_calls) == (alone.stats.target_calls, alone.stats.draft_calls)
    assert batched.stats.stop_reason == alone.stats.stop_reason


@pytest.mark.parametrize("count", [2, 3, 8])
def test_every_row_equals_its_solo_run(tiny_pair, count):
    generations = rows(tiny_pair, count)
    lengths = {len(g.prompt_ids) for g in generations}
    assert count < 3 or len(lengths) >= 3  # ragged prompts
    Batch(tiny_pair, generations).run()
    for generation in generations:
        assert_same_run(generation.trace, solo(generation), pair_rounding(generation.pair))


def test_rows_join_as_others_leave_and_mid_run(tiny_pair):
    generations = rows(tiny_pair, 8, max_new_tokens=24)
    batch = Batch(tiny_pair, generations[:6], max_rows=3)  # three wait for a free slot
    late = generations[6:]
    blocks_seen, joined = 0, False
    for _ in batch:
        blocks_seen += 1
        if blocks_seen == 10 and not joined:  # two more arrive while others have run a while
            for generation in late:
                batch.add(generation)
            joined = True
        assert len(batch.rows.generations) <= 3
    for generation in generations:
        assert_same_run(generation.trace, solo(generation), pair_rounding(generation.pair))


def test_a_row_stopped_midway_leaves_and_the_others_are_undisturbed(tiny_pair):
    generations = rows(tiny_pair, 4, max_new_tokens=40)
    stopped = generations[1]
    blocks_of_stopped = 0
    for block in Batch(tiny_pair, generations):
        if block.generation is stopped:
            blocks_of_stopped += 1
            if blocks_of_stopped == 3:
                stopped.stop()
    alone = solo(stopped)
    assert stopped.trace.stats.stop_reason == "stopped" and len(stopped.trace.records) < len(alone.records)
    assert stopped.trace.token_ids == alone.token_ids[: len(stopped.trace.records)]
    for generation in generations:
        if generation is not stopped:
            assert_same_run(generation.trace, solo(generation), pair_rounding(generation.pair))


def test_stopping_the_batch_keeps_what_every_row_emitted(tiny_pair):
    generations = rows(tiny_pair, 3, max_new_tokens=100)
    batch = Batch(tiny_pair, generations)
    for steps, _ in enumerate(batch):
        if steps == 6:
            batch.stop()
    for generation in generations:
        assert generation.trace.stats.stop_reason == "stopped" and generation.trace.records
        assert generation.trace.token_ids == solo(generation).token_ids[: len(generation.trace.records)]


def test_the_method_invariants_hold_inside_a_batch(tiny_pair):
    """Greedy SD = target; EASD that never fires = SD; SD and EASD agree up to the first penalty; no refused draft is emitted."""
    for prompt in PROMPTS:
        settings = [
            DecodeSettings(method="target", max_new_tokens=48),
            DecodeSettings(method="sd", max_new_tokens=48),
            DecodeSettings(method="easd", tau_h=1e9, max_new_tokens=48),
            DecodeSettings(method="easd", max_new_tokens=48),
        ]
        target, sd, never, easd = Batch(tiny_pair, [Generation(tiny_pair, prompt, s) for s in settings]).run()
        assert sd.token_ids == target.token_ids and never.token_ids == sd.token_ids
        first = summarize(easd)["first_penalty_position"]
        if first is not None:
            assert easd.token_ids[:first] == sd.token_ids[:first] and easd.token_ids[first] != sd.token_ids[first]
        for record in easd.records:
            if record.origin == "easd_penalty":
                assert record.token_id != record.draft_token_id


def next_logits(model, ids: list[int], vocab_size: int) -> torch.Tensor:
    """The model's logits for the token after `ids`, through its own caches (any backend).  -> [1, V]"""
    caches = model.caches(vocab_size)
    caches.add_row(ids[:-1], len(ids) + 1)
    return caches.logits({0: ids}, {0: 1})[0]


def test_sampling_sd_reproduces_the_target_distribution_per_row(tiny_pair):
    """The first token of 1,500 sampling SD rows, decoded 250 at a time, follows the target's p̃ at the prompt."""
    prompt, temperature = PROMPTS[1], 1.5
    settings = [DecodeSettings(method="sd", k=1, max_new_tokens=2, temperature=temperature, seed=s) for s in range(1500)]
    traces = Batch(tiny_pair, [Generation(tiny_pair, prompt, s) for s in settings], max_rows=250).run()
    ids = encode_prompt(tiny_pair, prompt, chat=True)
    p_logits, q_logits = (next_logits(model, ids, tiny_pair.vocab_size) for model in (tiny_pair.target, tiny_pair.draft))
    target = acc.sampling_probs(p_logits, temperature, 1.0)[0]
    draft = acc.sampling_probs(q_logits, temperature, 1.0)[0]
    counts = torch.bincount(torch.tensor([t.token_ids[0] for t in traces]), minlength=tiny_pair.vocab_size).float()
    tv = lambda a, b: 0.5 * (a - b).abs().sum().item()  # noqa: E731
    # the distance 1,500 exact draws from `target` keep on average (normal approximation of each count)
    expected = 0.5 * (2 * target * (1 - target) / (torch.pi * len(traces))).sqrt().sum().item()
    assert tv(counts / counts.sum(), target) < 1.5 * expected
    assert tv(draft, target) > 2 * expected  # drawing from the draft would be far off: the test can fail


@pytest.mark.slow  # transformers' KV slots stay within the longest row's slack over two 400-token runs
def test_kv_memory_per_row_stays_bounded(hf_tiny_pair):
    """Over 400-token runs with many rejections, the holes rejected drafts leave in transformers' shared cache are
    compacted away: the slots stay within a fixed slack of the longest row. (llama.cpp reuses freed cells itself.)
    400 tokens leave about 1,300 rejected slots, twenty times the slack: 1,000 proved no more."""
    pair = dataclasses.replace(hf_tiny_pair, context_length=500, eos_ids=frozenset())  # RoPE has no hard limit; run long
    settings = [DecodeSettings(method="sd", k=8, max_new_tokens=400, temperature=1.0, seed=i) for i in range(2)]
    generations = [Generation(pair, prompt, s, chat=False) for prompt, s in zip(["Tom", "def add(a, b):"], settings)]
    batch = Batch(pair, generations)
    wasted = 0
    for block in batch:
        longest = max(len(g.tokens) for g in batch.rows.generations)
        for cache in (batch.target, batch.draft):
            assert cache.slots <= longest + COMPACT_SLACK + 9, (cache.slots, longest)
        wasted += 0 if block.end == "bonus" else len(block.drafted) - (len(block.records) - 1)
    assert wasted > 5 * COMPACT_SLACK  # far more rejected slots than the slack: compaction really ran
    assert [len(g.trace.records) for g in generations] == [400, 400]


def test_batch_size_below_one_is_refused(tiny_pair):
    with pytest.raises(SettingsError, match="--batch-size"):
        Batch(tiny_pair, [], max_rows=0)


def test_a_system_prompt_is_the_chat_templates_system_turn_and_the_trace_keeps_it(tiny_pair):
    """The Qwen2.5-Math evaluation's prompt style asks under a system prompt (easd.lab.grading.problems)."""
    system = "Please reason step by step, and put your final answer within \\boxed{}."
    turns = [{"role": "system", "content": system}, {"role": "user", "content": PROMPTS[0]}]
    ids = encode_prompt(tiny_pair, PROMPTS[0], True, system)
    assert ids == tiny_pair.tokenizer.encode(tiny_pair.tokenizer.render_chat(turns)) != encode_prompt(tiny_pair, PROMPTS[0], True)
    assert encode_prompt(tiny_pair, PROMPTS[0], False, system) == tiny_pair.tokenizer.encode(f"{system}\n\n{PROMPTS[0]}")
    trace = Generation(tiny_pair, PROMPTS[0], DecodeSettings(method="sd", max_new_tokens=4), system=system).run()
    assert trace.system == system and trace.stats.prompt_tokens == len(ids)


GROUPS = [  # generations that hold several rows (SMC-SD's particles) beside generations of one row
    dict(method="sd", k=4),
    dict(method="smc", smc_particles=3, seed=2, smc_ess=1.0),
    dict(method="typical"),  # its rows after a group that resamples: they move when the group's rows are copied
    dict(method="easd", k=2, temperature=1.0, seed=5),
    dict(method="smc", smc_particles=2, k=3, seed=7, smc_ess=1.0),  # resamples after nearly every cycle
    dict(method="specguard", specguard_delimiter=" ", specguard_threshold=0.8, seed=4),  # 3 candidates side by side
    dict(method="beam", beam_width=3),  # 3 beams, copied and dropped
]


def test_groups_of_rows_decode_beside_other_rows_exactly_as_alone(tiny_pair):
    """SMC-SD's particles, SpecGuard's candidates and beam search's beams are rows of the shared batch: a batch of SD,
    typical acceptance, EASD, two SMC-SD generations (5 particle rows, resampling often), a SpecGuard one (3 candidate
    rows, some steps kept, some written again by the target) and a beam search (3 beams) gives every generation its
    solo run, token for token, origin for origin, pass for pass; with `max_rows` 6 a 3-row group waits for 3 free
    rows, and the batch never holds more than 6."""
    from easd.method.methods import make_settings

    generations = [Generation(tiny_pair, PROMPTS[i % 3], make_settings(max_new_tokens=20, **kw)) for i, kw in enumerate(GROUPS)]
    batch = Batch(tiny_pair, generations, max_rows=6)
    for _ in batch:
        assert len(batch.rows.generations) <= 6
    for generation in generations:
        alone = Generation(tiny_pair, generation.prompt, generation.settings).run()
        assert generation.trace.token_ids == alone.token_ids
        assert [r.origin for r in generation.trace.records] == [r.origin for r in alone.records]
        assert (generation.trace.stats.target_calls, generation.trace.stats.draft_calls) == (
            alone.stats.target_calls,
            alone.stats.draft_calls,
        )


@pytest.mark.parametrize("method", ["specguard", "rsd"])
def test_a_long_reasoning_step_holds_no_step_of_the_batch_longer_than_k_draft_passes(tiny_pair, method, tmp_path):
    """SpecGuard's and RSD's draft writes a step over the batch's steps, k positions each, as an SD row drafts: with a
    delimiter that never comes, a step is the whole run (40 tokens), yet beside an SD generation no step of the batch
    takes more than k = 4 draft passes; drafted in one go, the first step took 40. The step is still kept whole."""
    from easd.method.methods import make_settings
    from easd.pairs.loading import with_prm
    from easd.pairs.tiny import write_tiny_prm

    pair, own = tiny_pair, {"specguard_delimiter": "§§§", "specguard_threshold": 0.0}
    if method == "rsd":
        pair, own = with_prm(tiny_pair, str(write_tiny_prm(tmp_path, bias=0.0))), {"rsd_delimiter": "§§§", "rsd_delta": 0.0}
    sd = Generation(pair, PROMPTS[0], make_settings(method="sd", max_new_tokens=40))
    stepwise = Generation(pair, PROMPTS[1], make_settings(method=method, max_new_tokens=40, temperature=0.7, **own))
    passes = [0]
    for block in Batch(pair, [sd, stepwise]):
        if block.generation is stepwise:
            passes.append(stepwise.trace.stats.draft_calls)
    assert max(b - a for a, b in zip(passes, passes[1:])) <= 4 < stepwise.trace.stats.draft_calls
    assert len(stepwise.trace.records) == 40 and len({r.block for r in stepwise.trace.records}) == 1  # one step, kept whole


def test_under_an_allowance_a_wide_group_sits_steps_out_and_every_run_is_its_solo_run(tiny_pair):
    """With an allowance of 2 rows a step, SMC-SD's 4 particles step every other step beside an SD generation, which
    steps every step; both decode exactly as alone. Without neighbours, a group steps every step: sitting out would
    help nobody. An allowance below 1 is refused."""
    from easd.method.methods import make_settings

    sd = Generation(tiny_pair, PROMPTS[0], make_settings(method="sd", max_new_tokens=24))
    smc = Generation(tiny_pair, PROMPTS[1], make_settings(method="smc", smc_particles=4, max_new_tokens=200))
    stepped = []
    for block in Batch(tiny_pair, [sd, smc], allowance=2):
        stepped.append(block.generation is smc)
        if sd.done:
            smc.stop()
    assert stepped.count(False) == len(sd.checkpoints) and 0 < stepped.count(True) <= (len(sd.checkpoints) + 1) // 2
    assert all(not (a and b) for a, b in zip(stepped, stepped[1:]))  # never two SMC-SD blocks in a row: it sat one out
    assert sd.trace.token_ids == Generation(tiny_pair, PROMPTS[0], sd.settings).run().token_ids
    alone = Generation(tiny_pair, PROMPTS[1], smc.settings)
    blocks = list(Batch(tiny_pair, [alone], allowance=2))
    assert len(blocks) == len(alone.checkpoints)  # alone, it took every step
    assert smc.trace.token_ids == alone.trace.token_ids[: len(smc.trace.token_ids)]  # what it wrote beside SD, as alone
    with pytest.raises(SettingsError, match="--row-allowance"):
        Batch(tiny_pair, [], allowance=0)


def test_a_step_of_sd_and_smc_takes_one_draft_pass_a_position_and_one_target_pass(tiny_pair):
    """The passes of a batch of one SD and one SMC-SD generation (3 particles), k = 4: per step, 4 draft passes (each
    over the SD row and the particles' rows) and ONE target pass over all 4 rows; before, SMC-SD's particles took
    passes of their own after the batch's."""
    from easd.method.methods import make_settings

    sd = Generation(tiny_pair, PROMPTS[0], make_settings(method="sd", max_new_tokens=30))
    smc = Generation(tiny_pair, PROMPTS[1], make_settings(method="smc", smc_particles=3, max_new_tokens=30))
    batch = Batch(tiny_pair, [sd, smc])
    counted = []
    for block in batch:  # a block for each generation a step: count after each step's last
        if block.generation is smc:
            counted.append((sd.trace.stats.draft_calls, sd.trace.stats.target_calls, smc.trace.stats.target_rows))
        if len(counted) == 2:
            break
    (d1, t1, rows1), (d2, t2, rows2) = counted[0], counted[1]
    assert (d2 - d1, t2 - t1) == (4, 1) and (d1, t1) == (4, 1)  # SD's row took every pass of the step
    assert rows2 - rows1 == 4 and smc.trace.stats.target_calls == sd.trace.stats.target_calls  # one pass, 4 rows in it
