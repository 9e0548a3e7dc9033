"""Benchmark 1, the headline: naive vs deferred vs unchunked vs the compute-only floor.

On 8 simulated CPU devices, for a linear layer ``f(W, x) = x @ W`` with ``M`` parameters
(``W`` is ``(100, M/100)``, ``x`` is ``(8 * B, 100)``) and the RNN of ``demos/rnn.py`` with
``T`` steps, at several chunks per device. The per-device batch ``B`` is fixed, so every
chunk count does the same arithmetic: only the number of all-reduces changes.

The floor is the registry's ``floor`` plan (``shardscope.plans.registry.FLOOR``): the deferred plan
without its final ``psum``; each device returns its partial gradient, stacked over the mesh axis
(``out_specs=P(axis)``). It does the same chunked compute
and no communication; the benchmark checks that its jaxpr and its compiled HLO have no
collective. ``naive - floor`` is what the naive plan's communication costs.

Run alone: ``python -m benchmarks.plans_at_scale [--quick]``.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import DEMOS, grid as grid_of, parse_args, peak_rss_mib, stats, write_result

DEVICES = 8
AXIS = "s"
LINEAR_IN = 100  # W is (LINEAR_IN, M // LINEAR_IN)
PER_DEVICE_BATCH = 64
RNN_DIMS = {"D": 4, "H": 16}  # as in demos/rnn.py

FULL = {
    "sizes": (10**4, 10**5, 10**6),
    "chunks": (1, 4, 16, 64),
    "rnn_steps": (4, 16),
    # the claim to check: M=1e6, 16 chunks/device; how the ratio moves with the per-device batch
    "sensitivity_batches": (16, 256),
    "repeats": 25,
    "claim_checks": 5,  # M=1e6, 16 chunks/device rebuilt and timed again, spread through the run
}
QUICK = {
    "sizes": (10**4, 10**6),
    "chunks": (1, 16, 64),
    "rnn_steps": (4,),
    "sensitivity_batches": (),
    "repeats": 7,
    "claim_checks": 0,
}
SMOKE = {"sizes": (10**4,), "chunks": (1,), "rnn_steps": (4,), "sensitivity_batches": (), "repeats": 2,
         "claim_checks": 0}

TIMED = ("naive", "deferred", "reference", "floor")


def main(argv: list[str] | None = None) -> None:
    """Run the grid and write ``plans_at_scale.json``."""
    args = parse_args(__doc__.splitlines()[0], argv)
    from shardscope.targets.host import ensure_devices

    ensure_devices(DEVICES)
    grid = grid_of(args, FULL, QUICK, SMOKE)
    started = time.perf_counter()
    # a throwaway cell first: the first programs a process runs are slower (thread pools, allocator)
    if args.mode != "smoke":
            _cell(_linear_demo(10**5, PER_DEVICE_BATCH), 4, PER_DEVICE_BATCH, 3, {"model": "linear", "M": 10**5, "warmup": True})
    cells, claim_checks = [], []

    def check_claim() -> None:
        """The claimed cell again, built and timed afresh: how much it moves during one run."""
        claim_checks.append(_cell(_linear_demo(10**6, PER_DEVICE_BATCH), 16, PER_DEVICE_BATCH, grid["repeats"],
                                  {"model": "linear", "M": 10**6, "check": len(claim_checks)}))

    for m in grid["sizes"]:
        if grid["claim_checks"]:
            check_claim()
        for chunks in grid["chunks"]:
            cells.append(_cell(_linear_demo(m, PER_DEVICE_BATCH), chunks, PER_DEVICE_BATCH, grid["repeats"],
                               {"model": "linear", "M": m}))
    for steps in grid["rnn_steps"]:
        for chunks in grid["chunks"]:
            cells.append(_cell(_rnn_demo(steps, PER_DEVICE_BATCH), chunks, PER_DEVICE_BATCH, grid["repeats"],
                               {"model": "rnn", "T": steps}))
    while len(claim_checks) < grid["claim_checks"]:
        check_claim()
    sensitivity = [
        _cell(_linear_demo(10**6, batch), 16, batch, grid["repeats"], {"model": "linear", "M": 10**6})
        for batch in grid["sensitivity_batches"]
    ]
    write_result(
        "plans_at_scale",
        args,
        {
            "devices": DEVICES,
            "per_device_batch": PER_DEVICE_BATCH,
            "linear_in": LINEAR_IN,
            "rnn_dims": RNN_DIMS,
            "repeats": grid["repeats"],
            "warmup": 2,
            "cells": cells,
            "sensitivity": sensitivity,
            "claim_checks": claim_checks,
            "peak_rss_mib": peak_rss_mib(),
            "elapsed_s": time.perf_counter() - started,
        },
    )


def _linear_demo(m: int, per_device_batch: int) -> Any:
    import jax
    import jax.numpy as jnp

    from shardscope.sources.demos import DemoFunction, DemoSpec

    def linear(W, x):
        return x @ W

    spec = DemoSpec(
        params=jax.ShapeDtypeStruct((LINEAR_IN, m // LINEAR_IN), jnp.float32),
        x=jax.ShapeDtypeStruct((DEVICES * per_device_batch, LINEAR_IN), jnp.float32),
    )
    return DemoFunction("linear", linear, spec)


def _rnn_demo(steps: int, per_device_batch: int) -> Any:
    """``demos/rnn.py``'s model itself, with ``T`` steps instead of the file's 8."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from shardscope.sources.loading import load_demo_file

    demo = load_demo_file(DEMOS / "rnn.py").get("rnn")
    assert demo.spec.params["Wh"].shape == (RNN_DIMS["H"],) * 2
    x = jax.ShapeDtypeStruct((DEVICES * per_device_batch, steps, RNN_DIMS["D"]), jnp.float32)
    return dataclasses.replace(demo, spec=dataclasses.replace(demo.spec, x=x))


