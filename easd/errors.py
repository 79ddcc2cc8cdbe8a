"""Errors a user can act on.

Every error the engine raises on purpose derives from `EasdError`; its message says what is
wrong and how to fix it, in one line. The CLI prints it and exits with status 2; the app shows it
in the page. Anything else is a bug.
"""


class EasdError(Exception):
    """A problem with the user's input, files or environment, explained in one line."""


class SettingsError(EasdError):
    """A setting is out of range. `flag` names the command-line flag it came from."""

    def __init__(self, flag: str, message: str):
        super().__init__(f"{flag}: {message}")
        self.flag = flag


class ModelLoadError(EasdError):
    """A model or tokenizer could not be loaded, or the two models cannot be paired."""
