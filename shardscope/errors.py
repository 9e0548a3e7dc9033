"""The one exception type a user can cause, with a message and a hint on what to do next."""

from __future__ import annotations

import stat
import sys
import traceback


FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (a named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
"""What a path that is no regular file is, in a message's words, by the test of its ``st_mode``
(every message that refuses one says it so: a source file, an export, a dump, a profile's file)."""


def file_kind(mode: int, otherwise: str = "not a regular file") -> str:
    """``a FIFO (a named pipe)``, ``a character device``: what the file of ``mode`` is (a
    ``lstat``'s mode tells a symbolic link, a ``stat``'s what it points to), ``otherwise`` for a
    regular file or a kind not in :data:`FILE_KINDS`."""
    return next((words for is_kind, words in FILE_KINDS if is_kind(mode)), otherwise)


class ShardscopeError(Exception):
    """An error the user can fix: a bad file, bad settings, a model that does not trace.

    ``message`` says what went wrong in one sentence; ``hint`` says what to do next.
    The CLI prints both and exits with :attr:`exit_status`; the app shows them in an error panel.
    """

    exit_status = 2
    """The CLI's exit status for this error: 2, a mistake the user can fix."""

    def __init__(self, message: str, hint: str | None = None, *, line: "tuple[str, int] | None" = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.line = line
        """The user's line the error is about, ``(file, line number)``, when it is one line."""

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


class DemoFileError(ShardscopeError):
    """The demo file is missing, does not import, or has no demo in it."""


class LayoutsFileError(DemoFileError):
    """The file marks only ``@shardscope.layouts`` functions (``functions``, by name): ``shardscope
    layouts`` and the explorer's Layouts tab read it, no other command."""

    def __init__(self, message: str, hint: str | None, functions: tuple[str, ...]) -> None:
        super().__init__(message, hint)
        self.functions = functions


class SettingsError(ShardscopeError):
    """The settings do not fit the demo (unknown function, chunk size, device count)."""


class TraceError(ShardscopeError):
    """The model fails to trace (or compile) under ``jax.shard_map``."""


class TargetError(ShardscopeError):
    """A target cannot be compiled for: libtpu is missing, does not know the topology, or XLA fails."""


class ChipError(TargetError, ValueError):
    """A chip shardscope does not know by that name (:func:`shardscope.estimate_module`'s ``chip``), or
    a GPU description file that cannot be read: a ``ValueError`` too."""


class HloTextError(ShardscopeError, ValueError):
    """A module's text that is not one shardscope can read (``check --xla-dump``'s file,
    :func:`shardscope.estimate_module`'s text): where it is broken and how. A ``ValueError``
    too, as a bad value handed to a function is; ``line`` is ``(where the text came from, line
    number)`` when one line is to blame."""


class ArgumentTypeError(ShardscopeError, TypeError):
    """A public function was handed a value of the wrong type (a chip given as a number, a module
    as bytes): a ``TypeError`` too, as Python's own would be, with what to pass instead."""


class Cancelled(Exception):
    """Raised from a progress callback to stop an analysis that is no longer wanted."""


QUOTED_LINES = 6
"""How many lines of JAX's own message a :class:`TraceError` quotes (``--debug`` shows all)."""
LINE_LIMIT = 1_000
"""A quoted line longer than this keeps its first :data:`_HEAD` and last :data:`_TAIL` characters.
JAX's messages end in what to act on (``Got input type: float32[32@data,32@model] and reduced
spec: ...``): a cut at the end would drop it; a long line is a repr in the middle (an array's
values, a jaxpr), which is what is left out."""
_HEAD, _TAIL = 600, 300
_INTERNAL_MARKERS = ("jax/_src/", "site-packages/jax", "JAX_TRACEBACK_FILTERING", "-" * 20)


def quote_error(exc: BaseException, lines: int = QUOTED_LINES) -> str:
    """``TypeError: <first line>`` and the next non-blank lines of ``exc``'s message, indented.

    JAX's errors put what to act on after the first line (the carry-type error's first line ends
    in "but they differ:"), so a few lines are kept. Lines that point into JAX's own source
    (internal frames) are dropped, a line longer than :data:`LINE_LIMIT` loses its middle (never
    its end, which names the types and shapes), and what is left out is counted.
    """
    kept = [
        line.rstrip()
        for line in str(exc).splitlines()
        if line.strip() and not any(marker in line for marker in _INTERNAL_MARKERS)
    ]
    if not kept:
        return type(exc).__name__
    text = f"{type(exc).__name__}: {_cut(kept[0].strip())}"
    text += "".join(f"\n  {_cut(line)}" for line in kept[1:lines])
    if len(kept) > lines:
        text += f"\n  ... {len(kept) - lines} more line(s): --debug shows the whole error"
    return text


def _cut(line: str) -> str:
    """``line``, or its start and end with the number of characters left out between them."""
    if len(line) <= LINE_LIMIT:
        return line
    return f"{line[:_HEAD]} ... ({len(line) - _HEAD - _TAIL:,} characters left out) ... {line[-_TAIL:]}"


def report_error(exc: ShardscopeError, debug: bool) -> None:
    """:func:`print_error`, or with ``debug`` (``--debug``) the traceback of ``exc`` and what caused it."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    else:
        print_error(exc)


def print_error(exc: ShardscopeError) -> None:
    """``shardscope: error: MESSAGE`` and ``hint: HINT`` on stderr: how the CLI reports a mistake."""
    print(f"shardscope: error: {exc.message}", file=sys.stderr)
    if exc.hint:
        print(f"hint: {exc.hint}", file=sys.stderr)
