"""The load test (tools.loadtest) runs end to end on the tiny pair: users at once, then a watched room."""

from __future__ import annotations

import re

import pytest

from tools import loadtest

pytestmark = pytest.mark.slow  # the load-test tool end to end: a class and a room, every result equal to its lone run


def test_the_load_test_measures_users_and_a_room_and_every_result_equals_its_lone_run(capsys):
    loadtest.main(
        ["--pair", "tiny-random", "--backend", "transformers", "--users", "1,2", "--max-new-tokens", "96", "--viewers", "3"]
    )
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+(\d+) \|.*\| (\d+) of (\d+)$", out, re.M)
    assert [(n, equal) for n, equal, _ in rows] == [("1", "1"), ("2", "2")], out  # the shared batch changed no token
    assert "estimates:" in out
    room = re.search(r"room of 3 viewers: the presenter's run decoded in .* each viewer received .*, ([\d.]+)× the result", out)
    assert room is not None, out
    assert 0 < float(room.group(1)) <= 2, out  # deltas, not whole traces: the bound
