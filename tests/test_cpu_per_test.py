"""tools.cpu_per_test: a test's CPU-seconds, its own and its subprocesses', not its wall time."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tools.cpu_per_test import main

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = """
import subprocess, sys, time
import pytest

SPIN = "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass"

def test_a_subprocess_spins():
    subprocess.run([sys.executable, "-c", SPIN], check=True)

@pytest.mark.slow
def test_it_sleeps():
    time.sleep(0.6)
"""


def test_a_subprocess_spinning_counts_and_a_sleep_does_not(tmp_path, capsys):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  slow: left out of the quick tier\n")
    # a pytest of its own: not one of this run's xdist workers
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "tools.cpu_per_test"]
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["test"]: r for r in map(json.loads, (tmp_path / ".cpu-per-test" / "main.jsonl").read_text().splitlines())}
    spins, sleeps = rows["test_sample.py::test_a_subprocess_spins"], rows["test_sample.py::test_it_sleeps"]
    assert spins["cpu_s"] >= 0.6 and not spins["slow"]  # the child's CPU, reaped, is the test's
    assert sleeps["cpu_s"] < 0.3 and sleeps["wall_s"] >= 0.6 and sleeps["slow"]
    main([str(tmp_path / ".cpu-per-test"), "--top", "2"])
    printed = capsys.readouterr().out
    print(printed)
    assert printed.index("test_a_subprocess_spins   (quick tier)") < printed.index("test_it_sleeps")
    assert "2 tests," in printed and "the quick tier's 1 tests" in printed
