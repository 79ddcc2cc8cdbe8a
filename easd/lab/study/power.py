"""How many problems it would take: the smallest difference a study's problems could detect and the problems a gain
would need (McNemar's test, Connor's approximation), as figures and in the report's words."""

from __future__ import annotations

from ...method.references import SPEED_REFERENCE
from ..reports.stats import detectable_difference, mcnemar_problems
from .plan import counted

DAY = 24 * 3600


def power(paired: dict, speed: list[dict], effect: float) -> dict:
    """How many problems it would take: the smallest difference this study's problems could have detected, and the
    problems needed to detect a gain of `effect` points, at 80% power and α = 0.05, two-sided, paired, from the share
    of problems where the two methods disagreed (easd.lab.reports.stats: McNemar's test, Connor's normal approximation); and
    what those problems cost on this machine, at the speed the study timed (SD and the method, one row at a time)."""
    pairs = paired.get("pairs") or 0
    discordant = (paired["only_a"] + paired["only_b"]) / pairs if pairs else 0.0
    seconds = [row["seconds_per_problem"] for row in speed if row["method"] != SPEED_REFERENCE]
    per_problem = sum(seconds) if len(seconds) == 2 and all(seconds) else None  # SD and the method both timed
    needed = mcnemar_problems(discordant, effect / 100)
    return {
        "alpha": 0.05,
        "power": 0.8,
        "how": "paired power calculation from the discordant proportion",
        "pairs": pairs,
        "discordant": discordant,
        "detectable": detectable_difference(discordant, pairs),
        "effect": effect,
        "needed": needed,
        "seconds_per_problem": per_problem,
        "per_day": int(DAY / per_problem) if per_problem else None,
        "days": needed * per_problem / DAY if needed and per_problem else None,
    }


def power_words(study: dict) -> list[str]:
    """What `power` found, in the sentences the verdict ends with: what this study could detect, and what detecting
    `--effect` would take."""
    power, title = study["power"], study["method"]["title"]
    if not power["pairs"]:
        return []
    if not power["discordant"]:
        return [
            f"SD and {title} were right on the same problems, so what a difference would take rests on how often they "
            "would part, which must be assumed: this study does not extrapolate"
        ]
    said = []
    if power["detectable"] is None:
        said.append("it had too few problems to detect even a difference on every problem where they parted")
    else:
        said.append(f"it could have detected ±{100 * power['detectable']:.1f} points")
    effect = power["effect"]
    if power["needed"] is None:
        said.append(
            f"a gain of {effect:g} points is more than the {100 * power['discordant']:.1f}% of problems where they parted allows"
        )
    else:
        cost = ""
        if power["days"] is not None:
            hours = power["days"] * 24
            cost = (
                f" (~{power['days']:.1f} days on this machine)" if power["days"] > 1 else f" (~{hours:.1f} hours on this machine)"
            )
        said.append(f"detecting {effect:+g} points would take ~{power['needed']:,} problems{cost}")
    return said


def power_lines(study: dict) -> list[str]:
    """The report's section on how many problems it would take, in lines (markdown and HTML alike)."""
    power, title = study["power"], study["method"]["title"]
    p = study["paired"]
    if not power["pairs"]:
        return ["No problem has been decoded by both SD and the method yet."]
    lines = [
        f"Of the {counted(power['pairs'], 'problem')} both ran, one of the two was right and the other wrong on "
        f"{100 * power['discordant']:.1f}% (only {title} right on {p['only_a']}, only SD on {p['only_b']}): the "
        "discordant share ψ."
    ]
    if not power["discordant"]:
        lines.append(
            "They were right on the same problems, so no difference could show, and the problems a difference would "
            "need rest on a discordance that must be assumed: this study does not extrapolate."
        )
        return lines
    detectable, at = power["detectable"], "At 80% power and α = 0.05 (two-sided, paired)"
    lines.append(
        f"{at}, the smallest difference this study could have detected is ±{100 * detectable:.1f} points."
        if detectable is not None
        else f"{at}, it could detect no difference: too few problems even for one where every discordant problem goes one way."
    )
    effect = power["effect"]
    if power["needed"] is None:
        lines.append(
            f"A gain of {effect:g} points (--effect) needs a discordant share of at least {effect:g}%: at the share seen "
            "there is no such gain to detect."
        )
    else:
        lines.append(f"Detecting a gain of {effect:g} points (--effect) would take ~{power['needed']:,} problems.")
        if power["per_day"]:
            when = (
                f"more than this machine decodes in a day: ~{power['days']:.1f} days"
                if power["needed"] > power["per_day"]
                else f"~{24 * power['days']:.1f} hours"
            )
            lines.append(
                f"At the speed timed here (SD and {title}, one row at a time: {power['seconds_per_problem']:.1f} s a "
                f"problem, ~{power['per_day']:,} problems a day), that is {when}; decoding in batches is faster."
            )
    lines.append(
        "How: a paired power calculation from the discordant proportion (McNemar's test, normal approximation; "
        "Connor 1987): n = [z₀.₉₇₅ √ψ + z₀.₈ √(ψ − δ²)]² / δ², ψ the discordant share, δ the difference in "
        "accuracy; the smallest detectable difference solves it for δ at this study's n. It assumes the discordant "
        "share seen here holds on more problems."
    )
    return lines
