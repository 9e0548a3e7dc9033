"""The app's one policy for Python's cyclic garbage collector.

An analysis holds hundreds of thousands of objects (millions at 50k equations) that live until
the next run, and so do the trees that show it: a full GC pass over them during a key press costs
from 150 ms to seconds. So what lives is frozen out of the collector (``gc.freeze``) when a result
shows, and a run starts by collecting what the runs before it left (a frozen object is never
collected, and the analysis a new one replaces is frozen with it).
"""

from __future__ import annotations

import gc


def freeze_what_lives() -> None:
    """Freeze every object alive now out of the cyclic GC.

    The young generations, empty once frozen, are collected too (that costs nothing): their counts
    restart, so the next key press does not begin one collection short of a generation-1 pass.
    """
    gc.freeze()
    gc.collect(1)


def collect_earlier_runs() -> None:
    """Collect what earlier runs left as cyclic garbage, then freeze what is alive again.

    One full pass, so at most one run's garbage stays frozen. It holds the GIL: called from a
    run's worker thread before any JAX work, it takes about 0.1-0.4 s on the demos and seconds
    at 10k equations and more, during which the UI waits.
    """
    gc.unfreeze()
    gc.collect()
    freeze_what_lives()
