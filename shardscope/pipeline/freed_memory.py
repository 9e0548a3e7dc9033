"""Give the memory a finished compile freed back to the operating system, where shardscope owns the process.

XLA's compile of a large step for a slice is the process's peak of memory, and glibc's allocator
keeps most of what a compile frees: the pages stay in the process's resident set, and a compile
that follows grows on top of them. ``check --target`` compiles for the CPU beside the slice,
and gives the CPU's freed memory back once its compile is read, while the slice's compile still
grows (:func:`shardscope.pipeline.one_program.compile_program`); a Llama-3-8B-shaped step on
1,024 chips (``benchmarks/llama_adamw_step.py``) held 1.29 GB resident after the CPU's compile,
of which ``malloc_trim(0)`` returns all but 0.6 GB (0.2 s of CPU), so the slice's compile starts
from what is live.

``malloc_trim`` acts on the whole process's heap (every thread's arenas) and costs a walk of
it, so, as :mod:`shardscope.pipeline.gc_pause`, only the pipeline calls it, where a command owns
the process (``shardscope check``); the engine, called as a library (``shardscope.inspect_on``),
leaves the caller's allocator alone. Off glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import Callable


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim")
    except (OSError, AttributeError, TypeError):
        return None


def release_freed_memory() -> bool:
    """Return the heap's free pages to the operating system (glibc's ``malloc_trim(0)``); whether
    this C library could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
