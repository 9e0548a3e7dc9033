"""Gradient accumulation under jax.jit with Explicit mesh axes: the naive loop, and the reduced/unreduced fix.

With Explicit axes the shardings are part of the types. ``step`` takes ``jax.grad`` of each
micro-batch of a replicated weight inside a ``lax.scan``: the gradient is summed over ``data``
in every iteration, 4 all-reduces per step (``shardscope check`` exits 1). ``step_fixed``
reshards the weight ``reduced`` over ``data`` (each device may hold a partial sum of its
gradient), starts the accumulator ``unreduced`` and reshards the sum to replicated once after
the loop: one all-reduce per step, the same gradient. A scan's xs must not be sharded on their
leading axis under Explicit axes, so the micro-batch axis comes first and the batch axis,
sharded, after it. On jax 0.10.2 the unreduced accumulator compiles only with the Shardy
partitioner (``jax_use_shardy_partitioner``, on by default); GSPMD refuses it.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import shardscope

MICRO_BATCHES, BATCH, D_IN, D_OUT = 4, 64, 16, 8
LEARNING_RATE = 0.1

mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:8])
replicated = NamedSharding(mesh, P())
batch_split = NamedSharding(mesh, P(None, "data"))

W = jax.ShapeDtypeStruct((D_IN, D_OUT), jnp.float32, sharding=replicated)
xs = jax.ShapeDtypeStruct((MICRO_BATCHES, BATCH, D_IN), jnp.float32, sharding=batch_split)
ys = jax.ShapeDtypeStruct((MICRO_BATCHES, BATCH, D_OUT), jnp.float32, sharding=batch_split)


def loss(W, x, y):
    """Mean squared error of one tanh layer on one micro-batch."""
    return jnp.mean((jnp.tanh(x @ W) - y) ** 2)


@shardscope.program(args=(W, xs, ys))
@jax.jit
def step(W, xs, ys):
    """Naive: every micro-batch's gradient of the replicated W is all-reduced inside the scan."""

    def micro_batch(acc, batch):
        return acc + jax.grad(loss)(W, *batch), None

    grads, _ = lax.scan(micro_batch, jnp.zeros_like(W), (xs, ys))
    return W - LEARNING_RATE * grads / MICRO_BATCHES


@shardscope.program(args=(W, xs, ys))
@jax.jit
def step_fixed(W, xs, ys):
    """Fixed: W reduced, the accumulator unreduced, one reshard to replicated (one all-reduce) after the loop."""
    Wr = jax.reshard(W, NamedSharding(mesh, P(None, None, reduced={"data"})))

    def micro_batch(acc, batch):
        return acc + jax.grad(loss)(Wr, *batch), None

    zeros = jax.reshard(jnp.zeros_like(W), NamedSharding(mesh, P(None, None, unreduced={"data"})))
    grads, _ = lax.scan(micro_batch, zeros, (xs, ys))
    return W - LEARNING_RATE * jax.reshard(grads, replicated) / MICRO_BATCHES
