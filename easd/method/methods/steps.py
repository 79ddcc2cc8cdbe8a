"""Reasoning steps, the unit RSD and SpecGuard check: text up to a delimiter ("\\n\\n" by default), or an end token.

Matched on the decoded text, not on token ids: Qwen's tokenizer merges "\\n\\n" into tokens such as ".\\n\\n".
"""

from __future__ import annotations


def step_text(generation, start: int, new: list[int]) -> str:
    """The text of the current step: the generation's tokens from `start` on, then `new`."""
    return generation.pair.tokenizer.decode(generation.tokens[start:] + new)


def step_ends(generation, start: int, new: list[int], delimiter: str) -> bool:
    """Whether the step that began at `start` ends with the tokens `new` after the generation's: its text holds the
    delimiter, or an end token came."""
    if new and new[-1] in generation.pair.eos_ids:
        return True
    return delimiter in step_text(generation, start, new)
