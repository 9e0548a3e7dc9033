"""One worker of a layouts sweep (:mod:`shardscope.pipeline.layout_pool`):
``python -m shardscope.pipeline.layout_worker TASKS RESULTS``, the two pipes' descriptors.

It reads the job, starts JAX with as many CPU devices as the target has, loads the target,
imports the user's file, then compiles each candidate index it is sent (None ends it) and sends
back ``("done", result)``; a job it cannot start is ``("error", (message, hint))``.
"""

from __future__ import annotations

import contextlib
import sys
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from shardscope.errors import ShardscopeError

if TYPE_CHECKING:
    from shardscope.pipeline.layout_pool import SweepJob
    from shardscope.sources.layouts import LayoutFunction
    from shardscope.targets.base import TargetDevices


def load_job(job: "SweepJob") -> tuple["LayoutFunction", "TargetDevices"]:
    """The job's function and target here: JAX started with as many CPU devices as the target has,
    before the file is imported (a mesh built at import must find them)."""
    from shardscope.pipeline.layout_compile import hide_own_frames
    from shardscope.sources.loading import load_layout_file
    from shardscope.targets.host import ensure_devices, start_jax_quietly
    from shardscope.targets.registry import load_target, parse_target

    start_jax_quietly()
    hide_own_frames()
    target = load_target(parse_target(job.target))
    ensure_devices(target.count)
    with contextlib.redirect_stdout(sys.stderr):
        layout_file = load_layout_file(job.path)
    return layout_file.functions[job.function], target


def serve(tasks: Connection, results: Connection) -> None:
    """The worker's life (see the module docstring)."""
    from shardscope.pipeline.layout_compile import compile_candidate

    job = tasks.recv()
    try:
        function, target = load_job(job)
    except ShardscopeError as exc:
        results.send(("error", (exc.message, exc.hint)))  # an exception's pickle drops its hint
        return
    except Exception as exc:  # what the user's file raised past shardscope's own handling: said as it is
        results.send(("error", (f"A layouts worker could not start: {type(exc).__name__}: {exc}", None)))
        return
    results.send(("ready", None))
    while (index := tasks.recv()) is not None:
        with contextlib.redirect_stdout(sys.stderr):
            result = compile_candidate(function, job.candidates[index], target, job.keep_text)
        results.send(("done", result))


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl+C is the command's to handle: it stops the workers
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
