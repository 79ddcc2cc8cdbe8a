"""Pairing checks, the shared vocabulary, int8 drafts and the pair registry, on tiny models."""

import pytest
import torch

from easd.backends.transformers import HFTokenizer, make_pair, resolve_dtype, with_int8
from easd.errors import ModelLoadError
from easd.method.generation import Generation
from easd.method.pair import check_same_tokenizer
from easd.method.settings import DecodeSettings
from easd.method.summary import summarize
from easd.pairs.loading import Runtime
from easd.pairs.registry import PAIRS, load_named_pair, pairs_table
from easd.pairs.tiny import CORPUS, build_models, build_tokenizer


def test_tokenizers_that_differ_are_refused_naming_the_first_difference(monkeypatch):
    import easd.pairs.tiny as tiny

    same = HFTokenizer(build_tokenizer())
    check_same_tokenizer(same, HFTokenizer(build_tokenizer()))  # built twice from the same recipe: identical
    monkeypatch.setattr(tiny, "CORPUS", CORPUS[::-1] + ["zebra zebra zebra quagga"])
    other = HFTokenizer(tiny.build_tokenizer())
    with pytest.raises(
        ModelLoadError, match=r"the tokenizers differ: '.+' is id \d+ in the target but (is id \d+|is missing) in the draft"
    ):
        check_same_tokenizer(other, same)


def test_logits_are_cut_to_the_shared_vocabulary():
    tokenizer = build_tokenizer()
    draft, target = build_models(len(tokenizer))
    target.resize_token_embeddings(len(tokenizer) + 24, mean_resizing=False)  # like Qwen 7B's padded embedding
    with torch.no_grad():
        target.get_output_embeddings().weight[len(tokenizer) :] = 50.0  # padding rows that would win every argmax
    pair = make_pair(draft, target, tokenizer, tokenizer, "d", "t")
    assert pair.vocab_size == len(tokenizer)
    trace = Generation(pair, "hello", DecodeSettings(method="sd", max_new_tokens=30)).run()
    assert max(trace.token_ids) < len(tokenizer)
    assert all(token < len(tokenizer) for r in trace.records for token, _, _ in r.target_top)


def test_int8_draft_keeps_greedy_sd_equal_to_the_unquantized_target(hf_tiny_pair):
    tiny_pair = hf_tiny_pair  # int8 layers are transformers' (llama.cpp runs the GGUF's own quantization)
    quantized = with_int8(tiny_pair, "draft")
    assert quantized.target is tiny_pair.target and "[int8]" in quantized.draft_name
    target = Generation(tiny_pair, "Tom has 3 apples.", DecodeSettings(method="target", max_new_tokens=40)).run()
    sd = Generation(quantized, "Tom has 3 apples.", DecodeSettings(method="sd", max_new_tokens=40)).run()
    assert sd.token_ids == target.token_ids
    draft_alone = Generation(quantized, "Tom has 3 apples.", DecodeSettings(method="draft", max_new_tokens=40)).run()
    unquantized_draft = Generation(tiny_pair, "Tom has 3 apples.", DecodeSettings(method="draft", max_new_tokens=40)).run()
    assert draft_alone.records[0].h_draft != unquantized_draft.records[0].h_draft  # it really is another draft


def test_int8_choice_is_checked():
    with pytest.raises(ModelLoadError, match="--int8: must be one of none, draft, target, both"):
        with_int8(None, "all")


def test_dtype_resolution():
    assert resolve_dtype("float32") == torch.float32 and resolve_dtype("bfloat16") == torch.bfloat16
    assert resolve_dtype("auto", "cpu") in (torch.float32, torch.bfloat16)
    with pytest.raises(ModelLoadError, match="--dtype"):
        resolve_dtype("float8")


def test_registry_lists_every_pair_with_availability():
    rows = {row["pair"]: row for row in pairs_table()}
    assert set(rows) == {"qwen-coder", "tiny-random", "qwen2.5", "qwen2.5-7b", "r1-distill"} == set(PAIRS)
    assert rows["tiny-random"]["available"] == "yes"
    assert all(row["size"] and row["memory"] and row["why"] for row in rows.values())


def test_unknown_pair_is_refused():
    with pytest.raises(ModelLoadError, match="unknown pair 'gpt9'.*tiny-random"):
        load_named_pair("gpt9")


def test_tiny_pair_says_it_is_gibberish(tiny_pair):
    assert "gibberish" in tiny_pair.note


def test_a_pair_loads_from_gguf_files(tmp_path):
    from test_packaged import write_tiny_qwen2_gguf

    from easd.pairs.loading import load_pair

    write_tiny_qwen2_gguf(tmp_path / "tiny.gguf")
    pair = load_pair(str(tmp_path / "tiny.gguf"), str(tmp_path / "tiny.gguf"), Runtime(backend="transformers", dtype="float32"))
    assert pair.draft_name == "tiny.gguf" and pair.vocab_size == len(pair.tokenizer.vocab())
    trace = Generation(pair, "hi", DecodeSettings(method="sd", max_new_tokens=8), chat=False).run()
    assert len(trace.records) == 8 and summarize(trace)["draft_acceptance_rate"] == 1.0  # a model drafting for itself
