"""The log lines XLA's partitioner prints while a module compiles, kept from the terminal (and
XLA:GPU's scheduler's error when a module's arguments exceed its memory limit: a finding, not a
raw line).

XLA's C++ logging writes to file descriptor 2 (``spmd_partitioner.cc``'s "Involuntary full
rematerialization"): Python's ``sys.stderr`` never sees it, so :func:`capturing_stderr` points
descriptor 2 at a pipe for the compile (:mod:`shardscope.native_stderr`, whose redirects take
turns: descriptor 2 is the process's) and keeps the partitioner's lines; every other byte goes on
to the real descriptor 2 as it comes (the user's own output, and the explorer's screen, which
Textual draws on stderr while a worker thread compiles).
"""

from __future__ import annotations

import os
import re
import threading
from contextlib import contextmanager
from typing import Iterator

from shardscope.native_stderr import stderr_into

_PARTITIONER_LINE = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ (?P<file>[\w.]+):\d+\] (?P<message>.*)$")
_PARTITIONER_FILES = ("spmd_partitioner", "sharding_propagation", "shardy", "sdy_")
_LIMIT_FILES = ("gpu_hlo_schedule",)
"""XLA:GPU's scheduler, which logs an error when a module's arguments and outputs exceed its
memory limit ("The byte size of input/output arguments (...) exceeds the base limit (...)")."""

LIMIT_MARK = "[compiler limit] "
"""What a kept limit line's message starts with among the captured messages (told apart from
the partitioner's by :func:`limit_messages` and :func:`partitioner_only`)."""


def partitioner_message(line: str) -> str | None:
    """The message of one of the partitioner's log lines (``W1204 ... spmd_partitioner.cc:656]
    [SPMD] ...``), None for any other line."""
    match = _PARTITIONER_LINE.match(line.rstrip("\n"))
    if match is None or not match.group("file").startswith(_PARTITIONER_FILES):
        return None
    return match.group("message")


def kept_message(line: str) -> str | None:
    """The message of a log line kept from the terminal: the partitioner's, or one of the
    compiler's limit errors (marked with :data:`LIMIT_MARK`); None for any other line."""
    message = partitioner_message(line)
    if message is not None:
        return message
    match = _PARTITIONER_LINE.match(line.rstrip("\n"))
    if match is not None and match.group("file").startswith(_LIMIT_FILES):
        return LIMIT_MARK + match.group("message")
    return None


def partitioner_only(messages: tuple[str, ...]) -> tuple[str, ...]:
    """The partitioner's among kept ``messages``."""
    return tuple(m for m in messages if not m.startswith(LIMIT_MARK))


def limit_messages(messages: tuple[str, ...]) -> tuple[str, ...]:
    """The compiler's limit errors among kept ``messages``, without their mark."""
    return tuple(m.removeprefix(LIMIT_MARK) for m in messages if m.startswith(LIMIT_MARK))


@contextmanager
def capturing_stderr() -> Iterator[list[str]]:
    """Descriptor 2 into a pipe for the body; yields the list that receives the messages of the
    partitioner's lines printed meanwhile (complete when the body ends). Everything else goes
    on to the real descriptor 2 as it arrives: the explorer draws its screen there (Textual
    writes to ``sys.__stderr__``) while a worker thread compiles, so only a C++ log line is
    held, until its end, to be told apart."""
    captured: list[str] = []
    read_end, write_end = os.pipe()
    forwarders: list[threading.Thread] = []

    def forwarded() -> None:
        """Descriptor 2 has let go of the pipe's last write end: the forwarder reads to its end."""
        for forwarder in forwarders:
            forwarder.join()

    try:
        with stderr_into(write_end, then=forwarded) as real:
            os.close(write_end)
            forwarders.append(threading.Thread(target=_forward, args=(read_end, real, captured), daemon=True,
                                               name="shardscope-stderr"))
            forwarders[0].start()
            yield captured
    finally:
        os.close(read_end)


_LOG_START = re.compile(rb"[IWEF]\d{0,4}")


def _forward(read_end: int, out: int, captured: list[str]) -> None:
    """Copy the pipe to ``out`` as it arrives, except each partitioner line (into ``captured``).

    A C++ log line (``W1204 05:00:43.162335 ...``) is held from its first byte to its newline,
    then kept or passed on whole; any other byte passes at once."""
    held = b""
    at_line_start = True
    while True:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        passing = bytearray()
        for line in (held + chunk).splitlines(keepends=True):
            complete = line.endswith(b"\n")
            if at_line_start and _LOG_START.fullmatch(line.rstrip(b"\n")[:5]) is not None:
                if not complete:
                    held = line
                    break
                message = kept_message(line.decode("utf-8", "replace"))
                if message is None:
                    passing += line
                else:
                    captured.append(message)
            else:
                passing += line
            at_line_start = complete
        else:
            held = b""
        if passing:
            _write_all(out, bytes(passing))
    if held:
        _write_all(out, held)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]
