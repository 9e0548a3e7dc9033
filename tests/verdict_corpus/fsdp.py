"""FSDP over stacked layers, with micro-batches: weights gathered where they are used, gradients
scattered back to their shards.

``fsdp_gspmd`` is jit with shardings: the stacked layer weights ``[LAYERS, D, D]`` are sharded over
``data`` on their last dimension, the layers run in a ``lax.scan`` inside the gradient, and a
scan over the micro-batches accumulates the sharded gradients. The partitioner gathers each
layer's weights in the layer scan (the same weights in every micro-batch: the gather need not
run in the micro-batch loop) and reduce-scatters each layer's gradient, which the micro-batch
loop only accumulates. ``fsdp_shard_map`` writes the same per device with ``all_gather`` and
``psum_scatter``. ``fsdp_bf16_copy`` casts the sharded weights to bfloat16 before the loop and
gathers that copy inside it: the copy is carried through the loop unchanged, so its gather is
loop-invariant.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

LAYERS, MICRO, BATCH, D = 3, 4, 64, 64

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
fsdp = NamedSharding(mesh, P(None, None, "data"))
split = NamedSharding(mesh, P(None, "data"))

layers = jax.ShapeDtypeStruct((LAYERS, D, D), jnp.float32, sharding=fsdp)
xs = jax.ShapeDtypeStruct((MICRO, BATCH, D), jnp.float32, sharding=split)


def forward(layers, x):
    def layer(h, w):
        return jnp.tanh(h @ w), None

    h, _ = lax.scan(layer, x, layers)
    return jnp.mean(h ** 2)


@shardscope.program(args=(layers, xs))
@jax.jit
def fsdp_gspmd(layers, xs):
    """jit and shardings: the micro-batches' gradients of the stacked FSDP weights, accumulated sharded."""

    def micro(acc, x):
        g = jax.grad(forward)(layers, x)
        return acc + lax.with_sharding_constraint(g, fsdp), None

    acc, _ = lax.scan(micro, jnp.zeros_like(layers), xs)
    return acc


def _local_forward(layers, x):
    def layer(h, w_shard):
        w = lax.all_gather(w_shard, "data", axis=1, tiled=True)
        return jnp.tanh(h @ w), None

    h, _ = lax.scan(layer, x, layers)
    return jnp.mean(h ** 2)


@shardscope.program(args=(layers, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(None, None, "data"), P(None, "data")), out_specs=P(None, None, "data"))
def fsdp_shard_map(layers, xs):
    """Per device: all_gather each layer's shard in the layer scan; jax.grad psum_scatters its gradient."""

    def micro(acc, x):
        return acc + jax.grad(_local_forward)(layers, x), None

    acc, _ = lax.scan(micro, jnp.zeros_like(layers), xs)
    return acc


@shardscope.program(args=(layers, xs))
@jax.jit
def fsdp_bf16_copy(layers, xs):
    """A bfloat16 copy of the sharded weights made before the micro-batch loop and gathered inside it."""
    copy = layers.astype(jnp.bfloat16)

    def micro(total, x):
        full = lax.with_sharding_constraint(copy, NamedSharding(mesh, P()))
        h = x.astype(jnp.bfloat16)
        for k in range(LAYERS):
            h = jnp.tanh(h @ full[k])
        return total + jnp.mean(h.astype(jnp.float32) ** 2), None

    total, _ = lax.scan(micro, jnp.float32(0), xs)
    return total
