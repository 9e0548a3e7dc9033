"""A data-parallel train step with gradient accumulation, written the way users write it.

``step`` splits the per-device batch into micro-batches, takes ``jax.grad`` of the loss on each
inside a ``lax.scan`` and adds it to an accumulator, then applies SGD. The parameters are
replicated (invariant over the ``batch`` axis), so the gradient of every micro-batch is
all-reduced inside the loop: 4 micro-batches, 4 all-reduces per parameter per step.
``step_fixed`` casts the parameters to varying before the loop, accumulates per device, and
all-reduces once after it. ``shardscope check demos/train_step.py --function step`` exits 1 and
prints that fix; ``--function step_fixed`` exits 0.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

MICRO_BATCHES, BATCH, D_IN, D_HIDDEN = 4, 64, 16, 32
LEARNING_RATE = 0.1

# shardscope sets the CPU device count before importing this file: a module-level mesh works.
mesh = Mesh(np.array(jax.devices()[:8]), ("batch",))

params = {
    "W1": jax.ShapeDtypeStruct((D_IN, D_HIDDEN), jnp.float32),
    "W2": jax.ShapeDtypeStruct((D_HIDDEN, 1), jnp.float32),
}
# (micro-batches, batch, features): the batch axis is split over the devices
xs = jax.ShapeDtypeStruct((MICRO_BATCHES, BATCH, D_IN), jnp.float32)
ys = jax.ShapeDtypeStruct((MICRO_BATCHES, BATCH, 1), jnp.float32)


def loss(params, x, y):
    """Mean squared error of a two-layer MLP on one micro-batch."""
    prediction = jnp.tanh(x @ params["W1"]) @ params["W2"]
    return jnp.mean((prediction - y) ** 2)


def _sgd(params, grads):
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g / MICRO_BATCHES, params, grads)


@shardscope.program(args=(params, xs, ys))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch"), P(None, "batch")), out_specs=P())
def step(params, xs, ys):
    """Naive: every micro-batch's gradient is all-reduced inside the scan."""

    def micro_batch(acc, batch):
        grads = jax.grad(loss)(params, *batch)
        return jax.tree.map(jnp.add, acc, grads), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    grads, _ = lax.scan(micro_batch, zeros, (xs, ys))
    return _sgd(params, grads)


@shardscope.program(args=(params, xs, ys))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch"), P(None, "batch")), out_specs=P())
def step_fixed(params, xs, ys):
    """Fixed: parameters cast to varying before the scan, one all-reduce per parameter after it."""
    local = jax.tree.map(lambda p: lax.pcast(p, "batch", to="varying"), params)

    def micro_batch(acc, batch):
        grads = jax.grad(loss)(local, *batch)
        return jax.tree.map(jnp.add, acc, grads), None

    zeros = jax.tree.map(lambda p: lax.pcast(jnp.zeros_like(p), "batch", to="varying"), params)
    grads, _ = lax.scan(micro_batch, zeros, (xs, ys))
    return _sgd(params, lax.psum(grads, "batch"))
