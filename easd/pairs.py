"""Named model pairs: what `--pair NAME` means, and which pair is the default."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import ModelLoadError
from .models import ModelPair, load_pair, resolve_dtype


@dataclass(frozen=True)
class PairSpec:
    name: str
    draft: str
    target: str
    about: str  # one line for `pairs` and --help
    load: Callable[[str], ModelPair]  # dtype name -> the loaded pair
    available: Callable[[], bool]  # can it load on this machine right now?


def _tiny(dtype: str) -> ModelPair:
    from .tiny import load_tiny_pair

    return load_tiny_pair(resolve_dtype("float32" if dtype == "auto" else dtype))


def _hub(draft: str, target: str) -> Callable[[str], ModelPair]:
    return lambda dtype: load_pair(draft, target, dtype)


PAIRS: dict[str, PairSpec] = {
    spec.name: spec
    for spec in (
        PairSpec(
            "tiny-random",
            "tiny-random-draft",
            "tiny-random-target",
            "two tiny random Qwen2 models built locally in a second; gibberish text, for tests and demos",
            _tiny,
            lambda: True,
        ),
    )
}


def default_pair_name() -> str:
    """The embedded real pair when its packages are installed, else the tiny random pair."""
    return next((name for name in ("qwen-coder",) if name in PAIRS and PAIRS[name].available()), "tiny-random")


def load_named_pair(name: str, dtype: str = "auto") -> ModelPair:
    if name not in PAIRS:
        raise ModelLoadError(f"--pair: unknown pair {name!r}; choose one of {', '.join(PAIRS)} (see `python -m easd pairs`)")
    return PAIRS[name].load(dtype)
