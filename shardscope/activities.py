"""What each thread is doing (``importing demo.py``), for the message of an interrupt that lands
meanwhile: the layers below the commands say it, :mod:`shardscope.distributed.interrupts` and the
app read it. A value of the process, with no dependency of its own."""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()

_activities: dict[int, list[tuple[str, str | None]]] = {}  # thread id -> what it is doing, innermost last


@contextmanager
def activity(what: str, code_file: str | None = None) -> Iterator[None]:
    """Say what this thread is doing while the block runs (``importing demo.py``), for the message
    of an interrupt that lands meanwhile; ``code_file`` is the file whose line it is at then."""
    ident = threading.get_ident()
    with _lock:
        _activities.setdefault(ident, []).append((what, code_file))
    try:
        yield
    finally:
        with _lock:
            stack = _activities[ident]
            stack.pop()
            if not stack:
                del _activities[ident]


def current_activity() -> str | None:
    """``importing demo.py, at line 3``: what a thread was last said to be doing (None: nothing)."""
    with _lock:
        doing = [(ident, stack[-1]) for ident, stack in _activities.items() if stack]
    if not doing:
        return None
    ident, (what, code_file) = doing[-1]
    line = _line_in(ident, code_file) if code_file else None
    return what + (f", at line {line}" if line is not None else "")


def _line_in(ident: int, code_file: str) -> int | None:
    """The line of ``code_file`` the thread ``ident`` is at (its innermost frame in that file)."""
    frame = sys._current_frames().get(ident)
    while frame is not None:
        if frame.f_code.co_filename == code_file:
            return frame.f_lineno
        frame = frame.f_back
    return None
