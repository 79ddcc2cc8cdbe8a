"""One sampling protocol for a comparison: every method of an `eval`, `study` or `sweep` decodes at the same temperature
and top-p, its own sampling settings included (SpecGuard's candidates, SMC-SD's particles), so that a difference in
accuracy is the methods', not the temperature's.

Greedy where every method can; where one cannot (SMC-SD samples whatever the temperature), every method samples, at
the run's temperature if it gave one, else at `SAMPLED` (0.7: the temperature SMC-SD's authors and the EASD paper's
sampled runs use), within the run's top-p. A method's own temperature set apart from the protocol is refused, naming
its flag, rather than overridden unsaid.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import SettingsError
from ...method.methods import METHODS, own_knobs, settings_values
from ...method.settings import DecodeSettings

SAMPLED = 0.7  # where a method cannot decode greedily: SMC-SD's authors' temperature, the EASD paper's sampled runs'


@dataclass(frozen=True)
class Protocol:
    """How every method of a comparison decodes."""

    temperature: float  # 0: greedy
    top_p: float
    why: str  # in words: why this one

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def line(self) -> str:
        how = "greedy" if self.greedy else f"sampled at temperature {self.temperature:g}, top-p {self.top_p:g}"
        return f"sampling protocol: every method {how} ({self.why})"

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "why": self.why}

    @classmethod
    def of_config(cls, config: dict) -> Protocol:
        """The protocol an output folder's run.json records; for a folder from before it was recorded, its settings'."""
        saved = config.get("protocol")
        if isinstance(saved, dict) and {"temperature", "top_p", "why"} <= set(saved):
            return cls(float(saved["temperature"]), float(saved["top_p"]), str(saved["why"]))
        settings = config.get("settings", {})
        temperature, top_p = float(settings.get("temperature", 0)), float(settings.get("top_p", 1))
        return cls(temperature, top_p, "as the run's settings say; a folder from before the protocol was recorded")


def protocol_for(methods: list[str], base: DecodeSettings) -> Protocol:
    """The protocol for a comparison of `methods` under the run's settings `base`."""
    samplers = [METHODS[name].title for name in dict.fromkeys(methods) if not METHODS[name].greedy_form]
    if base.temperature > 0:
        return Protocol(base.temperature, base.top_p, "the run's temperature")
    if not samplers:
        return Protocol(0.0, base.top_p, "every method has a greedy form")
    return Protocol(SAMPLED, base.top_p, f"{', '.join(samplers)} has no greedy form, so every method samples alike")


def under(protocol: Protocol, settings: DecodeSettings) -> DecodeSettings:
    """`settings` decoding under `protocol`, its method's own sampling settings included; SettingsError naming the flag
    of an own temperature or nucleus the user set apart from it, or of the run's top-p where the method cannot take it."""
    method = METHODS[settings.method]
    try:
        placed = method.at_sampling(settings, protocol.temperature, protocol.top_p)
    except ValueError as err:
        raise SettingsError("top_p" if protocol.temperature else "temperature", f"{err} ({protocol.line()})") from None
    given, defaults, now = settings_values(settings), settings_values(DecodeSettings()), settings_values(placed)
    for name in own_knobs(method):
        if given[name] != now[name] and given[name] != defaults[name]:  # the user's own value, which the protocol changed
            raise SettingsError(name, f"is set apart from the comparison's one protocol ({protocol.line()}): drop it")
    return placed
