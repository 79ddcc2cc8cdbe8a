"""How a method is named, explained and measured, apart from how it decodes (easd.method.methods.base.Decoding):
the words a lane, the legend, the inspector, the tables and `bench` read of it, and which of its tokens are its
interventions. Every field but `title` has a default, and so has every function: a method says only what its runs
should say differently (SMC-SD its cycles and resamplings, SpecGuard its steps kept and recomputed).

Its functions read the decoding side's facts too (`models`, through `uses_target` and `uses_draft`): they are two
halves of one object, `Method`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec_metrics import SpecMetrics


@dataclass(frozen=True, kw_only=True)
class Described:
    """A method's words and measures (the module's docstring)."""

    title: str  # as a lane, a table and a legend show it
    intervention_origins: tuple[str, ...] = ()  # the origins that are the method acting against its plain model's choice
    intervention: tuple[str, str] = ("", "")  # one and several in words ("penalty", "penalties"); none if it never intervenes
    grid: tuple[str, ...] = ()  # the settings `sweep --grid NAME` sweeps for it, in the order a variant's label lists them
    bench: str = ""  # the setting `bench` gives a row of this method each value of (its flag takes a list); "": no rows
    bench_against: str = "target"  # the method whose row `bench` reads its rows against (EASD: SD's)
    variant_form: str = ""  # what an --methods label may add after its name (`variant`), in words; "": nothing

    @property
    def intervenes(self) -> bool:
        return bool(self.intervention_origins)

    def intervened(self, origin: str) -> bool:
        """Whether a token of this method's run with this origin is one of its interventions."""
        return origin in self.intervention_origins

    def explains(self, record, settings) -> str:
        """What its rule did at this token, in a sentence (the inspector shows it); "" when it has nothing to add."""
        return ""

    def variant(self, spec: str, settings):
        """Its settings for an --methods label NAME:SPEC, from `settings` (DecodeSettings) and the SPEC after the colon;
        ValueError saying what SPEC may be."""
        raise ValueError(f"{self.name} takes nothing after a colon")

    def lane_title(self, settings) -> str:
        """How a lane, a table or a page names a run of it under `settings`: its title, and what sets this run apart."""
        return self.title

    def describe(self, settings) -> str:
        """How it ran under `settings`, in words, where a table's row should say so (beam search's beams); "" if not."""
        return ""

    def bench_line(self, traces: list) -> str:
        """Its runs' own figures in a line (`bench`): speculative decoding's, under vLLM's names."""
        return SpecMetrics.of(traces).line()

    def lane_facts(self, trace, summary: dict) -> list[tuple[str, object]]:
        """What a lane's stats line says of its run beside its tokens and tokens/s, as (words, figure) in its own
        terms: the passes of the models it runs, then its interventions where it makes any. A figure is a count, a
        share (a float), words, or None where a file does not say. `summary`: the run's (easd.method.summary)."""
        facts = self.calls(summary)
        if self.intervenes:
            facts.append((self.intervention[1], summary["interventions"]))
        return facts

    def calls(self, summary: dict) -> list[tuple[str, object]]:
        """The passes of each model it runs, for `lane_facts`."""
        sides = [side for side, runs in (("target", self.uses_target), ("draft", self.uses_draft)) if runs]
        return [(f"{side} calls", summary[f"{side}_calls"]) for side in sides]
