"""Training loops whose length is data: ``lax.while_loop`` with an unknown trip count.

``accumulate_until`` adds micro-batch gradients until a number of micro-batches given as an
argument is reached (the count is a runtime value): the sum only accumulates, so it could run
once after the loop, saving runs whose number is unknown. ``until_converged`` stops when the
global loss (summed over the devices in the loop's condition) is small enough: the condition
needs its sum on every test, and the body's gradient updates the weights the next test reads.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO, BATCH, D = 8, 64, 32

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
split = NamedSharding(mesh, P(None, "data"))

w = jax.ShapeDtypeStruct((D, D), jnp.float32, sharding=replicated)
xs = jax.ShapeDtypeStruct((MICRO, BATCH, D), jnp.float32, sharding=split)
count = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)


def reconstruction(w, x):
    return jnp.mean((jnp.tanh(x @ w) @ w.T - x) ** 2)


@shardscope.program(args=(w, xs, count))
@jax.jit
def accumulate_until(w, xs, count):
    """Gradients of the first ``count`` micro-batches, summed in a while loop."""

    def more(carry):
        return carry[0] < count

    def micro(carry):
        i, acc = carry
        return i + 1, acc + jax.grad(reconstruction)(w, xs[i])

    _, acc = lax.while_loop(more, micro, (0, jnp.zeros_like(w)))
    return acc


@shardscope.program(args=(w, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P())
def until_converged(w, xs):
    """Gradient steps on the first micro-batch until the loss summed over ``data`` falls below a threshold."""

    def not_converged(carry):
        i, w = carry
        return (lax.psum(reconstruction(w, xs[0]), "data") > 0.5) & (i < 100)

    def step(carry):
        i, w = carry
        return i + 1, w - 0.1 * jax.grad(reconstruction)(w, xs[0])

    _, w = lax.while_loop(not_converged, step, (0, w))
    return w
