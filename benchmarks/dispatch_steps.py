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
from benchmarks.harness import Benchmark, Column, Prose, Table, ratio_column

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


def _described(result: dict[str, Any]) -> list[str]:
    load = result["load_average"]
    return [
        "`python -m benchmarks.dispatch_steps` (run alone; not part of `make bench`; "
        f"{result['cpu_devices']} simulated CPU devices, the demo's mesh over the first of them; 1-minute load "
        f"average {load['start']:.1f} -> {load['end']:.1f} on this machine's 2 shared cores). `demos/dispatch_step.py`'s "
        "`step` is not jitted: a Python loop calls the jitted `grad_fn` once per micro-batch (each call its own "
        "module, all-reducing the replicated weight's gradient) and adds the results eagerly, then calls `apply`. "
        "`step_fixed` has each call return the devices' own gradients (stacked over `data`) and the update sum them: "
        "one all-reduce per step. Both run as written, eagerly, on the same placed arguments, timed interleaved "
        f"({result['rounds']} rounds after warm-up, the order rotating); `jax.jit(step)` (one module: XLA merges the "
        "calls and reduces once) is timed in the same rounds for context. The ratio is the median of the per-round "
        "ratios with their interquartile range. Collectives per step are `shardscope.testing.collective_counts`'.",
    ]


def _reading(result: dict[str, Any]) -> list[str]:
    largest = max(result["cases"], key=lambda c: c["gradient_bytes"])
    ms = largest["run_ms"]
    return [
        f"At the largest gradient the dispatch-per-micro-batch step takes {ms['step']['median']:.1f} ms "
        f"against {ms['step_fixed']['median']:.1f} ms for the fix, which calls the gradient function as "
        "often: the difference is mostly the all-reduces the fix does not run. The simulated devices' all-reduce is a copy "
        "through memory on the shared cores, so the ratio is this machine's, not an interconnect's. "
        f"`jax.jit(step)` runs one module with one all-reduce, yet took {ms['jit(step)']['median']:.1f} "
        "ms there: its devices' work shares the cores differently from the eager dispatches', which was not "
        "investigated further.",
    ]


def _gradient(case: dict[str, Any]) -> str:
    nbytes = case["gradient_bytes"]
    size = f"{nbytes / 2**20:.0f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} KiB"
    return f"{case['d']}x{case['d']} f32 ({size})"


BENCHMARK = Benchmark(
    name="dispatch_steps",
    heading="8. A step of dispatches: one all-reduce per micro-batch against one per step",
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("micro-batches", lambda c: c["micro_batches"], digits=None),
                Column("batch", lambda c: c["batch"], digits=None),
                Column("gradient", _gradient),
                Column("all-reduces/step: step, step_fixed", lambda c: ", ".join(
                    str(c["counts_per_step"][name].get("all-reduce", 0)) for name in ("step", "step_fixed")),
                    better="lower", align="left"),
                Column("step, median (min-max)", lambda c: c["run_ms"]["step"], unit="ms", better="lower"),
                Column("step_fixed", lambda c: c["run_ms"]["step_fixed"], unit="ms", better="lower"),
                ratio_column("step / step_fixed (IQR)", lambda c: c["step_over_fixed"], strong=True, align="left"),
                Column("jax.jit(step)", lambda c: c["run_ms"]["jit(step)"]["median"], unit="ms", better="lower"),
                Column("largest output difference", lambda c: f"{c['max_abs_difference']:.1e}", better="lower"),
            ),
            rows=lambda result: result["cases"],
        ),
        Prose(_reading),
    ),
)


if __name__ == "__main__":
    raise SystemExit(main())
