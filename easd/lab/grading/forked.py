"""A yes/no check run in a forked process that can be stopped: the graders' parsers (math-verify, sympy) may take
without bound, and their own timeouts use SIGALRM, which only works in the main thread (the app and the evaluation
may run elsewhere)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable


def check_in_fork(check: Callable[..., bool], args: tuple, seconds: float) -> bool:
    """check(*args) in a forked process; False if it raised, or had not answered after `seconds`."""
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    worker = context.Process(target=_answer, args=(check, args, result), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        worker.kill()
        worker.join()
        return False
    return not result.empty() and result.get()


def _answer(check: Callable[..., bool], args: tuple, result) -> None:
    try:
        answer = bool(check(*args))
    except Exception:  # noqa: BLE001 - a check that raises is a no, as it returns, without a child's traceback in the run's log
        answer = False
    result.put(answer)
