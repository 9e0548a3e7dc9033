"""Gradient accumulation with FSDP under jax.jit: the parameters sharded over ``data`` too.

Each weight is sharded on its first axis over the 8 devices, as are the micro-batches; the
partitioner gathers the weights for every micro-batch and reduce-scatters each gradient back to
its shard, inside the ``lax.scan``. The reduce-scatters' sums could wait until after the loop
(an accumulator of the gathered size, one reduce-scatter after it), at the memory of a whole
gradient per device. Unlike a replicated gradient's all-reduce, no compiler moves them: on
``--target gpu:h100:8`` they stay in the loop, 4 runs per call each.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO_BATCHES, BATCH, D_IN, D_HIDDEN = 4, 64, 512, 1024

# shardscope sets the CPU device count before importing this file: a module-level mesh works.
mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
sharded = NamedSharding(mesh, P("data"))  # a weight's first axis over "data": each device holds 1/8

params = {"w1": jax.ShapeDtypeStruct((D_IN, D_HIDDEN), jnp.float32, sharding=sharded),
          "w2": jax.ShapeDtypeStruct((D_HIDDEN, D_IN), jnp.float32, sharding=sharded)}
xs = jax.ShapeDtypeStruct((MICRO_BATCHES, BATCH, D_IN), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))


def loss(params, x):
    """A two-layer MLP's mean output on one micro-batch."""
    return jnp.mean(jnp.tanh(x @ params["w1"]) @ params["w2"])


@shardscope.program(args=(params, xs))
@jax.jit
def step(params, xs):
    """The gradients of 4 micro-batches added in a scan, returned sharded like the weights."""
    def micro(acc, x):
        return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, x)), None

    grads, _ = lax.scan(micro, jax.tree.map(jnp.zeros_like, params), xs)
    return jax.tree.map(lambda g: lax.with_sharding_constraint(g, sharded), grads)
