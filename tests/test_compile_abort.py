"""XLA aborting the process in the middle of a compile (a FATAL log line, then ``abort()``): its
line and shardscope's own reach the terminal, written by the sentinel process
(``shardscope.engine.compile_abort``) once nothing is left of shardscope to write them.

The first test compiles a real program XLA aborts on (``tests/fixtures/programs/xla_aborts.py``);
the next two end a process that imports no JAX in a capture, right after writing a FATAL line as
XLA's logging writes it and aborting (the line may still be in the pipe), or without one, as an
interrupt's ``os._exit`` ends it (the sentinel says nothing). The last: a FATAL line is never
kept from the terminal, not even one of the partitioner's files.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap

import pytest
from _support import PYTHON, ROOT

from shardscope.engine.compile_log import capturing_stderr

ABORTS = ROOT / "tests" / "fixtures" / "programs" / "xla_aborts.py"
FATAL = re.compile(r"^F\d{4} [\d:.]+\s+\d+ hlo_instruction\.cc:\d+\] Invalid binary instruction opcode copy$", re.M)


@pytest.mark.slow  # a fresh process that imports JAX and aborts
def test_check_of_a_program_xla_aborts_on_shows_xlas_line_and_names_the_program():
    done = subprocess.run([PYTHON, "-m", "shardscope", "check", str(ABORTS)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    if done.returncode != -signal.SIGABRT and FATAL.search(done.stderr) is None:
        pytest.skip(f"this jax's XLA compiles {ABORTS.name} (status {done.returncode}): nothing aborts")
    assert done.returncode == -signal.SIGABRT
    assert FATAL.search(done.stderr), done.stderr[-3000:]
    assert (f"shardscope: XLA aborted the process while compiling step of {ABORTS}: the FATAL line above is a "
            f"failure inside the compiler, not an error in your program.") in done.stderr, done.stderr[-3000:]
    assert done.stdout == ""


_ENDS_IN_A_CAPTURE = textwrap.dedent("""
    import os, sys

    from shardscope.engine.compile_abort import naming_compiles
    from shardscope.engine.compile_log import capturing_stderr

    with naming_compiles("train.py"), naming_compiles("step"), capturing_stderr():
        os.write(2, sys.argv[1].encode())
        os.abort() if sys.argv[2] == "abort" else os._exit(130)
""")

XLAS_LINE = "F1207 22:28:18.141871   26994 hlo_instruction.cc:1615] Invalid binary instruction opcode copy\n"


def _ended_in_a_capture(written: str, how: str) -> subprocess.CompletedProcess:
    """A process that writes ``written`` to descriptor 2 inside a compile's capture and ends there
    (``how``: ``abort``, or ``exit`` as an interrupt ends it). Its stderr is complete once the
    sentinel, which holds a copy of it, has ended too."""
    return subprocess.run([PYTHON, "-c", _ENDS_IN_A_CAPTURE, written, how], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_a_fatal_line_left_in_the_pipe_reaches_the_terminal_with_shardscopes_line():
    done = _ended_in_a_capture(XLAS_LINE + "*** Check failure stack trace: ***\n", "abort")
    assert done.returncode == -signal.SIGABRT
    assert XLAS_LINE in done.stderr
    assert done.stderr.rstrip().splitlines()[-1] == (
        "shardscope: XLA aborted the process while compiling step of train.py: the FATAL line above is a failure "
        "inside the compiler, not an error in your program. Report it to JAX (https://github.com/jax-ml/jax/issues) "
        "with that line and your program.")


def test_a_process_that_ends_in_a_capture_without_a_fatal_line_gets_no_word_from_the_sentinel():
    done = _ended_in_a_capture("W1207 22:28:18.141871   26994 spmd_partitioner.cc:1] [SPMD] a kept line\n", "exit")
    assert done.returncode == 130
    assert "shardscope" not in done.stderr and "[SPMD]" not in done.stderr


def test_a_fatal_line_of_the_partitioners_own_file_reaches_the_terminal_not_the_kept_lines(capfd):
    """The partitioner's lines are kept from the terminal, but not its last: the process aborts
    after a FATAL line, and no kept message would ever be read."""
    capfd.readouterr()
    fatal = b"F1204 05:00:43.162335   16662 spmd_partitioner.cc:666] Check failed: sharding.IsTiled()\n"
    with capturing_stderr() as kept:
        os.write(2, b"W1204 05:00:43.162335   16662 spmd_partitioner.cc:656] [SPMD] a partitioner line\n")
        os.write(2, fatal)
    assert kept == ["[SPMD] a partitioner line"]
    assert capfd.readouterr().err == fatal.decode()


def test_captures_go_on_without_a_sentinel_where_unix_sockets_have_no_packets(monkeypatch):
    """macOS has no ``SOCK_SEQPACKET`` for Unix sockets: ``socketpair`` raises there, and a
    capture keeps the partitioner's lines as before, with no sentinel (and no traceback)."""
    import socket

    from shardscope.engine import compile_abort

    def unsupported(*args, **kwargs):
        raise OSError(43, "Protocol not supported")

    monkeypatch.setattr(socket, "socketpair", unsupported)
    sentinel = compile_abort._Sentinel()
    assert sentinel.control() is None
    sentinel.send(b"shut 1")  # nothing to send to: no error either
    monkeypatch.setattr(compile_abort, "_SENTINEL_PROCESS", sentinel)
    with capturing_stderr() as kept:
        os.write(2, b"W1207 22:28:18.141871   26994 spmd_partitioner.cc:656] [SPMD] Involuntary full rematerialization\n")
    assert kept == ["[SPMD] Involuntary full rematerialization"]
