"""This machine's CPU as a chip: its peak compute and memory bandwidth, measured (``shardscope calibrate``).

No vendor figure describes a CPU as XLA uses it (its thread pool, this machine's other load),
so each number is the median of timed programs on one CPU device:

- **peak compute** per dtype: a square matmul (:data:`MATMUL_SIZE` cubed), ``2 x n^3`` flops;
- **memory bandwidth**: ``y = x * 2 + 1`` over :data:`STREAM_BYTES` of f32 (each element read
  and written once: twice the array's bytes moved);
- **per-call overhead**: a jitted scalar add (dispatch and synchronisation);
- **per-iteration overhead**: a ``lax.fori_loop`` of :data:`LOOP_ITERATIONS` scalar sines (which XLA cannot fold away), less
  one call, per iteration.
"""

from __future__ import annotations

from typing import Callable

from shardscope.hardware.chips import Chip
from shardscope.engine.compilation import compile_lowered
from shardscope.measure import timing

MATMUL_SIZE = 1024
STREAM_BYTES = 64 << 20
LOOP_ITERATIONS = 1000
CPU_DTYPES = ("f32", "bf16")
"""The dtypes whose matmul peak is measured (HLO's names)."""

_SOURCE = "measured by shardscope calibrate on this machine (one CPU device, median of the timed calls)"


def measure_cpu_chip(repeats: int = 10) -> Chip:
    """This machine's CPU as a :class:`Chip`: every number measured here (see the module's docstring)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    device = jax.devices("cpu")[0]
    n = MATMUL_SIZE
    peaks = {}
    for dtype in CPU_DTYPES:
        a = jax.device_put(jnp.ones((n, n), jnp.dtype("bfloat16" if dtype == "bf16" else "float32")), device)
        seconds = _median(lambda x: x @ x, (a,), repeats)
        peaks[dtype] = 2 * n**3 / seconds
    peaks["default"] = peaks["f32"]
    x = jax.device_put(jnp.ones((STREAM_BYTES // 4,), jnp.float32), device)
    bandwidth = 2 * STREAM_BYTES / _median(lambda v: v * 2 + 1, (x,), repeats)
    scalar = jax.device_put(jnp.float32(0), device)
    call = _median(lambda s: s + 1, (scalar,), repeats)
    loop = _median(lambda s: lax.fori_loop(0, LOOP_ITERATIONS, lambda i, c: jnp.sin(c), s), (scalar,), repeats)
    per_iteration = max(loop - call, 0.0) / LOOP_ITERATIONS
    return Chip("cpu", None, bandwidth, peaks, call_overhead_s=call, iteration_overhead_s=per_iteration,
                sources={"memory_bandwidth_Bps": _SOURCE, "peak_flops": _SOURCE, "overheads": _SOURCE},
                checked="this machine's CPU (shardscope calibrate)")


def _median(fn: Callable[..., object], args: tuple, repeats: int) -> float:
    """The median seconds of ``fn(*args)`` jitted, over ``repeats`` timed calls."""
    import jax

    compiled = compile_lowered(jax.jit(fn).lower(*args))
    return timing.time_interleaved({"program": compiled}, args, repeats)["program"].median
