"""Process reward models (PRMs), which RSD asks to score each reasoning step, on transformers.

A PRM here is laid out as Skywork's (Skywork-o1-Open-PRM-Qwen-2.5-1.5B): a Qwen2 causal LM's weights plus a
one-output linear value head, `v_head.summary.weight` [1, hidden] and `v_head.summary.bias` [1], in the same
safetensors files. The body loads as the causal LM it is (trust_remote_code stays off) and the head is read from
the files. The input (`ProcessRewardModel.input_ids`) is built as Skywork's own inference code builds it, which RSD's
reference code calls: the BOS token, the bare question and "\n" encoded together as one text, then every step so far,
each encoded alone and followed by the step tag's id (the last id of "\n\n"); the reward is the sigmoid of the value
head at the last tag. (No real PRM could be loaded where this was built, so the tests use a tiny random one in the same
layout: easd.pairs.tiny.write_tiny_prm.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from ..errors import ModelLoadError

VALUE_HEAD = ("v_head.summary.weight", "v_head.summary.bias")
STEP_TAG = "\n\n"


@dataclass(eq=False)
class ProcessRewardModel:
    """A loaded PRM (easd.method.seam.RewardModel)."""

    body: PreTrainedModel  # the causal LM whose last hidden states the head reads
    head: torch.nn.Linear  # hidden -> 1
    tokenizer: PreTrainedTokenizerBase
    name: str

    @property
    def step_tag_id(self) -> int:
        return self.tokenizer.encode(STEP_TAG, add_special_tokens=False)[-1]

    def input_ids(self, question: str, steps: list[str]) -> list[int]:
        """BOS + question + "\\n" encoded as one text (a question ending in "." and the "\\n" may merge into one
        token), then each step followed by the step tag's id."""
        encode = lambda text: self.tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
        ids = encode(self.tokenizer.bos_token + question + "\n")
        for step in steps:
            ids += [*encode(step), self.step_tag_id]
        return ids

    @torch.no_grad()
    def reward(self, question: str, steps: list[str]) -> float:
        """The PRM's reward for the newest of `steps`, in (0, 1): sigmoid of the value head at its step tag."""
        ids = torch.tensor([self.input_ids(question, steps)], device=self.body.device)
        hidden = self.body.get_decoder()(input_ids=ids).last_hidden_state[0, -1]  # [H] at the newest step's last tag
        return float(torch.sigmoid(self.head(hidden.to(self.head.weight.dtype)))[0])


def load_prm_folder(folder: Path, dtype: torch.dtype, device: str, name: str) -> ProcessRewardModel:
    """A PRM from a local folder in Skywork's layout; ModelLoadError (named --prm) if it is not one."""
    head = _value_head(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        loudness = transformers_logging.get_verbosity()
        transformers_logging.set_verbosity_error()  # the value head's weights are "unexpected" to the causal LM: by design
        try:
            body = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=False).to(device).eval()
        finally:
            transformers_logging.set_verbosity(loudness)
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"--prm: could not load {folder}: {str(err).splitlines()[0]}") from None
    if tokenizer.bos_token_id is None:
        raise ModelLoadError(
            f"--prm: {folder}'s tokenizer has no BOS token, and a PRM's input starts with one; "
            "set bos_token in its tokenizer_config.json"
        )
    hidden = body.get_input_embeddings().embedding_dim
    if head.weight.shape != (1, hidden):
        raise ModelLoadError(f"--prm: {folder}'s value head is {tuple(head.weight.shape)}, not (1, {hidden}) for its body")
    return ProcessRewardModel(body, head.to(device), tokenizer, name)


def _value_head(folder: Path) -> torch.nn.Linear:
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, framework="pt") as file:
            tensors |= {key: file.get_tensor(key) for key in VALUE_HEAD if key in file.keys()}
    if set(tensors) != set(VALUE_HEAD):
        raise ModelLoadError(
            f"--prm: {folder} is not a process reward model: its safetensors hold no value head "
            f"({' and '.join(VALUE_HEAD)}), as Skywork's PRMs do"
        )
    weight, bias = tensors[VALUE_HEAD[0]].float(), tensors[VALUE_HEAD[1]].float()
    head = torch.nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        head.weight.copy_(weight)
        head.bias.copy_(bias)
    return head.requires_grad_(False)
