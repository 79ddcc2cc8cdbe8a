"""`busy_machine.py`, which the busy-machine tests run (`busy_cores`): it fills the cores that the machine's other
work leaves idle, and only those."""

import os
import subprocess
import sys
import time

import psutil
import pytest
from conftest import BUSY_MACHINE

pytestmark = pytest.mark.slow  # it keeps both cores busy for about 3 s

SPINNING = [sys.executable, "-c", "while True: pass"]


def machine_busy_s() -> float:
    """CPU-seconds the machine has been busy since it started, every core together."""
    times = psutil.cpu_times()
    return times.user + times.nice + times.system + times.irq + times.softirq


def own_cpu_s(process: psutil.Process) -> float:
    """CPU-seconds `process` and its children have used so far."""
    return sum(sum(p.cpu_times()[:2]) for p in [process, *process.children()])


def share_of_cores(process: psutil.Process, seconds: float) -> tuple[float, float]:
    """(cores the machine kept busy, cores `process` kept busy) over the next `seconds`."""
    machine, own = machine_busy_s(), own_cpu_s(process)
    time.sleep(seconds)
    return (machine_busy_s() - machine) / seconds, (own_cpu_s(process) - own) / seconds


def test_it_fills_the_idle_cores_and_leaves_busy_ones_to_their_work():
    cores = len(os.sched_getaffinity(0))
    machine = subprocess.Popen(BUSY_MACHINE)
    process = psutil.Process(machine.pid)
    others = []
    try:
        time.sleep(0.3)  # its spinners started
        busy, _ = share_of_cores(process, 1.0)
        assert busy > 0.9 * cores  # whatever else runs, nothing is left idle
        others = [subprocess.Popen(SPINNING) for _ in range(cores)]  # other work wants every core
        time.sleep(0.3)
        busy, own = share_of_cores(process, 1.5)
        assert busy > 0.9 * cores and own < 0.2  # it gave them back
        spinners = process.children()
    finally:
        for other in others:
            other.kill()
            other.wait()
        machine.terminate()
        machine.wait()
    assert len(spinners) == cores and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in spinners)


def test_its_spinners_end_with_it_even_held():
    machine = subprocess.Popen(BUSY_MACHINE)
    others = [subprocess.Popen(SPINNING) for _ in range(len(os.sched_getaffinity(0)))]
    try:
        time.sleep(0.5)  # its spinners held, the other work taking every core
        spinners = psutil.Process(machine.pid).children()
        machine.kill()  # no chance to end them itself
        machine.wait()
        gone, alive = psutil.wait_procs(spinners, timeout=5)
    finally:
        for other in others:
            other.kill()
            other.wait()
    assert spinners and not alive
