"""Plain SGD over several steps inside one jitted call, the loss summed as a metric.

Each step takes the gradient of one batch, updates ``w`` with it (the next step reads ``w``) and
adds the batch's loss into a running total. The gradient's all-reduce and the loss's are merged
by XLA's combiner into one instruction: the gradient is needed in every step, the loss only
accumulates. ``sgd_fori`` (jit and shardings, a fori_loop), ``sgd_while`` (a ``lax.while_loop``
whose step count is an argument, so the trip count is unknown) and ``sgd_shard_map`` (the same
loop written per device, with ``lax.pmean``).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

STEPS, BATCH, FEATURES, OUT = 4, 64, 32, 8
LEARNING_RATE = 0.05

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
batches = NamedSharding(mesh, P(None, "data"))

w = jax.ShapeDtypeStruct((FEATURES, OUT), jnp.float32, sharding=replicated)
xs = jax.ShapeDtypeStruct((STEPS, BATCH, FEATURES), jnp.float32, sharding=batches)
ys = jax.ShapeDtypeStruct((STEPS, BATCH, OUT), jnp.float32, sharding=batches)
steps = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)


def mse(w, x, y):
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)


@shardscope.program(args=(w, xs, ys))
@jax.jit
def sgd_fori(w, xs, ys):
    """SGD for STEPS steps in a fori_loop; returns the trained weights and the summed loss."""

    def step(i, carry):
        w, total = carry
        loss, grad = jax.value_and_grad(mse)(w, xs[i], ys[i])
        return w - LEARNING_RATE * grad, total + loss

    return lax.fori_loop(0, STEPS, step, (w, jnp.float32(0.0)))


@shardscope.program(args=(w, xs, ys, steps))
@jax.jit
def sgd_while(w, xs, ys, steps):
    """The same SGD as a while loop over ``steps`` (at most STEPS) steps: the trip count is unknown."""

    def not_done(carry):
        i, _, _ = carry
        return i < steps

    def step(carry):
        i, w, total = carry
        loss, grad = jax.value_and_grad(mse)(w, xs[i], ys[i])
        return i + 1, w - LEARNING_RATE * grad, total + loss

    _, w, total = lax.while_loop(not_done, step, (0, w, jnp.float32(0.0)))
    return w, total


@shardscope.program(args=(w, xs, ys))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P())
def sgd_shard_map(w, xs, ys):
    """The same SGD per device: the gradient and the loss are averaged over ``data`` each step."""

    def step(i, carry):
        w, total = carry
        loss, grad = jax.value_and_grad(mse)(w, xs[i], ys[i])
        loss, grad = lax.pmean((loss, grad), "data")
        return w - LEARNING_RATE * grad, total + loss

    return lax.fori_loop(0, STEPS, step, (w, jnp.float32(0.0)))
