"""The tiny random pair: two small Qwen2 models and a tokenizer, built locally in about a second.

Nothing is downloaded. It exists for tests and for trying the app without real weights, and its
text is gibberish. It is built so that every token origin occurs in ordinary runs:
- the draft *is* the target's first layers (shared embeddings, layers and head), so the two
  agree often;
- the target's extra layers are scaled down, so they perturb the draft's guess only sometimes;
- the weight scale gives entropies around 1 nat, so the default τ_H = 1.0 fires at some
  positions and not at others.
"""

from __future__ import annotations

import copy

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from .loading import ModelPair, configure_threads, make_pair

NAME = "tiny-random"
NOTE = "tiny random models: the text is gibberish; use them to see the mechanics, not the quality"
SEED = 1234
VOCAB_SIZE = 400
TARGET_LAYERS, DRAFT_LAYERS = 4, 2
EXTRA_LAYER_SCALE = 0.2  # how far the target strays from its own first layers: ~70% top-1 agreement
WEIGHT_STD = 0.8  # weight scale: entropies near 1 nat, so τ_H = 1 splits positions
CONTEXT = 512
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


def load_tiny_pair(dtype: torch.dtype = torch.float32) -> ModelPair:
    configure_threads()
    tokenizer = build_tokenizer()
    draft, target = build_models(len(tokenizer))
    draft, target = draft.to(dtype), target.to(dtype)
    return make_pair(draft, target, tokenizer, tokenizer, f"{NAME}-draft", f"{NAME}-target", note=NOTE)


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
        hidden_size=64,
        intermediate_size=128,
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
    return draft, target


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
