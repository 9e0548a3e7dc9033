"""File descriptor 2 pointed elsewhere around a call (``shardscope.native_stderr``): the one helper
behind the compile log, the CUDA plugin's start and the profile converter.

Bytes are written with ``os.write(2, ...)``, as native code writes them (``sys.stderr`` never sees
them); ``capfd`` reads what reached the descriptor the redirect put back.
"""

from __future__ import annotations

import os
import threading

from shardscope.native_stderr import stderr_caught, stderr_into


def test_caught_lines_stay_off_the_terminal_and_the_descriptor_comes_back(capfd):
    capfd.readouterr()
    with stderr_caught() as lines:
        os.write(2, b"W0101 native line\nsecond\n")
    os.write(2, b"after\n")
    assert lines == ["W0101 native line\n", "second\n"]
    assert capfd.readouterr().err == "after\n"


def test_a_redirect_inside_another_puts_back_the_outer_one(capfd):
    capfd.readouterr()
    with stderr_caught() as outer:
        os.write(2, b"outer 1\n")
        with stderr_caught() as inner:
            os.write(2, b"inner\n")
        os.write(2, b"outer 2\n")
    assert inner == ["inner\n"] and outer == ["outer 1\n", "outer 2\n"]
    assert capfd.readouterr().err == ""


def test_a_pipes_reader_finishes_before_the_real_stderrs_copy_closes(capfd):
    """The compile log's shape: a thread copies the pipe to the stderr the redirect replaced, and
    reads to its end only once descriptor 2 lets go of the pipe's last write end."""
    capfd.readouterr()
    read_end, write_end = os.pipe()
    copied: list[bytes] = []

    def copy(out: int) -> None:
        while chunk := os.read(read_end, 4096):
            copied.append(chunk)
            os.write(out, chunk)

    threads: list[threading.Thread] = []
    with stderr_into(write_end, then=lambda: threads[0].join()) as real:
        os.close(write_end)
        threads.append(threading.Thread(target=copy, args=(real,)))
        threads[0].start()
        os.write(2, b"through the pipe\n")
    os.close(read_end)
    assert b"".join(copied) == b"through the pipe\n"
    assert capfd.readouterr().err == "through the pipe\n"
