"""Shared fixtures: the tiny random pair, built once per test session (about a second)."""

import pytest

from easd.settings import DecodeSettings
from easd.tiny import load_tiny_pair

PROMPTS = ["Tom has 3 apples and buys 5 more.", "def add(a, b):", "The answer is"]


@pytest.fixture(scope="session")
def tiny_pair():
    return load_tiny_pair()


@pytest.fixture
def run(tiny_pair):
    """run(prompt, **settings) -> Trace, on the tiny pair."""
    from easd.decoding import Generation

    def _run(prompt: str = PROMPTS[0], pair=None, use_cache: bool = True, chat: bool = True, **settings):
        return Generation(pair or tiny_pair, prompt, DecodeSettings(**settings), chat=chat, use_cache=use_cache).run()

    return _run
