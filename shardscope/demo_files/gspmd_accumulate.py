"""Gradient accumulation under jax.jit with sharded inputs and no shard_map, as most training code is written.

The parameters are replicated and each micro-batch is split over the ``data`` axis by the
sharding of the inputs; ``jax.grad`` of every micro-batch is added into a ``lax.scan`` carry.
The jaxpr has no collective at all: the partitioner (Shardy or GSPMD) writes the all-reduce of
the gradients while compiling, inside the loop, so it runs once per micro-batch (4 per step).
``shardscope check demos/gspmd_accumulate.py --function step`` finds it in the compiled module
and exits 1. Auto axes cannot tell the partitioner to accumulate unreduced; ``step_fixed`` runs
the loop inside ``jax.shard_map`` with the parameters cast to varying and all-reduces once after
it (``demos/explicit_accumulate.py`` does the same with Explicit axes).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO_BATCHES, BATCH, D_IN, D_HIDDEN = 4, 64, 16, 32
LEARNING_RATE = 0.1

# shardscope sets the CPU device count before importing this file: a module-level mesh works.
mesh = Mesh(np.array(jax.devices()[:8]), ("data",))  # Auto axes: the partitioner places the collectives
replicated = NamedSharding(mesh, P())
batch_split = NamedSharding(mesh, P(None, "data"))  # (micro-batch, batch, ...): the batch over "data"

params = {
    "W1": jax.ShapeDtypeStruct((D_IN, D_HIDDEN), jnp.float32, sharding=replicated),
    "W2": jax.ShapeDtypeStruct((D_HIDDEN, 1), jnp.float32, sharding=replicated),
}
xs = jax.ShapeDtypeStruct((MICRO_BATCHES, BATCH, D_IN), jnp.float32, sharding=batch_split)
ys = jax.ShapeDtypeStruct((MICRO_BATCHES, BATCH, 1), jnp.float32, sharding=batch_split)


def loss(params, x, y):
    """Mean squared error of a two-layer MLP on one micro-batch."""
    prediction = jnp.tanh(x @ params["W1"]) @ params["W2"]
    return jnp.mean((prediction - y) ** 2)


def _sgd(params, grads):
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g / MICRO_BATCHES, params, grads)


@shardscope.program(args=(params, xs, ys))
@jax.jit
def step(params, xs, ys):
    """Naive: the partitioner all-reduces every micro-batch's gradient inside the scan."""

    def micro_batch(acc, batch):
        grads = jax.grad(loss)(params, *batch)
        return jax.tree.map(jnp.add, acc, grads), None

    grads, _ = lax.scan(micro_batch, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    return _sgd(params, grads)


@shardscope.program(args=(params, xs, ys))
@jax.jit
def step_fixed(params, xs, ys):
    """Fixed: the loop inside a shard_map, each device accumulating its own gradient, one pmean after it."""

    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P())
    def accumulate(params, xs, ys):
        local = jax.tree.map(lambda p: lax.pcast(p, "data", to="varying"), params)

        def micro_batch(acc, batch):
            grads = jax.grad(loss)(local, *batch)
            return jax.tree.map(jnp.add, acc, grads), None

        zeros = jax.tree.map(lambda p: lax.pcast(jnp.zeros_like(p), "data", to="varying"), params)
        grads, _ = lax.scan(micro_batch, zeros, (xs, ys))
        return lax.pmean(grads, "data")  # each device's mean over its rows, averaged: the global mean

    return _sgd(params, accumulate(params, xs, ys))
