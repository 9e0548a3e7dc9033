"""What each thread is doing (``importing demo.py``), for the message of an interrupt that lands
meanwhile, and the temporary folders it is making (a profile's trace, a bucket's files fetched),
for the interrupt to remove: the layers below the commands say it,
:mod:`shardscope.distributed.interrupts` and the app read it. A value of the process, with no
dependency of its own."""

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


_folders: set[str] = set()


@contextmanager
def temporary_folder(path: str) -> Iterator[str]:
    """Mark the folder ``path`` (and what is in it) as this process's to remove on an interrupt
    while the block runs: a profile's trace, a bucket's files fetched, a converter's scratch."""
    with _lock:
        _folders.add(path)
    try:
        yield path
    finally:
        with _lock:
            _folders.discard(path)


def temporary_folders() -> list[str]:
    """The temporary folders being made now (an interrupt removes them)."""
    with _lock:
        return list(_folders)
