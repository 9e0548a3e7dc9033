"""File descriptor 2 pointed elsewhere around a call: what native code writes there.

XLA's C++ logging (the partitioner's lines), JAX's CUDA plugin while its libraries load, and
XProf's profile converter write to file descriptor 2 directly: Python's ``sys.stderr`` never sees
those bytes, and no Python setting keeps them off the terminal. Pointing the descriptor itself at
a file or a pipe for the call does.

A process has one descriptor 2, so redirects take turns: one thread's redirect inside another's
would put back the wrong descriptor when they end out of order. The turns are re-entrant: a
redirect inside another on the same thread ends first and puts back the outer one's.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

_TURNS = threading.RLock()

_terminal: list[int] = []
"""The descriptors saved by the redirects in force, outermost first: the first is the terminal's."""


def terminal_stderr() -> int:
    """The descriptor of the stderr the process started with, while a redirect holds descriptor 2
    (an interrupt's message must reach the terminal, not the scratch file), else 2."""
    return _terminal[0] if _terminal else 2


@contextmanager
def stderr_into(sink: int, then: Callable[[], None] | None = None) -> Iterator[int]:
    """Descriptor 2 pointed at ``sink`` (a file's or a pipe's descriptor, which stays the
    caller's) for the body; yields a descriptor of the stderr it replaced, to pass bytes on.
    ``sys.stderr`` is flushed at both ends, so Python's own writes land where they were meant to.
    ``then`` runs once descriptor 2 is back and before that copy closes: a pipe's reader, whose
    end of file comes when descriptor 2 lets go of the pipe, finishes its writes there."""
    with _TURNS:
        sys.stderr.flush()
        saved = os.dup(2)
        _terminal.append(saved)
        try:
            os.dup2(sink, 2)
            try:
                yield saved
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                if then is not None:
                    then()
        finally:
            _terminal.remove(saved)
            os.close(saved)


@contextmanager
def stderr_caught() -> Iterator[list[str]]:
    """Descriptor 2 into a scratch file for the body; yields the list that receives the lines
    written there meanwhile, when the body ends. None of them reaches the terminal: the caller
    writes back what it keeps."""
    lines: list[str] = []
    with tempfile.TemporaryFile() as caught:
        try:
            with stderr_into(caught.fileno()):
                yield lines
        finally:
            caught.seek(0)
            lines.extend(caught.read().decode(errors="replace").splitlines(keepends=True))
