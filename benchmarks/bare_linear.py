"""The bare-JAX baseline of ``shardscope report demos/linear.py --json``: no shardscope at all.

What an engineer would write by hand to get the same numbers: the same model and sizes as
``demos/linear.py`` (``x @ W``, ``W`` of 5 parameters, a batch of 64), the report's defaults
(2 devices, chunk size 16, 20 timed runs after 2 warm-up rounds), the naive and deferred plans
traced, compiled and timed interleaved. ``--with-reference`` also compiles the unchunked VJP,
times it with the plans and checks both gradients against it, which is all the numeric work
the report does (it additionally builds its jaxpr model, dataflow graph and HLO summary).

Run: ``python benchmarks/bare_linear.py [--with-reference]``; prints one JSON line.
"""

import json
import statistics
import sys
import time

import jax

DEVICES, CHUNK, REPEATS, WARMUP, AXIS = 2, 16, 20, 2, "s"
jax.config.update("jax_num_cpu_devices", DEVICES)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402


def f(W, x):
    return x @ W


def scan_vjp(params, x, v, init):
    chunks = x.shape[0] // CHUNK
    xs = x.reshape(chunks, CHUNK, *x.shape[1:])
    vs = v.reshape(chunks, CHUNK, *v.shape[1:])

    def body(acc, chunk):
        x_chunk, v_chunk = chunk
        _, pullback = jax.vjp(lambda p: f(p, x_chunk), params)
        return acc + pullback(v_chunk)[0], None

    return lax.scan(body, init, (xs, vs))[0]


def naive(W, x, v):
    return scan_vjp(W, x, v, jnp.zeros_like(W))


def deferred(W, x, v):
    W = lax.pcast(W, AXIS, to="varying")
    return lax.psum(scan_vjp(W, x, v, jnp.zeros_like(W)), AXIS)


def reference(W, x, v):
    _, pullback = jax.vjp(lambda p: f(p, x), W)
    return pullback(v)[0]


def main() -> None:
    with_reference = "--with-reference" in sys.argv
    rng = np.random.default_rng(0)
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), (AXIS,))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
    args = (
        jax.device_put(rng.standard_normal(5).astype(np.float32), replicated),
        jax.device_put(rng.standard_normal((64, 5)).astype(np.float32), sharded),
        jax.device_put(rng.standard_normal(64).astype(np.float32), sharded),
    )
    programs = {
        name: jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P(), check_vma=True))
        for name, local in (("naive", naive), ("deferred", deferred))
    }
    if with_reference:
        programs["reference"] = jax.jit(reference, out_shardings=replicated)
    compiled = {name: fn.trace(*args).lower().compile() for name, fn in programs.items()}

    for _ in range(WARMUP):
        for fn in compiled.values():
            jax.block_until_ready(fn(*args))
    samples = {name: [] for name in compiled}
    for _ in range(REPEATS):
        for name, fn in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            samples[name].append(time.perf_counter() - start)
    result = {name: statistics.median(s) for name, s in samples.items()}
    if with_reference:
        expected = np.asarray(compiled["reference"](*args))
        result["max_abs_err"] = max(
            float(np.max(np.abs(np.asarray(compiled[name](*args)) - expected))) for name in ("naive", "deferred")
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
