"""Keeps every core of the machine busy, as another job would, with no more CPU than the machine's own work leaves idle.

    python tests/busy_machine.py [seconds]        # ends itself after `seconds` (default 300)

It starts one spinning process per core and, 20 times a second, lets as many of them run (SIGCONT) as there are cores
that other tasks do not want, and holds the rest (SIGSTOP). "Want" is the kernel's count of runnable tasks
(`procs_running` in /proc/stat), less the spinners running and this process, averaged over five looks. Alone on a
quiet machine every spinner runs; under `pytest -n 3` the other workers usually keep both cores busy themselves, and
two spinners that ran regardless took their CPU from the suite (a test on a busy machine cost 50 CPU-seconds, 15
without them). On SIGTERM it ends its spinners; the kernel ends them if it dies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

LOOKS, LOOK_S = 5, 0.01  # a decision every 5 × 10 ms: often enough to fill a core a test's other work leaves
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def runnable() -> int:
    """Tasks running or waiting for a core right now, this process among them (it runs while it reads)."""
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith("procs_running"):
                return int(line.split()[1])
    raise RuntimeError("/proc/stat has no procs_running line")


def spin(parent: int) -> None:
    """A spinner's whole life: busy until it is killed, by this process or, should this one die, by the kernel
    (PR_SET_PDEATHSIG; a held spinner could not notice by itself)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above
        os._exit(0)
    while True:
        pass


def main(seconds: float) -> None:
    cores = len(os.sched_getaffinity(0))
    spinners, me = [], os.getpid()
    for _ in range(cores):
        pid = os.fork()
        if pid == 0:
            spin(me)
        spinners.append(pid)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so that `finally` ends the spinners
    running, end = cores, time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            looks = []
            for _ in range(LOOKS):
                looks.append(runnable())
                time.sleep(LOOK_S)
            others = max(0, round(sum(looks) / LOOKS) - running - 1)
            wanted = max(0, cores - others)
            for index, pid in enumerate(spinners):
                if (index < wanted) != (index < running):
                    os.kill(pid, signal.SIGCONT if index < wanted else signal.SIGSTOP)
            running = wanted
    finally:
        for pid in spinners:
            os.kill(pid, signal.SIGKILL)  # a held spinner too
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 300.0)
