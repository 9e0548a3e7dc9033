"""Masked gradient accumulation, as equinox training loops write it.

A batch is split into micro-batches of which some are padding (``valid[i]`` false): each
micro-batch's gradient is added into the accumulator with ``jnp.where(valid[i], g, 0)``. The mask
is replicated (every device has the same ``valid``), so the masked sum is linear in the
gradient and could run once after the loop. ``eqx_masked`` is an equinox MLP under jit and
shardings, ``masked_shard_map`` the same per device; ``masked_by_shard`` masks with a value
computed from each device's own rows, which differs between devices: the sum is needed.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO, BATCH, IN, WIDTH, OUT = 4, 64, 16, 32, 4

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
split = NamedSharding(mesh, P(None, "data"))


def _model():
    model = eqx.nn.MLP(IN, OUT, WIDTH, depth=2, key=jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)
    return params, static


params, static = _model()
params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated), params)
xs = jax.ShapeDtypeStruct((MICRO, BATCH, IN), jnp.float32, sharding=split)
ys = jax.ShapeDtypeStruct((MICRO, BATCH, OUT), jnp.float32, sharding=split)
valid = jax.ShapeDtypeStruct((MICRO,), jnp.bool_, sharding=replicated)


def loss_fn(params, x, y):
    model = eqx.combine(params, static)
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def _masked_sum(params, xs, ys, valid):
    def micro(acc, i):
        grads = eqx.filter_grad(loss_fn)(params, xs[i], ys[i])
        grads = jax.tree.map(lambda g: jnp.where(valid[i], g, 0.0), grads)
        return jax.tree.map(jnp.add, acc, grads), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    acc, _ = lax.scan(micro, zeros, jnp.arange(MICRO))
    return acc


@shardscope.program(args=(params, xs, ys, valid))
@eqx.filter_jit
def eqx_masked(params, xs, ys, valid):
    """Equinox under jit and shardings: padded micro-batches masked out with a replicated mask."""
    return _masked_sum(params, xs, ys, valid)


@shardscope.program(args=(params, xs, ys, valid))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data"), P()), out_specs=P())
def masked_shard_map(params, xs, ys, valid):
    """The same per device: jax.grad sums each gradient over ``data``, masked by the replicated ``valid``."""
    return _masked_sum(params, xs, ys, valid)


@shardscope.program(args=(params, xs, ys))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P("data"))
def masked_by_shard(params, xs, ys):
    """A mask each device computes from its own rows (are any of its targets non-zero): it differs
    between devices, so each device keeps its own masked total (returned stacked over ``data``)."""

    def micro(acc, i):
        grads = jax.grad(loss_fn)(params, xs[i], ys[i])
        keep = jnp.any(ys[i] != 0)  # this device's rows only
        grads = jax.tree.map(lambda g: jnp.where(keep, g, 0.0), grads)
        return jax.tree.map(jnp.add, acc, grads), None

    zeros = jax.tree.map(lambda p: lax.pcast(jnp.zeros_like(p), "data", to="varying"), params)
    acc, _ = lax.scan(micro, zeros, jnp.arange(MICRO))
    return acc
