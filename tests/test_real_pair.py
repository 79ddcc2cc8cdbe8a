"""Smoke test on the embedded real pair (Qwen2.5-Coder 0.5B → 1.5B from the PyPI part packages).

It converts the GGUF parts on first use (a few minutes on 2 cores, cached afterwards), so it is
the slowest test; it is skipped only when the part packages are not installed.
"""

import pytest

from easd.core.decoding import Generation
from easd.core.settings import DecodeSettings
from easd.pairs.packaged import DRAFT, TARGET, installed

pytestmark = pytest.mark.skipif(not (installed(DRAFT) and installed(TARGET)), reason="qwen-coder part packages not installed")

QUESTION = (
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. "
    "Her parents decided to give her $15 for that purpose, and her grandparents twice as much as her parents. "
    "How much more money does Betty need to buy the wallet?"
)


@pytest.fixture(scope="module")
def qwen_pair():
    from easd.pairs.registry import load_named_pair

    from easd.pairs.loading import Runtime

    return load_named_pair("qwen-coder", Runtime(backend="transformers", dtype="float32"))  # exact in float32


def test_greedy_sd_on_a_real_pair_is_fluent_and_equals_the_target(qwen_pair):
    settings = DecodeSettings(method="sd", max_new_tokens=48)
    sd = Generation(qwen_pair, QUESTION, settings).run()
    target = Generation(qwen_pair, QUESTION, DecodeSettings(method="target", max_new_tokens=48)).run()
    assert sd.token_ids == target.token_ids
    assert sd.summary()["acceptance_rate"] > 0.5
    words = sd.text.split()
    assert len(words) >= 20 and ("money" in sd.text.lower() or "wallet" in sd.text.lower()), sd.text
    assert sum(w.isascii() for w in words) / len(words) > 0.9, sd.text  # English prose, not byte soup


def test_the_pair_shares_one_tokenizer_and_vocabulary(qwen_pair):
    assert qwen_pair.vocab_size == 151936
    assert qwen_pair.tokenizer.convert_tokens_to_ids("<|im_end|>") in qwen_pair.eos_ids
    assert qwen_pair.tokenizer.convert_tokens_to_ids("<|endoftext|>") in qwen_pair.eos_ids


def test_batched_rows_on_the_real_pair_equal_their_solo_runs(qwen_pair):
    """Three ragged rows (SD, EASD, target-only) in one batch, float32: each equals its run alone, token for token."""
    from easd.core.decoding import Batch

    prompts = [QUESTION, "Write a Python function that reverses a string.", "What is 17 * 23?"]
    methods = [dict(method="sd"), dict(method="easd", tau_h=0.5), dict(method="target")]
    generations = [Generation(qwen_pair, p, DecodeSettings(max_new_tokens=12, **m)) for p, m in zip(prompts, methods)]
    Batch(qwen_pair, generations).run()
    for generation in generations:
        alone = Generation(qwen_pair, generation.prompt, generation.settings).run()
        assert generation.trace.token_ids == alone.token_ids, generation.settings.method
        assert [r.origin for r in generation.trace.records] == [r.origin for r in alone.records]


def test_every_live_example_forks_within_its_first_128_tokens(qwen_pair):
    """The app's examples, at the app's default settings: EASD penalizes a token (so its text leaves SD's) by
    token 128. All rows run in one batch (float32: as each would alone) and each leaves at its first penalty."""
    import json
    from dataclasses import replace
    from pathlib import Path

    from easd.core.decoding import Batch
    from ui.controls import read_settings

    examples = json.loads((Path(__file__).resolve().parent.parent / "assets" / "examples.json").read_text())
    settings = replace(read_settings({"max_new_tokens": 128}, 256), method="easd")
    rows = [Generation(qwen_pair, example, settings) for example in examples]
    for block in Batch(qwen_pair, rows):
        if block.end == "penalty":
            block.generation.stop()  # it forked: no need to decode the rest
    forks = {row.prompt[:40]: row.trace.summary()["first_penalty_position"] for row in rows}
    assert all(position is not None and position < 128 for position in forks.values()), forks
