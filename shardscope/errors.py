"""The one exception type a user can cause, with a message and a hint on what to do next."""

from __future__ import annotations


class ShardscopeError(Exception):
    """An error the user can fix: a bad file, bad settings, a model that does not trace.

    ``message`` says what went wrong in one sentence; ``hint`` says what to do next.
    The CLI prints both and exits with status 2; the app shows them in an error panel.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


class DemoFileError(ShardscopeError):
    """The demo file is missing, does not import, or has no demo in it."""


class SettingsError(ShardscopeError):
    """The settings do not fit the demo (unknown function, chunk size, device count)."""


class TraceError(ShardscopeError):
    """The model fails to trace (or compile) under ``jax.shard_map``."""


class Cancelled(Exception):
    """Raised from a progress callback to stop an analysis that is no longer wanted."""
