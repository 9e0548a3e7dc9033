"""Running programs under JAX's profiler: what ``--profile`` captures before it reads.

Each call is run once to warm it (its first run compiles and allocates), then ``runs`` times
under a ``jax.profiler`` trace, each call waited on: every run of every instruction on every
device is on the timeline. The trace goes to a temporary folder that :func:`profile_calls`
reads (:mod:`shardscope.measure.profile_read`) and removes (an interrupt removes it too).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from shardscope.activities import temporary_folder
from shardscope.measure.profile_read import Profile, read_profile

DEFAULT_CALLS = 5
"""How many times ``--profile`` runs each program under the profiler."""


def capture(calls: Mapping[str, Callable[[], Any]], runs: int, into: Path) -> Path:  # Any: a program's output
    """Run each of ``calls`` once, then ``runs`` times under ``jax.profiler`` tracing into ``into``."""
    import jax  # the engine's: imported by the commands that profile, not by --help

    for call in calls.values():
        jax.block_until_ready(call())
    jax.profiler.start_trace(str(into))
    try:
        for call in calls.values():
            for _ in range(runs):
                jax.block_until_ready(call())
    finally:
        jax.profiler.stop_trace()
    return into


def profile_each(calls: Mapping[str, Callable[[], Any]], runs: int = DEFAULT_CALLS) -> dict[str, Profile]:  # Any: outputs
    """Each of ``calls`` profiled in a trace of its own: programs compiled from one function have
    one module name (``jit_local``), and XLA:CPU's timeline tells modules apart by name alone."""
    return {name: profile_calls({name: call}, runs) for name, call in calls.items()}


def profile_calls(calls: Mapping[str, Callable[[], Any]], runs: int = DEFAULT_CALLS) -> Profile:  # Any: outputs
    """The :class:`~shardscope.measure.profile_read.Profile` of ``calls`` run ``runs`` times each."""
    with tempfile.TemporaryDirectory(prefix="shardscope-trace-") as folder, temporary_folder(folder):
        profile = read_profile(capture(calls, runs, Path(folder)))
    return dataclasses.replace(profile, source=f"jax.profiler, {runs} calls of each program")
