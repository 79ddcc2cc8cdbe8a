"""The packaged-model pipeline, on small part files written here: no real model is read.

The end-to-end tests convert a real (tiny, random) Qwen2 GGUF written with the `gguf` package,
so the cache machinery is exercised by the same transformers calls the real models go through.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import gguf
import pytest
import torch

from easd.errors import ModelLoadError
from easd.pairs.packaged import (
    MANIFEST,
    PackagedModel,
    PartPackage,
    _assemble,
    cache_root,
    converted_folder,
    gguf_file,
    installed,
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def split_into_parts(tmp_path: Path, data: bytes, part_size: int) -> PackagedModel:
    """A spec whose parts are `data` cut into files of `part_size` bytes (the last one shorter)."""
    chunks = [data[start : start + part_size] for start in range(0, len(data), part_size)]
    folder = tmp_path / "parts"
    folder.mkdir(parents=True)
    files = []
    for number, chunk in enumerate(chunks, start=1):
        files.append(folder / f"part{number:02d}.bin")
        files[-1].write_bytes(chunk)
    return PackagedModel(
        name="Fake model",
        parts=tuple(PartPackage(f"fake-part{n}", f"fake_part{n}") for n in range(1, len(chunks) + 1)),
        version="1.0",
        size=len(data),
        part_size=part_size,
        sha256=hashlib.sha256(data).hexdigest(),
        gguf_name="fake-model.gguf",
        part_files=tuple(files),
    )


def write_tiny_qwen2_gguf(path: Path, tokenizer_model: str = "gpt2") -> dict[str, torch.Tensor]:
    """A random one-layer Qwen2 with a byte-level vocabulary, as a float32 GGUF; returns its weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = list(bytes_to_unicode().values()) + ["hi"] + SPECIAL_TOKENS
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tokens),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            tie_word_embeddings=False,
        )
    )
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(16)
    writer.add_feed_forward_length(32)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * (len(tokens) - 3) + [gguf.TokenType.CONTROL] * 3)
    writer.add_token_merges(["h i"])
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
    gguf_names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, 1)
    for name, tensor in model.state_dict().items():
        writer.add_tensor(gguf_names.get_name(name, try_suffixes=(".weight", ".bias")), tensor.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model.state_dict()


@pytest.fixture
def tiny_model(tmp_path: Path) -> tuple[PackagedModel, dict[str, torch.Tensor]]:
    """The tiny GGUF cut into three parts, and the weights it holds."""
    weights = write_tiny_qwen2_gguf(tmp_path / "tiny.gguf")
    data = (tmp_path / "tiny.gguf").read_bytes()
    return split_into_parts(tmp_path, data, part_size=len(data) // 3 + 1), weights


JOINED = ["fake-model.gguf", "fake-model.gguf.json"]  # the whole GGUF joined from the parts (llama.cpp reads it), kept


def leftovers(root: Path) -> list[str]:
    """What an interrupted or failed build may have left in the cache root."""
    return sorted(path.name for path in root.iterdir() if not path.name.endswith(".lock"))


# --- Assembling and checking the parts -----------------------------------------------------------


def test_assembly_is_the_concatenation_of_the_parts(tmp_path):
    data = os.urandom(10_000)
    spec = split_into_parts(tmp_path, data, part_size=3_000)
    assert len(spec.parts) == 4
    _assemble(spec, tmp_path / "whole.gguf", progress=False)
    assert (tmp_path / "whole.gguf").read_bytes() == data


def test_installed_is_false_when_a_part_is_missing(tmp_path):
    spec = split_into_parts(tmp_path, os.urandom(1_000), part_size=300)
    assert installed(spec)
    spec.part_files[2].unlink()
    assert not installed(spec)


def test_parts_come_from_the_installed_packages_by_default(tmp_path):
    spec = replace(split_into_parts(tmp_path, b"x" * 10, part_size=5), part_files=None)
    assert not installed(spec)  # no package fake_part1 exists
    with pytest.raises(ModelLoadError, match=r"pip install --force-reinstall fake-part1==1.0 fake-part2==1.0$"):
        converted_folder(spec, cache_root=tmp_path / "cache", progress=False)


def test_a_missing_part_is_named(tmp_path):
    spec = split_into_parts(tmp_path, os.urandom(1_000), part_size=300)
    spec.part_files[1].unlink()
    with pytest.raises(ModelLoadError) as caught:
        converted_folder(spec, cache_root=tmp_path / "cache", progress=False)
    message = str(caught.value)
    assert message.endswith("pip install --force-reinstall fake-part2==1.0")
    assert "\n" not in message
    assert leftovers(tmp_path / "cache") == []


def test_a_part_of_the_wrong_size_is_named(tmp_path):
    spec = split_into_parts(tmp_path, os.urandom(1_000), part_size=300)
    spec.part_files[2].write_bytes(b"truncated")
    with pytest.raises(ModelLoadError, match=r"wrong size: fake-part3\. .*fake-part3==1.0$"):
        converted_folder(spec, cache_root=tmp_path / "cache", progress=False)
    assert leftovers(tmp_path / "cache") == []


def test_a_wrong_hash_names_every_part(tmp_path):
    spec = split_into_parts(tmp_path, b"a" * 1_000, part_size=300)
    spec.part_files[1].write_bytes(b"b" * 300)  # same size, other bytes
    every_part = " ".join(f"fake-part{n}==1.0" for n in range(1, 5))
    with pytest.raises(ModelLoadError, match=rf"sha256.*pip install --force-reinstall {every_part}$"):
        converted_folder(spec, cache_root=tmp_path / "cache", progress=False)
    assert leftovers(tmp_path / "cache") == []


# --- Converting and caching ----------------------------------------------------------------------


def test_conversion_writes_a_loadable_folder_with_the_same_weights(tiny_model, tmp_path, monkeypatch):
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec, weights = tiny_model
    readings, reader_class = [], gguf.GGUFReader
    counting = lambda path, *args, **kwargs: readings.append(path) or reader_class(path, *args, **kwargs)  # noqa: E731
    monkeypatch.setattr(gguf, "GGUFReader", counting)
    folder = converted_folder(spec, cache_root=tmp_path / "cache", progress=False)
    assert len(readings) == 1 and gguf.GGUFReader is counting  # read once for config, weights and tokenizer; put back

    assert leftovers(tmp_path / "cache") == sorted([folder.name, *JOINED])  # no temporary folder left
    assert not list(folder.glob("*.gguf"))
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.dtype == torch.bfloat16
    loaded = model.state_dict()
    assert loaded.keys() == weights.keys()
    for name, tensor in weights.items():
        assert torch.equal(loaded[name], tensor.to(torch.bfloat16)), name
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token == "<|im_end|>"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert tokenizer("hi<|im_end|>").input_ids == [256, tokenizer.eos_token_id]
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert chat == "<|im_start|>hi<|im_end|>"


def test_a_second_call_reuses_the_cache_without_reading_the_parts_or_writing(tiny_model, tmp_path):
    spec, _ = tiny_model
    root = tmp_path / "cache"
    folder = converted_folder(spec, cache_root=root, progress=False)
    written = (folder / "model.safetensors").stat().st_mtime_ns
    for path in [*spec.part_files, *root.glob("*.lock")]:
        path.unlink()

    assert converted_folder(spec, cache_root=root, progress=False) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == written
    assert not list(root.glob("*.lock"))  # so a cache that cannot be written still works


@pytest.mark.parametrize("failure", ["not a GGUF", "unknown tokenizer"])
def test_a_failed_conversion_leaves_no_folder_and_the_next_call_works(tiny_model, tmp_path, failure):
    spec, _ = tiny_model
    if failure == "not a GGUF":  # fails as the conversion starts
        broken = b"GGUF" + os.urandom(996)
    else:  # fails after the weights are written
        write_tiny_qwen2_gguf(tmp_path / "broken.gguf", tokenizer_model="no-such-tokenizer")
        broken = (tmp_path / "broken.gguf").read_bytes()
    broken_spec = split_into_parts(tmp_path / "broken", broken, part_size=len(broken) // 2 + 1)
    assert broken_spec.gguf_name == spec.gguf_name  # so both use the same cache folder
    root = tmp_path / "cache"

    for _ in range(2):  # fails the same clean way twice: nothing stale gets in the way
        with pytest.raises(ModelLoadError, match=r"converting to .* failed"):
            converted_folder(broken_spec, cache_root=root, progress=False)
        assert leftovers(root) == JOINED  # the parts joined well; only the conversion failed

    folder = converted_folder(spec, cache_root=root, progress=False)  # other parts: joined again, then converted
    assert leftovers(root) == sorted([folder.name, *JOINED])


def test_leftovers_of_a_killed_run_are_cleaned_up(tiny_model, tmp_path):
    spec, _ = tiny_model
    root = tmp_path / "cache"
    final = root / "fake-model"
    stale = root / ".fake-model.tmp-0123abcd"
    (stale / "model").mkdir(parents=True)
    (stale / "fake-model.gguf").write_bytes(b"half a file")
    final.mkdir()  # a final folder without a manifest is never trusted
    (final / "config.json").write_text("{}")

    assert converted_folder(spec, cache_root=root, progress=False) == final
    assert leftovers(root) == sorted(["fake-model", *JOINED])
    assert (final / MANIFEST).is_file()


@pytest.mark.parametrize("damage", ["other transformers", "truncated weights"])
def test_an_outdated_or_damaged_cache_is_rebuilt(tiny_model, tmp_path, damage):
    spec, _ = tiny_model
    folder = converted_folder(spec, cache_root=tmp_path / "cache", progress=False)
    if damage == "other transformers":
        manifest = json.loads((folder / MANIFEST).read_text())
        manifest["source"]["transformers"] = "0.0.1"
        (folder / MANIFEST).write_text(json.dumps(manifest))
    else:
        with (folder / "model.safetensors").open("r+b") as weights:
            weights.truncate(100)

    assert converted_folder(spec, cache_root=tmp_path / "cache", progress=False) == folder
    assert json.loads((folder / MANIFEST).read_text())["source"]["transformers"] != "0.0.1"
    assert (folder / "model.safetensors").stat().st_size > 100
    assert leftovers(tmp_path / "cache") == sorted([folder.name, *JOINED])


def test_progress_bars_go_to_stderr_and_can_be_turned_off(tiny_model, tmp_path, capfd):
    spec, _ = tiny_model
    converted_folder(spec, cache_root=tmp_path / "quiet", progress=False)
    assert capfd.readouterr().err == ""
    converted_folder(spec, cache_root=tmp_path / "shown", progress=True)
    shown = capfd.readouterr().err
    assert "Assembling fake-model.gguf" in shown
    assert "Converting fake-model.gguf" in shown


# --- The whole GGUF, for llama.cpp -------------------------------------------------------------------


def test_the_whole_gguf_is_joined_once_and_then_reused_without_reading_the_parts(tiny_model, tmp_path):
    spec, _ = tiny_model
    root = tmp_path / "cache"
    joined = gguf_file(spec, cache_root=root, progress=False)
    assert joined.read_bytes() == b"".join(path.read_bytes() for path in spec.part_files)
    assert leftovers(root) == JOINED
    written = joined.stat().st_mtime_ns
    for path in spec.part_files:
        path.unlink()
    assert gguf_file(spec, cache_root=root, progress=False) == joined and joined.stat().st_mtime_ns == written


@pytest.mark.parametrize("damage", ["truncated", "joined from other parts", "no record of its hash"])
def test_a_damaged_whole_gguf_is_joined_again(tiny_model, tmp_path, damage):
    spec, _ = tiny_model
    root = tmp_path / "cache"
    joined = gguf_file(spec, cache_root=root, progress=False)
    whole = joined.read_bytes()
    if damage == "truncated":
        joined.write_bytes(whole[:100])
    elif damage == "joined from other parts":
        (root / "fake-model.gguf.json").write_text(json.dumps({"sha256": "0" * 64}))
    else:
        (root / "fake-model.gguf.json").unlink()
    assert gguf_file(spec, cache_root=root, progress=False).read_bytes() == whole
    assert leftovers(root) == JOINED


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("EASD_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "easd"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "easd"
    monkeypatch.setenv("EASD_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
