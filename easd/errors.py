"""Errors a user can act on.

Every error the engine raises on purpose derives from `EasdError`; its message says what is
wrong and how to fix it, in one line. The CLI prints it and exits with status 2; the app shows it
in the page. Anything else is a bug.
"""

from __future__ import annotations

from dataclasses import dataclass

SHOWN_CHARS = 40  # a bad value quoted in an error is cut to about this: a pasted megabyte must still be one line


def shown(value) -> str:
    """A bad value as an error message quotes it: its repr, cut short enough for one line."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "…"


class EasdError(Exception):
    """A problem with the user's input, files or environment, explained in one line."""


@dataclass(frozen=True)
class Fix:
    """A value of a refused setting that answers the refusal, and what running with it does, in a user's words
    ("check each step by confidence alone"): the page offers it as a button beside the message."""

    value: object
    does: str


class SettingsError(EasdError):
    """A setting is out of range. `setting` is its name (a DecodeSettings field such as "tau_o", or
    "prompt"; a leading "--" is dropped), `message` what is wrong with it.

    Each interface names the setting in its own words: the CLI by its flag (`--tau-o: must be …`,
    which is also `str(err)`, the form logs and the command line print), the web page by the
    slider's label (`τ_O: must be …`), the API by its parameter name (`tau_o: must be …`).
    """

    def __init__(self, setting: str, message: str, fix: Fix | None = None):
        self.setting = setting.removeprefix("--").replace("-", "_")
        self.message = message
        self.fix = fix
        super().__init__(f"{self.flag}: {message}")

    @property
    def flag(self) -> str:
        """The command-line flag of the setting, e.g. tau_o → --tau-o."""
        return "--" + self.setting.replace("_", "-")


class ModelLoadError(EasdError):
    """A model or tokenizer could not be loaded, or the two models cannot be paired."""


class Busy(EasdError):
    """A request refused because its client, its address or the pair's line already holds as many as it may."""


class QuotaSpent(EasdError):
    """The user a GPU call was charged to has no GPU time left (a ZeroGPU Space's daily quota): their run ends with
    this line, and the others sharing the batch go on in calls charged to someone else."""
