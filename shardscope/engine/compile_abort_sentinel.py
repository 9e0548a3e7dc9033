"""The sentinel process's program: what XLA wrote before it aborted shardscope, and one line
saying so, once nothing is left of shardscope to say it.

Run by path with ``python -I -S`` (:mod:`shardscope.engine.compile_abort` starts it): it imports
the standard library alone, so that it starts in milliseconds and loads nothing of shardscope.
Descriptor 2 is the stderr shardscope started with; the descriptor its one argument names is its
end of a ``SOCK_SEQPACKET`` socket pair, whose other end only shardscope holds. One message per
packet, a word and its arguments:

- ``open ID\\nWHAT``, with a descriptor: the read end of a capture's pipe (descriptor 2 points
  at its write end while the capture lasts), opened while shardscope was ``WHAT``
  (``compiling step of train.py``). The sentinel never reads it while shardscope lives: the
  capture's own reader does.
- ``shut ID``: the capture ended, its reader read the pipe to its end; its copy is closed.
- ``fatal ID\\nLINE``: the capture's reader is passing on a FATAL log line (XLA's last: the
  process aborts after it); ``shown ID``: it was passed on.
- ``screen ESCAPES\\nSETTINGS``: a full-screen app holds the terminal (the explorer):
  ``ESCAPES`` give it back, and ``SETTINGS`` are the terminal's before the app changed them
  (``repr`` of ``termios.tcgetattr``'s list, or ``None``). ``screen`` alone: the app gave it back.

End of file on the socket is shardscope's end. When shardscope ended normally, or was
interrupted, no FATAL line is known and the sentinel leaves without a word. When one is (passed
on but not said to be shown, or still unread in an open capture's pipe, where a reader that
died with the process left it), the sentinel gives the terminal back, writes XLA's lines that
did not reach it, and its own line.
"""

from __future__ import annotations

import array
import ast
import fcntl
import os
import re
import socket
import sys
import termios
from typing import Any

FATAL_LINE = re.compile(rb"^F\d{4} [\d:.]+\s+\d+ [\w.+-]+:\d+\] ", re.MULTILINE)
"""A FATAL C++ log line's start (glog's prefix: ``F1207 22:28:18.141871   26994 hlo_instruction.cc:1615] ``)."""


UNREAD_LIMIT = 1 << 20
"""The most bytes read from a pipe after shardscope ended: a pipe holds 64 KiB, XLA's stack trace a few."""


class Capture:
    """One capture's pipe, as the sentinel holds it."""

    def __init__(self, read_end: int, doing: str) -> None:
        self.read_end, self.doing = read_end, doing
        self.fatal: list[bytes] = []  # the FATAL lines its reader passed on, or was about to
        self.shown = 0  # how many of them it said it passed on

    def passing(self, line: bytes) -> None:
        """Its reader is passing on ``line``, or the start of it so far (a long line read in parts)."""
        if len(self.fatal) > self.shown and line.startswith(self.fatal[-1]):
            self.fatal[-1] = line
        else:
            self.fatal.append(line)

    def unread(self) -> bytes:
        """What the pipe still holds (its reader died before it read it), up to :data:`UNREAD_LIMIT`
        (a child process that inherited descriptor 2 may still write). Never blocks, and changes
        no flag of the pipe, which it shares with shardscope's reader."""
        data = b""
        count = array.array("i", [0])
        while len(data) < UNREAD_LIMIT:
            fcntl.ioctl(self.read_end, termios.FIONREAD, count, True)
            if count[0] <= 0:
                break
            data += os.read(self.read_end, min(count[0], UNREAD_LIMIT - len(data)))
        return data

    def last_words(self, screen: bool) -> bytes:
        """XLA's lines that did not reach the terminal: the FATAL lines its reader was passing on
        but did not say it had (every one, when an app's ``screen`` showed them: it is gone), and
        the pipe's unread bytes from the first FATAL line (all of them after a FATAL line the
        reader passed on: the rest of it, the stack trace after it)."""
        unread = self.unread()
        if self.fatal:
            return b"".join(self.fatal[0 if screen else self.shown:]) + unread
        start = FATAL_LINE.search(unread)
        return b"" if start is None else unread[start.start():]


def watch(control: socket.socket) -> tuple[dict[int, Capture], bytes, list[Any] | None]:
    """Read shardscope's messages until it ends: the captures still open then, the escapes that
    give the terminal back (empty: no app holds it) and the terminal's settings before the app."""
    captures: dict[int, Capture] = {}
    screen, settings = b"", None
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 65536, 1)
        except OSError:
            break
        if not message:
            break
        word, _, rest = message.partition(b" ")
        ident, _, text = rest.partition(b"\n")  # for "screen": the escapes and the settings
        if word == b"open" and fds:
            captures[int(ident)] = Capture(fds[0], text.decode("utf-8", "replace"))
            continue
        for fd in fds:
            os.close(fd)
        if word == b"shut" and int(ident) in captures:
            os.close(captures.pop(int(ident)).read_end)
        elif word == b"fatal" and int(ident) in captures:
            captures[int(ident)].passing(text)
        elif word == b"shown" and int(ident) in captures:
            captures[int(ident)].shown = len(captures[int(ident)].fatal)
        elif word == b"screen":
            screen, settings = ident, _settings(text)
    return captures, screen, settings


def _settings(text: bytes) -> list[Any] | None:
    """A terminal's settings as shardscope wrote them (``repr`` of ``termios.tcgetattr``'s list)."""
    try:
        settings = ast.literal_eval(text.decode())
    except (ValueError, SyntaxError, UnicodeDecodeError):
        return None
    return settings if isinstance(settings, list) else None


def explanation(doing: str) -> bytes:
    """shardscope's line under XLA's."""
    during = f" while {doing}" if doing else ""
    return (f"shardscope: XLA aborted the process{during}: the FATAL line above is a failure inside the "
            f"compiler, not an error in your program. Report it to JAX (https://github.com/jax-ml/jax/issues) "
            f"with that line and your program.\n").encode()


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    captures, screen, settings = watch(control)
    last = [(capture, capture.last_words(bool(screen))) for capture in captures.values()]
    aborted = [(capture, words) for capture, words in last if capture.fatal or words]
    if not aborted:
        return
    if screen and settings is not None:
        try:
            termios.tcsetattr(2, termios.TCSADRAIN, settings)
        except (termios.error, OSError):
            pass
    words = b"".join(said if said.endswith(b"\n") or not said else said + b"\n" for _, said in aborted)
    doing = next((capture.doing for capture, _ in reversed(aborted) if capture.doing), "")
    _write(screen + words + explanation(doing))  # one write: nothing comes between its lines


def _write(data: bytes) -> None:
    try:
        while data:
            data = data[os.write(2, data):]
    except OSError:  # the terminal is gone: nobody to tell
        pass


if __name__ == "__main__":
    main()
