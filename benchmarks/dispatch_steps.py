"""Benchmark 8: a step of dispatches, one gradient call per micro-batch, against its fix.

``demos/dispatch_step.py``'s ``step`` (not jitted: a Python loop that calls the jitted
``grad_fn`` once per micro-batch, each call all-reducing the gradient of the replicated ``w``,
then ``apply``) and ``step_fixed`` (each call returns the devices' own gradients, stacked over
``data``; ``apply_fixed`` sums them, the step's one all-reduce), run eagerly as written, on the
same placed arguments, timed interleaved (:func:`shardscope.measure.timing.time_interleaved`:
warm-up, then the rounds, the order rotating). ``jax.jit(step)`` (XLA merges the four calls into
one module that reduces once) is timed beside them for context. The per-step collective counts
are shardscope's (``collective_counts``), the outputs of the two steps compared. Sizes: the
demo's own (4 micro-batches, ``w`` 16x16) and a larger gradient (8 micro-batches, ``w``
1024x1024, as MaxText's GA=8 over dp=4). Run alone: ``python -m benchmarks.dispatch_steps
[--quick | --smoke]`` (writes ``benchmarks/results/dispatch_steps.json``); not part of ``make bench``.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.common import DEMOS, grid, parse_args, stats, write_result

CPU_DEVICES = 8
SIZES = ((4, 32, 16), (8, 64, 1024))
"""(micro-batches, batch, D): the demo's sizes, and a 4 MiB gradient over 8 micro-batches."""
ROUNDS, QUICK_ROUNDS = 40, 5


def main(argv: list[str] | None = None) -> int:
    """Time the three programs at each size and write the JSON."""
    args = parse_args(__doc__.splitlines()[0], argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from shardscope.targets.host import ensure_devices

    ensure_devices(CPU_DEVICES)  # before the demo builds its mesh
    from shardscope.sources.loading import import_file

    module, _ = import_file(DEMOS / "dispatch_step.py")
    rounds = grid(args, ROUNDS, QUICK_ROUNDS, 2)
    cases = [_case(module, micro, batch, d, rounds) for micro, batch, d in grid(args, SIZES, SIZES, SIZES[:1])]
    write_result("dispatch_steps", args, {"cpu_devices": CPU_DEVICES, "rounds": rounds, "cases": cases})
    return 0


def _case(module: Any, micro: int, batch: int, d: int, rounds: int) -> dict[str, Any]:
    """One size: the programs timed interleaved, their counts per step and their outputs compared."""
    import jax
    import numpy as np

    from shardscope.measure.speedup import speedup_of
    from shardscope.measure.timing import time_interleaved
    from shardscope.testing import collective_counts

    rng = np.random.default_rng(0)
    w = jax.device_put((rng.normal(size=(d, d)) * 0.05).astype(np.float32), module.W.sharding)
    xs = [jax.device_put(rng.normal(size=(batch, d)).astype(np.float32), module.XS[0].sharding) for _ in range(micro)]
    programs = {"step": module.step, "step_fixed": module.step_fixed, "jit(step)": jax.jit(module.step)}
    times = time_interleaved(programs, (w, xs), rounds)
    difference = float(np.max(np.abs(np.asarray(module.step(w, xs)) - np.asarray(module.step_fixed(w, xs)))))
    ratio = speedup_of(times["step"].samples, times["step_fixed"].samples)
    return {
        "micro_batches": micro, "batch": batch, "d": d, "gradient_bytes": d * d * 4,
        "run_ms": {name: stats([s * 1e3 for s in t.samples]) for name, t in times.items()},
        "step_over_fixed": {"median": ratio.median, "low": ratio.low, "high": ratio.high, "rounds": ratio.rounds},
        "counts_per_step": {"step": collective_counts(module.step, w, xs),
                            "step_fixed": collective_counts(module.step_fixed, w, xs)},
        "max_abs_difference": difference,
    }


if __name__ == "__main__":
    raise SystemExit(main())
