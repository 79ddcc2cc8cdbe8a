"""What every bench times and how: the built-in prompts, a row's laps, the plan, and the rotating order that spreads a
shared machine's drifts over the rows (easd.lab.speed.bench, .beside and .batched read them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...method.methods import knobs, lookup
from ...method.references import REFERENCE
from ...method.spec_metrics import SpecMetrics
from ...method.trace import Trace
from ..runs.protocol import Protocol

PROMPTS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?",
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "A train travels 60 miles per hour for 2.5 hours, then 40 miles per hour for 1.5 hours. How far does it travel in total?",
    "Write a Python function `is_palindrome(s)` that ignores case and non-alphanumeric characters, and a few asserts that test it.",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. Her parents give her $15, and her grandparents twice as much as her parents. How much more money does Betty need?",
    "Explain what a hash map is and write a short Python example that counts word frequencies in a sentence.",
    "James writes a 3-page letter to 2 different friends twice a week. How many pages does he write a year?",
    "Write a SQL query that returns the five customers with the highest total order value from tables customers(id, name) and orders(id, customer_id, amount).",
    "A rectangle has a perimeter of 36 cm and its length is twice its width. What is its area?",
    "Write a JavaScript function that debounces another function by a given number of milliseconds.",
]


@dataclass
class Row:
    """One way to decode: its outputs and traces, and its tokens and seconds in each repetition over the prompts."""

    name: str
    outputs: list[list[int]] = field(default_factory=list)  # token ids per prompt, every repetition's
    traces: list[Trace] = field(default_factory=list)  # ours only
    laps: dict[int, list[float]] = field(default_factory=dict)  # repetition -> [tokens, seconds]

    @property
    def tokens(self) -> int:
        return int(sum(tokens for tokens, _ in self.laps.values()))

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.laps.values())

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def speeds(self) -> list[float]:
        """tokens/s in each repetition, in order."""
        return [tokens / seconds for tokens, seconds in (self.laps[r] for r in sorted(self.laps))]

    def rates(self) -> str:
        """Speculative decoding's figures over all prompts (our runs only): `rates`."""
        return rates([*self.traces])


def rates(traces: list[Trace]) -> str:
    """The runs' figures as their method gives them (easd.method.methods: `bench_line`): SD's and EASD's under vLLM's
    names, MTI's guided share and target passes per token, RSD's steps."""
    if not traces or not any(t.records for t in traces):
        return SpecMetrics.of(traces).line()
    return lookup(traces[0].settings.method).bench_line(traces)


@dataclass(frozen=True)
class BenchPlan:
    """What `bench` times: the prompts, the new tokens, the repetitions, and for each method with rows the values of
    its `bench` setting (SD's k values: the first is every other method's k, and the peers')."""

    prompts: list[str]
    max_new_tokens: int
    values: dict[str, list]  # method name -> the values of its bench setting, a row each
    repeats: int = 1
    own: dict = field(default_factory=dict)  # the methods' other own settings, by flat name, one value for every row
    protocol: Protocol | None = None  # every row sampled alike (bench --temperature); None: greedy, as by default

    @property
    def ks(self) -> list[int]:
        return self.values[REFERENCE]


def row_name(backend: str, method: str, value=None) -> str:
    """A row's name: "llama.cpp SD (k=4)", "llama.cpp EASD (τ_H=1)", "llama.cpp MTI (τ=1)", "llama.cpp target-only"."""
    chosen = lookup(method)
    if value is None:
        return f"{backend} {chosen.title.replace(' ', '-')}"
    label = knobs()[chosen.bench].label or chosen.bench
    return f"{backend} {chosen.title} ({label.removeprefix(chosen.title + ' ')}={value:g})"


def rotated(n: int, turn: int) -> list[int]:
    return [(turn + i) % n for i in range(n)]
