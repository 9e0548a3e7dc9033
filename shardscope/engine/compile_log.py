"""The log lines XLA's partitioner prints while a module compiles, kept from the terminal.

XLA's C++ logging writes to file descriptor 2 (``spmd_partitioner.cc``'s "Involuntary full
rematerialization"): Python's ``sys.stderr`` never sees it, so :func:`capturing_stderr` points
descriptor 2 at a temporary file for the compile, keeps the partitioner's lines and writes every
other line back to the real descriptor 2 when the compile ends: the user's own output still
reaches the terminal, late by one compile at most. Descriptor 2 is the process's, so compiles
that capture take turns (the app compiles in a worker thread while Textual draws on stdout).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from contextlib import contextmanager
from typing import Iterator

_FD_LOCK = threading.Lock()

_PARTITIONER_LINE = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ (?P<file>[\w.]+):\d+\] (?P<message>.*)$")
_PARTITIONER_FILES = ("spmd_partitioner", "sharding_propagation", "shardy", "sdy_")


def partitioner_message(line: str) -> str | None:
    """The message of one of the partitioner's log lines (``W1204 ... spmd_partitioner.cc:656]
    [SPMD] ...``), None for any other line."""
    match = _PARTITIONER_LINE.match(line.rstrip("\n"))
    if match is None or not match.group("file").startswith(_PARTITIONER_FILES):
        return None
    return match.group("message")


@contextmanager
def capturing_stderr() -> Iterator[list[str]]:
    """Descriptor 2 into a temporary file for the body; yields the list that receives, when the
    body ends, the messages of the partitioner's lines it printed. Every other line is written
    back to descriptor 2 as it was."""
    captured: list[str] = []
    with _FD_LOCK, tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            try:
                yield captured
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
        finally:
            os.close(saved)
            sink.seek(0)
            passed = bytearray()
            for raw in sink.read().splitlines(keepends=True):
                message = partitioner_message(raw.decode("utf-8", "replace"))
                if message is None:
                    passed += raw
                else:
                    captured.append(message)
            if passed:
                os.write(2, bytes(passed))
