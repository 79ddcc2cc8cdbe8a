"""Live figures under each lane, and the comparison line once both runs have ended."""

from __future__ import annotations

from easd.core.trace import Trace


def stats_markdown(trace: Trace | None) -> str:
    if trace is None:
        return ""
    s = trace.summary()
    parts = [
        f"**{s['new_tokens']}** tokens",
        f"**{_fmt(s['tokens_per_s'], '.1f')}** tokens/s",
        f"acceptance **{_fmt(s['acceptance_rate'], '.2f')}**",
        f"accepted/block **{_fmt(s['mean_accepted_length'], '.2f')}**",
        f"target calls **{_fmt(s['target_calls'], 'd')}**",
        f"penalties **{s['penalized']}**",
    ]
    if s["stop_reason"]:
        parts.append(f"stop: {s['stop_reason']}")
    return " · ".join(parts)


def comparison_markdown(sd: Trace | None, easd: Trace | None, fork: int | None) -> str:
    """One line: where EASD changed the text, how often it intervened, and what it cost in speed."""
    if sd is None or easd is None or not sd.records or not easd.records:
        return ""
    a, b = sd.summary(), easd.summary()
    if fork is None:
        change = "EASD's text is identical to SD's"
    else:
        change = f"the texts fork at token {fork}"
        if b["first_penalty_position"] is not None:
            change += f" (EASD's first penalty is at token {b['first_penalty_position']})"
    rate = f"{b['penalized']} penalties ({100 * (b['penalized_rate'] or 0):.1f}% of EASD's tokens)"
    speed = ""
    if a["tokens_per_s"] and b["tokens_per_s"]:
        speed = f"; EASD ran at {b['tokens_per_s'] / a['tokens_per_s']:.2f}× SD's tokens/s"
    acceptance = f"; acceptance {_fmt(b['acceptance_rate'], '.2f')} vs SD's {_fmt(a['acceptance_rate'], '.2f')}"
    return f"**Comparison:** {change}; {rate}{speed}{acceptance}."


def _fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)
