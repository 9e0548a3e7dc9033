"""A FATAL log line in a compile's capture: XLA aborts the process after it."""

from __future__ import annotations

import os

from shardscope.engine.compile_log import capturing_stderr


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
