"""The tiny random pair: two small Qwen2 models and a tokenizer, built locally in about a second.

Nothing is downloaded. It exists for tests and for trying the app without real weights, and its
text is gibberish. On the transformers backend the models are built in memory; on llama.cpp the
same weights and tokenizer are written as two GGUF files (about 100 kB each, in a temporary
folder) and read from there, so both backends run one pair. Its weight matrices are rounded to
Q5_1 values (5 bits and a scale per 32 weights): llama.cpp stores them so, and multiplies Q5_1
with one dot product per output for any pass (float32 and float16 take kernels whose sums change
with the pass's shape), so in llama.cpp's exact mode the tiny pair is batch-independent there
too. It is built so that every token origin occurs in ordinary runs:
- the draft *is* the target's first layers (shared embeddings, layers and head), so the two
  agree often;
- the target's extra layers are scaled down, so they perturb the draft's guess only sometimes;
- the weight scale gives entropies around 1 nat, so the default τ_H = 1.0 fires at some
  positions and not at others.
"""

from __future__ import annotations

import atexit
import copy
import json
import shutil
import tempfile
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import quants
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from ..backends import configure_threads
from ..backends.transformers import make_pair, resolve_dtype, with_int8
from .loading import ModelPair, Runtime

NAME = "tiny-random"
NOTE = "tiny random models: the text is gibberish; use them to see the mechanics, not the quality"
SEED = 1234
VOCAB_SIZE = 400
TARGET_LAYERS, DRAFT_LAYERS = 4, 2
HIDDEN, INTERMEDIATE = 64, 128  # the models' widths: tests bound float32 rounding by them (tests/bounds.py)
EXTRA_LAYER_SCALE = 0.2  # how far the target strays from its own first layers: ~70% top-1 agreement
WEIGHT_STD = 0.8  # weight scale: entropies near 1 nat, so τ_H = 1 splits positions
CONTEXT = 512
MATRIX_TYPE = gguf.GGMLQuantizationType.Q5_1  # how the weight matrices are stored (see above)
TRANSFORMERS = Runtime(backend="transformers")  # the tiny pair's default: in memory, no files
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "A small draft model proposes a few tokens, and the larger target model checks them all in one pass.",
    "Speculative decoding keeps the target's distribution exactly. Entropy-aware decoding also rejects a "
    "token when both models are unsure yet agree, and asks the target for something else.",
    "Tom has 3 apples and buys 5 more. How many apples does he have now? He has 3 + 5 = 8 apples.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 40))  # 42",
    "The answer is 12. The answer is 7. The total cost is $24.50, so the change is $5.50.",
]


def load_tiny_pair(runtime: Runtime = TRANSFORMERS) -> ModelPair:
    """The tiny pair on the runtime's backend (`auto` takes llama.cpp where it is installed: the pair is GGUF files there)."""
    runtime = runtime.checked()
    backend, note = runtime.resolve(gguf=True)
    if backend == "llama.cpp":
        from ..backends.llamacpp import load_llama_pair

        return load_llama_pair(*gguf_files(), note=NOTE, names=(f"{NAME}-draft", f"{NAME}-target"))
    configure_threads()
    dtype = resolve_dtype("float32" if runtime.dtype == "auto" else runtime.dtype)
    tokenizer = build_tokenizer()
    draft, target = build_models(len(tokenizer))
    draft, target = draft.to(dtype), target.to(dtype)
    pair = make_pair(
        draft, target, tokenizer, tokenizer, f"{NAME}-draft", f"{NAME}-target", note=" ".join(filter(None, (NOTE, note)))
    )
    return with_int8(pair, runtime.int8)


_FILES: list[Path] = []  # the GGUF files this process wrote, once


