"""A small training step run for real with ``XLA_FLAGS=--xla_dump_to=DIR`` (``python
_xla_dump_step.py DIR``): the compiled modules a real run writes, for ``check --xla-dump``'s
tests. The step accumulates a gradient over micro-batches in a ``fori_loop`` inside
``shard_map`` and sums it across the data axis in every iteration: one all-reduce in the loop,
which is deferrable. The same file is imported by the test to trace the same program.
"""

from __future__ import annotations

import os
import sys
from functools import partial

MICRO = 4
DEVICES = 8


def step_and_arguments():
    """``(jitted step, (params, xs, ys))`` on a mesh of the 8 CPU devices."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(jax.devices()[:DEVICES], ("data",))

    def loss(w, x, y):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P())
    def accumulate(w, xs, ys):
        def body(i, g):
            grad = jax.grad(loss)(w, xs[i], ys[i])
            return g + jax.lax.psum(grad, "data")

        return jax.lax.fori_loop(0, MICRO, body, jnp.zeros_like(w))

    @jax.jit
    def step(w, xs, ys):
        return w - 0.1 * accumulate(w, xs, ys)

    w = jnp.ones((16, 8), jnp.float32) * 0.01
    xs = jax.device_put(jnp.ones((MICRO, 64, 16), jnp.float32), NamedSharding(mesh, P(None, "data")))
    ys = jax.device_put(jnp.zeros((MICRO, 64, 8), jnp.float32), NamedSharding(mesh, P(None, "data")))
    return step, (w, xs, ys)


def main(out: str) -> None:
    os.environ["XLA_FLAGS"] = f"--xla_dump_to={out} " + os.environ.get("XLA_FLAGS", "")
    import jax

    jax.config.update("jax_num_cpu_devices", DEVICES)
    step, args = step_and_arguments()
    jax.block_until_ready(step(*args))


if __name__ == "__main__":
    main(sys.argv[1])
