"""What the user reads when XLA aborts the process in the middle of a compile.

XLA's fatal checks (``LOG(FATAL)``, a failed ``CHECK``) write one line to descriptor 2 and call
``abort()``. While shardscope compiles, descriptor 2 is a capture's pipe
(:mod:`shardscope.engine.compile_log`), whose reader is a thread of the dying process: the line
can die in the pipe with it, and nothing in the process runs after ``abort()`` to say what
happened. So one small process per shardscope process, the sentinel
(:mod:`shardscope.engine.compile_abort_sentinel`), holds a copy of each capture's read end
without reading it, and, once shardscope is gone, writes the FATAL line left unread and one line
naming what was being compiled (:func:`naming_compiles`). It learns of each capture over a
socket pair (:func:`watched`; the descriptor goes over the socket with ``socket.send_fds``): one
process started once, rather than one per compile, costs a compile two messages.

The sentinel holds no write end of any pipe (a reader would never see its end), reads no byte
while shardscope lives (the capture's reader owns them), and ends with shardscope: the end of
file on its socket, which only this process holds, is shardscope's end, however it came.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import termios
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from shardscope.native_stderr import terminal_stderr

_SENTINEL = Path(__file__).with_name("compile_abort_sentinel.py")


class _Sentinel:
    """This process's end of the socket to its sentinel, started at the first capture."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None  # held, never waited for: it outlives this process
        self._failed = False
        self._ids = itertools.count(1)

    def control(self) -> socket.socket | None:
        """The socket to the sentinel, started now if it is not yet; None where it cannot start."""
        if self._control is not None or self._failed:
            return self._control
        with self._lock:
            if self._control is None and not self._failed:
                self._control = self._start()
                self._failed = self._control is None
        return self._control

    def _start(self) -> socket.socket | None:
        if not sys.executable:
            return None
        try:  # macOS has no SOCK_SEQPACKET for Unix sockets: compiles go on without a sentinel there
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except (OSError, AttributeError):
            return None
        try:
            # its own session: a Ctrl+C or a hang-up meant for shardscope's process group is not its
            # own; descriptor 2 is the terminal's even while a redirect holds this process's
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_SENTINEL), str(theirs.fileno())], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=terminal_stderr(), pass_fds=(theirs.fileno(),), close_fds=True,
                start_new_session=True)
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        return ours

    def send(self, message: bytes, fds: tuple[int, ...] = ()) -> None:
        """``message`` (with ``fds``) to the sentinel, if it runs."""
        control = self.control()
        if control is None:
            return
        try:
            if fds:
                socket.send_fds(control, [message], list(fds))
            else:
                control.send(message)
        except OSError:  # the sentinel is gone: captures go on without it
            pass

    def next_id(self) -> int:
        """A number for a new capture, this process's own."""
        return next(self._ids)

    def forget(self) -> None:
        """In a child forked from this process: the socket is the parent's (the sentinel must see
        its end when the parent ends), and no sentinel watches the child."""
        if self._control is not None:
            self._control.close()
        self._control, self._process, self._failed = None, None, True


_SENTINEL_PROCESS = _Sentinel()
os.register_at_fork(after_in_child=_SENTINEL_PROCESS.forget)


_names: list[str] = []
_names_lock = threading.Lock()


@contextmanager
def naming_compiles(what: str) -> Iterator[None]:
    """The compiles the body runs are of ``what``: a file, then a program in it (nested), which
    the sentinel's line names (``compiling step of train.py``) if XLA aborts one of them."""
    with _names_lock:
        _names.append(what)
    try:
        yield
    finally:
        with _names_lock:
            _names.reverse()
            _names.remove(what)
            _names.reverse()


def compiles_now() -> str:
    """What the compiles under way are of: ``step of train.py`` (empty when nothing names them)."""
    with _names_lock:
        return " of ".join(reversed(_names))


class Watched:
    """A capture's pipe, known to the sentinel while the capture lasts."""

    def __init__(self, ident: int) -> None:
        self._ident = ident

    def passing_fatal(self, line: bytes) -> None:
        """The capture's reader is about to pass on a FATAL log line (the process aborts after it)."""
        _SENTINEL_PROCESS.send(b"fatal %d\n" % self._ident + line)

    def passed_fatal(self) -> None:
        """It has passed it on."""
        _SENTINEL_PROCESS.send(b"shown %d" % self._ident)


@contextmanager
def watched(read_end: int, doing: str = "") -> Iterator[Watched]:
    """The pipe ``read_end`` reads, held by the sentinel while the body runs, while shardscope is
    ``doing`` something (``starting libtpu``; default: compiling what :func:`compiles_now` names).
    The body must have read the pipe to its end when it ends: the sentinel closes its copy then."""
    ident = _SENTINEL_PROCESS.next_id()
    what = doing or f"compiling {compiles_now()}".rstrip()
    # a file name that is not UTF-8 (a Latin-1 name, surrogate-escaped by Python) goes as its own bytes
    _SENTINEL_PROCESS.send(b"open %d\n" % ident + what.encode("utf-8", "surrogateescape"), (read_end,))
    try:
        yield Watched(ident)
    finally:
        _SENTINEL_PROCESS.send(b"shut %d" % ident)


@contextmanager
def giving_back_the_terminal(escapes: str) -> Iterator[None]:
    """A full-screen app holds the terminal while the body runs: should XLA abort the process
    meanwhile, the sentinel puts back the terminal's settings as they are now (the app's driver
    changes those of descriptor 0) and writes ``escapes`` (the main screen, the cursor), before
    XLA's line and its own."""
    _SENTINEL_PROCESS.send(b"screen %s\n%r" % (escapes.encode(), _terminal_settings()))
    try:
        yield
    finally:
        _SENTINEL_PROCESS.send(b"screen")


def _terminal_settings() -> list[Any] | None:
    """The settings of the terminal on descriptor 0, where it is the one on descriptor 2 too
    (the sentinel's, which it writes on); else None."""
    try:
        if not os.isatty(0) or not os.path.samestat(os.fstat(0), os.fstat(2)):
            return None
        return termios.tcgetattr(0)
    except (OSError, termios.error):
        return None
