"""The app's one policy for Python's cyclic garbage collector.

An analysis holds hundreds of thousands of objects (millions at 50k equations) that live until
the next run, and so do the trees that show it: a full GC pass over them during a key press costs
from 150 ms to seconds. So what lives is frozen out of the collector (``gc.freeze``) when a result
shows, and a run starts by collecting what the runs before it left (a frozen object is never
collected, and the analysis a new one replaces is frozen with it).
"""

from __future__ import annotations

import gc
import threading
import time

from shardscope.app.base.textual_adapter import release_removed_widgets


class Collector:
    """One app's use of the collector: it freezes what lives when a result shows, and collects
    what its earlier runs left when a new run starts.

    What an app froze is its own business: a run collects only once this app has frozen a result
    (its first run has nothing of its own to collect). Objects the process froze before the app
    started, or another app froze (one process that opens several, as a test run does), are left
    as they are until then.
    """

    def __init__(self) -> None:
        self._froze = False

    def freeze_what_lives(self) -> None:
        """Freeze every object alive now out of the cyclic GC.

        The young generations, empty once frozen, are collected too (that costs nothing): their
        counts restart, so the next key press does not begin one collection short of a
        generation-1 pass.
        """
        gc.freeze()
        gc.collect(1)
        self._froze = True

    def collect_earlier_runs(self) -> None:
        """Collect what this app's earlier runs left as cyclic garbage, then freeze what is alive again.

        One full pass, so at most one run's garbage stays frozen. It holds the GIL: called from a
        run's worker thread before any JAX work, it takes about 0.1-0.4 s on the demos and seconds
        at 10k equations and more, during which the UI waits. Before this app froze anything (its
        first run) there is nothing of its own to collect, and the pass is skipped: it would only
        walk every object the process holds (seconds in a long-lived process that is not the
        app's alone, such as a test run).
        """
        if not self._froze:
            return
        release_removed_widgets()  # what the replaced run's widgets drew is garbage too
        gc.unfreeze()
        _collect_fully()
        self.freeze_what_lives()


def _collect_fully() -> None:
    """``gc.collect()``, again until a full pass has run in this thread.

    CPython runs one collection at a time: a ``gc.collect()`` made while another thread's
    collection runs finalizers (which let other threads run) returns at once, doing nothing,
    and what this pass was for would then be frozen with the rest. The collector's callbacks
    run in the thread that collects, so they tell whether this thread's pass ran.
    """
    thread = threading.get_ident()
    passes: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2 and threading.get_ident() == thread:
            passes.append(1)

    gc.callbacks.append(count)
    try:
        for _ in range(1000):
            gc.collect()
            if passes:
                return
            time.sleep(0.001)  # let the other thread's collection end
    finally:
        gc.callbacks.remove(count)
