"""The embedded real pair (Qwen2.5-Coder 0.5B → 1.5B from the PyPI part packages), on llama.cpp in seconds.

llama.cpp reads the GGUF files as shipped (joined once from their parts into the cache), in its
exact mode (easd.backends.llamacpp). One test runs the draft's real GGUF on transformers in float32, the
other exact regime, from the folder its conversion writes (half a minute on 2 cores on a fresh clone,
cached afterwards; the target's conversion, the same code on a larger file, is left to the device check);
the tokenizer test reads transformers' tokenizer from that folder too. What each test buys:
docs/testing.md, "Slow tests". Skipped only when the part packages are not installed.
"""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from easd.method.generation import Generation
from easd.method.prompts import encode_prompt
from easd.method.settings import DecodeSettings
from easd.method.step import Batch
from easd.method.summary import summarize
from easd.pairs.loading import Runtime
from easd.pairs.packaged import DRAFT, TARGET, installed

pytestmark = [
    pytest.mark.skipif(not (installed(DRAFT) and installed(TARGET)), reason="qwen-coder part packages not installed"),
    pytest.mark.slow,  # the embedded pair itself: exactness, fluency, the live examples' forks, transformers' reading
]

QUESTION = (
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. "
    "Her parents decided to give her $15 for that purpose, and her grandparents twice as much as her parents. "
    "How much more money does Betty need to buy the wallet?"
)
EXAMPLES = json.loads((Path(__file__).resolve().parent.parent / "assets" / "examples.json").read_text())


@pytest.fixture(scope="module")
def qwen_pair():
    from easd.pairs.registry import load_named_pair

    return load_named_pair("qwen-coder", Runtime(backend="llama.cpp"))


@pytest.fixture(scope="module")
def converted_draft():
    """The draft's GGUF converted for transformers (our cached folder: converted on a fresh clone, read afterwards)."""
    from easd.pairs.packaged import converted_folder

    return converted_folder(DRAFT, progress=False)


def assert_fluent_english(text: str) -> None:
    words = text.split()
    assert len(words) >= 20 and ("money" in text.lower() or "wallet" in text.lower()), text
    assert sum(w.isascii() for w in words) / len(words) > 0.9, text  # English prose, not byte soup


def test_the_pair_shares_one_tokenizer_and_vocabulary(qwen_pair):
    assert qwen_pair.vocab_size == 151936
    assert {token for text in ("<|im_end|>", "<|endoftext|>") for token in qwen_pair.tokenizer.encode(text)} <= qwen_pair.eos_ids


def test_token_ids_and_chat_template_are_the_ones_transformers_reads_from_the_same_gguf(qwen_pair, converted_draft):
    """Our reading of a GGUF's tokenizer (llama.cpp's vocabulary, the file's chat template) equals transformers' reading
    of the same file: the draft's, as its conversion saved it for the transformers backend (reading the file again
    takes transformers half a minute). The pair's tokenizer, the target's, is checked beside the draft's own: the
    same ids for every string (check_same_tokenizer at load), the same chat template, the same texts."""
    from transformers import AutoTokenizer

    from easd.backends.llamacpp import LlamaTokenizer

    reference = AutoTokenizer.from_pretrained(converted_draft)
    ours = {"target": qwen_pair.tokenizer, "draft": LlamaTokenizer(qwen_pair.draft)}
    texts = [*EXAMPLES, QUESTION, "def f(x):\n\treturn x  # ünïcödé 😀 中文 <|im_end|>"]
    for text in texts:
        expected = reference(text, add_special_tokens=False)["input_ids"]
        assert {role: tokenizer.encode(text) for role, tokenizer in ours.items()} == dict.fromkeys(ours, expected), text
    chat = [{"role": "user", "content": EXAMPLES[0]}]
    expected = reference.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert {role: tokenizer.render_chat(chat) for role, tokenizer in ours.items()} == dict.fromkeys(ours, expected)
    ids = [*range(0, 151643, 97), *range(151643, 151665)]  # every 97th token, and every special one
    expected = [reference.decode([i]) for i in ids]
    assert {role: [tokenizer.text(i) for i in ids] for role, tokenizer in ours.items()} == dict.fromkeys(ours, expected)


