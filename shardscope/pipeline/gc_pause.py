"""Read a program without Python's cyclic garbage collector stopping the work over and over.

Reading a traced program allocates hundreds of thousands of small objects (equations, values,
graph nodes) that all stay alive. CPython's collector runs each time enough objects were
allocated, and as they survive it makes full passes over every tracked object in the process
(JAX's included): at 10k equations those passes were 40-45% of the analysis (1.29 s with the
collector, 0.72 s with it paused, the same peak memory, and 75 objects of cyclic garbage left at
the end). So the pipeline reads each program with the collector :func:`paused`, and it resumes
as it was when the outermost pause ends.

The collector is one switch for the whole process: while a pause lasts, other threads (the app's
UI) allocate without it too. So only the pipeline pauses it, which runs where shardscope owns the
process (the CLI, the app); the engine, called as a library (``shardscope.inspect``,
``shardscope.testing`` in a user's pytest run), leaves the caller's collector alone. A pause
lasts seconds at most; ``gc.collect()`` still works.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_depth = 0  # phases running now, in any thread
_enabled_before = False  # whether the collector was on when the outermost phase started


@contextmanager
def paused() -> Iterator[None]:
    """Pause the cyclic GC inside; nested and concurrent uses resume it once, when the last ends.

    If the collector was off already (``gc.disable()`` by the caller), it stays off.
    """
    global _depth, _enabled_before
    with _lock:
        if _depth == 0:
            _enabled_before = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _enabled_before:
                gc.enable()
