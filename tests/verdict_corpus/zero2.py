"""ZeRO-2: replicated weights, gradients reduce-scattered into a sharded accumulator.

Each device keeps one shard of the gradient accumulator: every micro-batch's gradient is
reduce-scattered (``lax.psum_scatter``) and the device's shard added to its accumulator. The
accumulator is only added to, so one reduce-scatter of the whole per-device sum after the loop
would give the same shards (its accumulator then holds the whole unscattered gradient).
``zero2_shard_map`` writes it per device (two weights: two reduce-scatters, which XLA may
combine), ``zero2_gspmd`` with jit and an accumulator sharded over ``data``.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO, BATCH, D, H = 4, 64, 64, 128

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
split = NamedSharding(mesh, P(None, "data"))
rows = NamedSharding(mesh, P("data"))

params = {"up": jax.ShapeDtypeStruct((D, H), jnp.float32, sharding=replicated),
          "down": jax.ShapeDtypeStruct((H, D), jnp.float32, sharding=replicated)}
xs = jax.ShapeDtypeStruct((MICRO, BATCH, D), jnp.float32, sharding=split)


def mlp_loss(params, x):
    return jnp.mean((jax.nn.gelu(x @ params["up"]) @ params["down"] - x) ** 2)


@shardscope.program(args=(params, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P("data"))
def zero2_shard_map(params, xs):
    """Per device: each micro-batch's gradient psum_scattered over ``data`` into the device's shard."""
    local = jax.tree.map(lambda p: lax.pcast(p, "data", to="varying"), params)

    def micro(acc, x):
        g = jax.grad(mlp_loss)(local, x)
        g = jax.tree.map(lambda a: lax.psum_scatter(a, "data", scatter_dimension=0, tiled=True), g)
        return jax.tree.map(jnp.add, acc, g), None

    zeros = jax.tree.map(lambda p: jnp.zeros((p.shape[0] // 8, *p.shape[1:]), p.dtype), params)
    zeros = jax.tree.map(lambda z: lax.pcast(z, "data", to="varying"), zeros)
    acc, _ = lax.scan(micro, zeros, xs)
    return acc


@shardscope.program(args=(params, xs))
@jax.jit
def zero2_gspmd(params, xs):
    """jit and shardings: the gradient accumulator constrained to rows sharded over ``data``."""

    def micro(acc, x):
        g = jax.grad(mlp_loss)(params, x)
        g = lax.with_sharding_constraint(g, {"up": rows, "down": rows})
        return jax.tree.map(jnp.add, acc, g), None

    zeros = lax.with_sharding_constraint(jax.tree.map(jnp.zeros_like, params), {"up": rows, "down": rows})
    acc, _ = lax.scan(micro, zeros, xs)
    return acc