def test_greedy_sd_in_a_batch_on_the_real_pair_equals_the_target_a_llama_cpp_python_loop_and_its_run_alone(qwen_pair):
    """Three ragged rows in one batch: greedy SD (k = 4) and target-only on the question (chat template, 32 tokens),
    and EASD on a raw prompt (16 tokens). SD equals target-only (llama.cpp's exact mode: a (k + 1)-token pass gives
    what k + 1 one-token passes give) and a loop written directly against llama-cpp-python, alone
    (easd.lab.speed.llama_reference), token for token, and is fluent: so both rows equal their runs alone, which would
    be those tokens again. The EASD row equals its run alone bit for bit, entropies included. Its prompt is raw text:
    in llama.cpp's exact mode a prompt's token costs what a decoded one does."""
    from easd.lab.speed.llama_reference import speculative

    sd, target = (Generation(qwen_pair, QUESTION, DecodeSettings(method=m, k=4, max_new_tokens=32)) for m in ("sd", "target"))
    easd = Generation(
        qwen_pair,
        "Write a Python function that reverses a string.",
        DecodeSettings(method="easd", tau_h=0.5, max_new_tokens=16),
        chat=False,
    )
    Batch(qwen_pair, [sd, target, easd]).run()
    assert sd.trace.token_ids == target.trace.token_ids
    prompt = encode_prompt(qwen_pair, QUESTION, chat=True)
    assert sd.trace.token_ids == speculative(qwen_pair.draft, qwen_pair.target, prompt, 4, 32, qwen_pair.eos_ids)
    assert summarize(sd.trace)["draft_acceptance_rate"] > 0.5
    assert_fluent_english(sd.trace.text)
    alone = Generation(qwen_pair, easd.prompt, easd.settings, chat=False).run()
    assert easd.trace.token_ids == alone.token_ids
    assert [r.origin for r in easd.trace.records] == [r.origin for r in alone.records]
    assert [r.h_target for r in easd.trace.records] == [r.h_target for r in alone.records]  # bit for bit
    assert qwen_pair.info["draft_logit_shift"] == qwen_pair.info["target_logit_shift"] == 0.0  # measured at load


def test_every_live_example_forks_within_its_first_128_tokens(qwen_pair):
    """The app's examples, at the app's default settings: EASD penalizes a token (so its text leaves SD's) by
    token 128. All rows run in one batch (as each would alone) and each leaves at its first penalty."""
    from components.controls import read_settings

    settings = replace(read_settings({"max_new_tokens": 128}, 256), method="easd")
    rows = [Generation(qwen_pair, example, settings) for example in EXAMPLES]
    for block in Batch(qwen_pair, rows):
        if block.end == "easd_penalty":
            block.generation.stop()  # it forked: no need to decode the rest
    forks = {row.prompt[:40]: summarize(row.trace)["first_penalty_position"] for row in rows}
    assert all(position is not None and position < 128 for position in forks.values()), forks


def test_stop_during_a_long_prompt_is_heard_within_one_piece_of_it(qwen_pair):
    """A user's long prompt is computed 256 tokens a pass; Stop, pressed while it is, is heard after the pass
    under way. In one pass, a 2,375-token prompt took 75 s on 2 cores here, and Stop waited for all of it."""
    import threading
    import time

    prompt = "Summarise this list. " + " ".join(f"item {i} is red." for i in range(150))
    rows = [Generation(qwen_pair, prompt, DecodeSettings(method=m, max_new_tokens=16)) for m in ("sd", "easd")]
    assert rows[0].prompt_length > 4 * 256
    joined = threading.Event()
    batch = Batch(qwen_pair, rows, at_boundary=lambda _: joined.set())
    decoding = threading.Thread(target=batch.run)
    decoding.start()
    joined.wait(60)
    time.sleep(1.0)  # into the prompt's passes
    stopped = time.monotonic()
    for row in rows:
        row.stop()
    decoding.join(120)
    waited = time.monotonic() - stopped
    print(f"\nStop 1 s into a {rows[0].prompt_length}-token prompt: the rows were out {waited:.1f} s later")
    assert not decoding.is_alive() and all(row.trace.records == [] and row.done for row in rows)
    assert waited < 20  # one 256-token pass of the target is about 8 s here; the whole prompt, over 30 s


def test_slowest_a_real_gguf_converted_for_transformers_decodes_exactly_in_float32(converted_draft):
    """The suite's one real model on transformers: the draft's 4-bit GGUF through the conversion (transformers'
    dequantizer, our cached folder), as both models of a pair. In float32 SD's (k + 1)-token target passes give the
    tokens target-only's one-token passes give, and the text is the question's answer, not byte soup. 32 tokens (7
    of SD's target passes) write the 20 words the fluency check reads; 48 took half as long again."""
    from easd.pairs.loading import load_pair

    folder = str(converted_draft)
    pair = load_pair(folder, folder, Runtime(backend="transformers", dtype="float32"))
    sd = Generation(pair, QUESTION, DecodeSettings(method="sd", max_new_tokens=32)).run()
    target = Generation(pair, QUESTION, DecodeSettings(method="target", max_new_tokens=32)).run()
    assert sd.token_ids == target.token_ids and pair.backend == "transformers"
    assert_fluent_english(sd.text)