def gguf_files() -> tuple[Path, Path]:
    """(draft, target) as float32 GGUF files, written once per process into a temporary folder removed at exit."""
    if not _FILES:
        folder = Path(tempfile.mkdtemp(prefix="easd-tiny-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        tokenizer = build_tokenizer()
        for model, role in zip(build_models(len(tokenizer)), ("draft", "target")):
            _FILES.append(write_gguf(model, tokenizer, folder / f"{NAME}-{role}.gguf"))
    return _FILES[0], _FILES[1]


def write_gguf(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, path: Path) -> Path:
    """A Qwen2 model and its byte-level BPE tokenizer as a GGUF (the format llama.cpp reads), its matrices as Q5_1."""
    config = model.config
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_name(path.stem)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q5_1)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    writer.add_tokenizer_model("gpt2")  # byte-level BPE
    writer.add_tokenizer_pre("gpt-2")  # GPT-2's split, as the tokenizer's ByteLevel pre-tokenizer does
    writer.add_token_list([token for token, _ in vocab])
    special = set(SPECIAL_TOKENS)
    writer.add_token_types([gguf.TokenType.CONTROL if token in special else gguf.TokenType.NORMAL for token, _ in vocab])
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(merge) if isinstance(merge, list) else merge for merge in merges])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # llama.cpp ties the output to the embeddings when the file has no output tensor
        values, gguf_name = tensor.float().numpy(), names.get_name(name, try_suffixes=(".weight", ".bias"))
        if tensor.dim() == 2:
            writer.add_tensor(gguf_name, quants.quantize(values, MATRIX_TYPE), raw_dtype=MATRIX_TYPE)
        else:
            writer.add_tensor(gguf_name, values)  # norms and biases stay float32, as llama.cpp wants
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on a few sentences: any string encodes, common words are one token."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=CONTEXT,
    )


def build_models(vocab_size: int) -> tuple[Qwen2ForCausalLM, Qwen2ForCausalLM]:
    """(draft, target), the draft being a copy of the target's first DRAFT_LAYERS layers."""
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=TARGET_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=True,
        initializer_range=WEIGHT_STD,
        eos_token_id=[2, 0],  # <|im_end|>, <|endoftext|>
        pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):  # a fixed pair, without disturbing the caller's RNG
        torch.manual_seed(SEED)
        target = Qwen2ForCausalLM(config).eval()
        draft = Qwen2ForCausalLM(_fewer_layers(config)).eval()
    draft.load_state_dict(_first_layers_state(target), strict=True)
    _scale_extra_layers(target)
    for model in (draft, target):
        _round_matrices(model)
    return draft, target


@torch.no_grad()
def _round_matrices(model: Qwen2ForCausalLM) -> None:
    """Every weight matrix to the values its Q5_1 form holds (quantizing them again gives the same bytes)."""
    for parameter in model.parameters():
        if parameter.dim() == 2:
            stored = quants.quantize(parameter.numpy().astype(np.float32), MATRIX_TYPE)
            parameter.copy_(torch.from_numpy(quants.dequantize(stored, MATRIX_TYPE)))


def _fewer_layers(config: Qwen2Config) -> Qwen2Config:
    draft_config = copy.deepcopy(config)
    draft_config.num_hidden_layers = DRAFT_LAYERS
    return draft_config


def _first_layers_state(target: Qwen2ForCausalLM) -> dict:
    extra = tuple(f"layers.{i}." for i in range(DRAFT_LAYERS, TARGET_LAYERS))
    return {name: value for name, value in target.state_dict().items() if not any(e in name for e in extra)}


@torch.no_grad()
def _scale_extra_layers(target: Qwen2ForCausalLM) -> None:
    """Shrink what the extra layers add to the residual stream, so the target stays near the draft."""
    for layer in target.model.layers[DRAFT_LAYERS:]:
        layer.self_attn.o_proj.weight.mul_(EXTRA_LAYER_SCALE)
        layer.mlp.down_proj.weight.mul_(EXTRA_LAYER_SCALE)


def write_tiny_prm(folder: Path, bias: float = 0.0, bos: bool = True) -> Path:
    """A tiny random process reward model in Skywork's layout (easd.backends.prm), for RSD's tests: the tiny target's
    body and a value head of small random weights and this `bias` (+20: every step kept at any δ ≤ 1; −20: none;
    0: rewards near 0.5). `bos=False` writes a tokenizer without a BOS token, which a PRM must have."""
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    _, target = build_models(len(tokenizer))
    target.save_pretrained(folder)
    if bos:
        tokenizer.bos_token = "<|endoftext|>"
    tokenizer.save_pretrained(folder)
    weights = load_file(folder / "model.safetensors")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + 1)
        weights["v_head.summary.weight"] = torch.randn(1, target.config.hidden_size) * 0.05
    weights["v_head.summary.bias"] = torch.tensor([float(bias)])
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder
