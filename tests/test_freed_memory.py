"""The pipeline gives the heap's free pages back to the system between a target's compile and the
CPU's (shardscope/pipeline/freed_memory.py): glibc keeps freed small blocks resident until trimmed."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

import pytest

from shardscope.pipeline.freed_memory import release_freed_memory

GLIBC = platform.libc_ver()[0] == "glibc"


def _resident_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_blocks_leave_the_resident_set() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(1024) for _ in range(150_000)]  # ~150 MiB of small blocks (below mmap's threshold)
    for block in blocks:
        ctypes.memset(block, 1, 1024)  # touched: resident
    pin = libc.malloc(1024)  # above them all: the heap's top cannot shrink on its own
    for block in blocks:
        libc.free(block)
    held = _resident_mib()
    assert release_freed_memory()
    released = held - _resident_mib()
    libc.free(pin)
    assert released > 100  # of the ~150 MiB freed; none would leave without the trim
