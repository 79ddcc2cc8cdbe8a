"""Live figures under each lane, the comparison line once both runs have ended, and the Speed panel.

Built with `easd.render.html`: a loaded trace's summary (its stop reason, its counts) is shown as escaped text.
"""

from __future__ import annotations

from ..method.methods import METHODS
from ..method.speed import Speed
from ..method.summary import intervened, summarize
from ..method.trace import Trace
from .html import Html, join, number, tag
from .lanes import title

# why a run ended, as a lane's stats line says it (easd.method.trace.STOP_REASONS)
STOPPED = {
    "eos": "the end-of-text token",
    "max_new_tokens": "the token limit",
    "context": "the context is full",
    "stopped": "stopped",
    "left": "the page closed",
    "unread": "nobody was reading it",
    "quota": "the GPU quota",
    "error": "an error",
    "max_steps": "the step limit",
}


def stats_html(trace: Trace | None, running: bool = False) -> Html:
    """A lane's stats line in its method's terms (`Method.lane_facts`), how it ended (or that it runs), and a sentence
    where the method did nothing here: it never consulted the target, or made no intervention."""
    if trace is None:
        return Html("")
    s = summarize(trace)
    method = METHODS.get(trace.settings.method) if isinstance(trace.settings.method, str) else None
    parts = [
        join([tag("b", number(s["new_tokens"], "d")), " tokens"]),
        join([tag("b", number(s["tokens_per_s"], ".1f")), " tokens/s"]),
    ]
    facts = method.lane_facts(trace, s) if method is not None else []
    parts += [
        join([f"{words} ", tag("b", number(figure, ".2f" if isinstance(figure, float) else "d"))]) for words, figure in facts
    ]
    if s["fragile_penalties"]:  # docs/method.md, "Fragile decisions": rounding could have flipped these
        parts.append(join(["≈ fragile ", tag("b", number(s["fragile_penalties"], "d"))]))
    if running:
        parts.append("running…")
    elif s["stop_reason"]:
        parts.append(f"ended: {STOPPED.get(s['stop_reason'], s['stop_reason'])}")
    line = tag("p", join(parts, " · "), class_="stats")
    said = "" if running or method is None else did_nothing(method, s)
    return join([line, tag("p", said, class_="lane-summary")]) if said else line


def did_nothing(method, summary: dict) -> str:
    """A sentence where the method did nothing in this run, "" where it did: a method of both models that never
    consulted the target writes the draft's own text; one that intervenes and did not wrote its plain model's."""
    if method.uses_target and method.uses_draft and summary["target_calls"] == 0 and summary["new_tokens"]:
        return f"{method.title} never consulted the target here: this lane is the draft's own text."
    if method.intervenes and summary["interventions"] == 0 and summary["new_tokens"]:
        return f"No {method.intervention[1]} in this run: {method.title} changed nothing here."
    return ""


def comparison_html(left: Trace | None, right: Trace | None, fork: int | None) -> Html:
    """One line: where the right lane's run departs from the left's, how often each intervened, and what the right
    one cost in speed (SD | EASD: where EASD changed SD's text; EASD | MTI: the two interventions side by side)."""
    if left is None or right is None or not left.records or not right.records:
        return Html("")
    a, b = summarize(left), summarize(right)
    name_a, name_b = (title(t.settings.method) for t in (left, right))
    if fork is None:
        change = f"{name_b}'s text is identical to {name_a}'s"
    else:
        change = f"the texts fork at token {fork}"
        first = next((r.position for r in right.records if intervened(r.origin, right.settings.method)), None)
        if first is not None:
            change += f" ({name_b}'s first {METHODS[right.settings.method].intervention[0]} is at token {first})"
    rates = [_intervention_rate(name, trace, summary) for name, trace, summary in ((name_a, left, a), (name_b, right, b))]
    rate = "; ".join(filter(None, rates)) or "no interventions"
    speed = ""
    # The lanes share their forward passes, so identical work takes identical time: a speed figure is
    # shown only when the work differed, in target passes per token and tokens/s.
    work = [(s["new_tokens"], s["target_calls"]) for s in (a, b)]
    if work[0] != work[1] and all(_is_real(v) and v for s in (a, b) for v in (s["tokens_per_s"], s["target_calls"])):
        passes = [calls / tokens for tokens, calls in work]
        speed = (
            f"; {name_b} took {passes[1]:.2f} target passes per token vs {name_a}'s {passes[0]:.2f}"
            f" ({b['tokens_per_s'] / a['tokens_per_s']:.2f}× {name_a}'s tokens/s)"
        )
    acceptance = ""
    if a["mean_acceptance_length"] is not None and b["mean_acceptance_length"] is not None:
        acceptance = (
            f"; mean acceptance length {number(b['mean_acceptance_length'], '.2f')}"
            f" vs {name_a}'s {number(a['mean_acceptance_length'], '.2f')}"
        )
    models = f" They ran on draft {right.draft_model or '?'} → target {right.target_model or '?'}."
    return tag("p", tag("b", "Comparison:"), f" {change}; {rate}{speed}{acceptance}.{models}", class_="comparison")


def _intervention_rate(name: str, trace: Trace, summary: dict) -> str:
    """ "EASD: 3 penalties (2.1% of its tokens)" for a method that intervenes; "" for one that does not."""
    method = METHODS[trace.settings.method]
    if not method.intervenes:
        return ""
    count = summary["interventions"]
    share = 100 * count / summary["new_tokens"] if summary["new_tokens"] else None
    return f"{name}: {number(count, 'd')} {method.intervention[count != 1]} ({number(share, '.1f')}% of its tokens)"


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def speed_html(trace: Trace | None) -> Html:
    """The Speed panel: why this speculative run was as fast as it was, from its own measured passes (easd.method.speed)."""
    speed = Speed.of_trace(trace)
    if speed is None:
        return Html("")
    width = speed.k + 1
    positions = " · ".join(number(a, ".2f") for a in speed.alpha_by_position)
    verdict = "faster" if speed.measured > 1 else "slower"
    return tag(
        "p",
        tag("b", "Speed, explained:"),
        f" measured here, a draft token costs c = {number(speed.c, '.2f')} of a 1-token target pass, and checking"
        f" k + 1 = {width} tokens in one pass costs r = {number(speed.r, '.2f')} passes. Its passes were shared by"
        f" {number(speed.rows, '.1f')} rows on average (both lanes and any other users'), so the unit is a 1-token target"
        f" pass over as many rows, measured as the pair loaded: the same c and r as `bench` measures for one row alone."
        f" Acceptance by draft position: {positions}; {number(speed.tokens_per_pass, '.2f')} tokens"
        f" per target pass. Leviathan et al.'s formula with these costs predicts {number(speed.predicted, '.2f')}×"
        f" target-only's speed; this run measured {number(speed.measured, '.2f')}× ({verdict}). Where checking"
        f" {width} tokens costs one pass (a GPU), the same acceptance would give {number(speed.gpu_like, '.2f')}×.",
        class_="speed",
    )