def _cell(demo: Any, chunks: int, per_device_batch: int, repeats: int, label: dict) -> dict[str, Any]:
    """Build, check, compile and time the four programs of one cell."""
    import jax
    import numpy as np

    from shardscope.measure import timing
    from shardscope.plans import registry
    from shardscope.plans.settings import Settings

    settings = Settings(path=Path("benchmark"), devices=DEVICES, axis=AXIS,
                        chunk_size=per_device_batch // chunks, repeats=repeats)
    # the floor is one more plan of the registry: the deferred plan without its reduction
    built = registry.build_plans(demo, settings, (registry.NAIVE, registry.DEFERRED, registry.FLOOR))
    assert built.shapes.chunks_per_device == chunks
    functions = built.functions

    start = time.perf_counter()
    traced = {name: functions[name].trace(*built.args) for name in TIMED}
    trace_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = {name: traced[name].lower().compile() for name in TIMED}
    compile_s = time.perf_counter() - start
    collectives, hlo_collectives = _jaxpr_collectives(traced), _hlo_collectives(compiled)
    if collectives["floor"]["equations"] or hlo_collectives["floor"]["instructions"]:
        raise AssertionError(f"the floor program communicates: {collectives['floor']}, HLO {hlo_collectives['floor']}")

    times = timing.time_interleaved({name: compiled[name] for name in TIMED}, built.args, repeats)
    median = {name: times[name].median for name in TIMED}
    rounds = _quartiles([n / d for n, d in zip(times["naive"].samples, times["deferred"].samples)])
    cell = {
        **label,
        "params": sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(built.args[0])),
        "per_device_batch": per_device_batch,
        "chunks_per_device": chunks,
        "chunk_size": built.shapes.chunk_size,
        "batch": built.shapes.batch,
        "collectives": collectives,
        "hlo_collectives": hlo_collectives,
        "memory": {name: timing.memory(compiled[name]) for name in TIMED},
        "max_abs_err": _errors(compiled, built.args),
        "trace_s": trace_s,
        "compile_s": compile_s,
        "run_s": {name: stats(times[name].samples) for name in TIMED},
        # each round runs every program once (timing.time_interleaved rotates the order), so the
        # ratio within one round is the side by side comparison; its median is the headline
        "naive_over_deferred": rounds["median"],
        "naive_over_deferred_rounds": rounds,
        "naive_over_deferred_of_medians": median["naive"] / median["deferred"],
        "deferred_over_floor": median["deferred"] / median["floor"],
        "naive_overhead_s": median["naive"] - median["floor"],
        "load_average_1min": os.getloadavg()[0],
    }
    print(f"{label} chunks={chunks:>3} B={per_device_batch}: "
          + " ".join(f"{n}={median[n] * 1e3:.2f}ms" for n in TIMED)
          + f" naive/deferred={cell['naive_over_deferred']:.2f}", flush=True)
    return cell


def _jaxpr_collectives(traced: dict) -> dict[str, dict[str, int]]:
    """Per plan, shardscope's count of collectives: equations, in loops, executed and bytes per call."""
    from shardscope.engine.jaxpr import dataflow
    from shardscope.engine.jaxpr.model import from_jaxpr

    counts = {}
    for name in ("naive", "deferred", "floor"):
        found = dataflow.collectives(from_jaxpr(traced[name].jaxpr))
        counts[name] = {
            "equations": len(found),
            "in_loops": sum(c.in_loop for c in found),
            "executed_per_call": sum(c.executions for c in found),
            "bytes_per_call": sum(c.bytes_per_call for c in found),
        }
    return counts


def _hlo_collectives(compiled: dict) -> dict[str, dict[str, int | None]]:
    """Per program, the collective instructions XLA compiled (it may combine per-leaf all-reduces)."""
    import jax

    from shardscope.engine.hlo.compiled import compiled_plan

    counts = {}
    for name, program in compiled.items():
        plan = compiled_plan(program.as_text(), backend=jax.default_backend())
        counts[name] = {
            "instructions": len(plan.collectives),
            "in_loops": len(plan.findings),
            "executed_per_call": plan.executed_collectives,
        }
    return counts


def _errors(compiled: dict, args: tuple) -> dict[str, float]:
    """Max abs error of each plan, and of the floor's partials summed, against the unchunked VJP."""
    from shardscope.measure import timing
    from shardscope.plans import registry

    expected = compiled[registry.REFERENCE](*args)
    errors = {plan.name: timing.max_abs_err(plan.gradient(compiled[plan.name](*args)), expected)
              for plan in (registry.NAIVE, registry.DEFERRED)}
    errors["floor_summed"] = timing.max_abs_err(registry.FLOOR.gradient(compiled["floor"](*args)), expected)
    return errors


def _quartiles(values: list[float]) -> dict[str, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return {"p25": q1, "median": q2, "p75": q3, "min": min(values), "max": max(values)}



if __name__ == "__main__":
    main()
