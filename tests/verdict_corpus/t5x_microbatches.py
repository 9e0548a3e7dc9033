"""T5X's microbatched trainer: gradients accumulated over micro-batches, metrics merged with a cond.

T5X (``t5x/trainer.py``, ``accumulate_grads_microbatched``) runs a ``fori_loop`` over the
micro-batches; each one's gradient is added into ``grad_accum``, and its metrics are merged
into the running ones with ``lax.cond(i == 0, lambda _: m, lambda _: merge(prev, m), None)``:
the first micro-batch's metrics start the total, the others are added to it. Both are linear in
the micro-batch's values, so every sum could run once after the loop. ``t5x_jit`` is the jit
form (the partitioner sums), ``t5x_shard_map`` the per-device form with ``lax.psum``;
``t5x_max_merge`` merges the loss with ``jnp.maximum`` instead (not linear: the sum is needed).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO, BATCH, D_MODEL, D_FF = 4, 64, 32, 64

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
split = NamedSharding(mesh, P(None, "data"))

params = {
    "wi": jax.ShapeDtypeStruct((D_MODEL, D_FF), jnp.float32, sharding=replicated),
    "wo": jax.ShapeDtypeStruct((D_FF, D_MODEL), jnp.float32, sharding=replicated),
    "scale": jax.ShapeDtypeStruct((D_MODEL,), jnp.float32, sharding=replicated),
}
inputs = jax.ShapeDtypeStruct((MICRO, BATCH, D_MODEL), jnp.float32, sharding=split)
targets = jax.ShapeDtypeStruct((MICRO, BATCH, D_MODEL), jnp.float32, sharding=split)


def loss_and_metrics(params, x, y):
    h = jax.nn.relu(x @ params["wi"]) @ params["wo"]
    out = h * params["scale"]
    loss = jnp.mean((out - y) ** 2)
    return loss, {"loss": loss, "weight": jnp.float32(x.shape[0])}


def merge(a, b):
    return jax.tree.map(jnp.add, a, b)


def _accumulate(params, inputs, targets, combine=merge):
    grad_fn = jax.value_and_grad(loss_and_metrics, has_aux=True)
    zeros = jax.tree.map(jnp.zeros_like, params)
    metrics0 = {"loss": jnp.float32(0.0), "weight": jnp.float32(0.0)}

    def per_microbatch(i, state):
        grad_accum, prev_metrics = state
        (_, metrics), grad = grad_fn(params, inputs[i], targets[i])
        metrics = lax.cond(i == 0, lambda _: metrics, lambda _: combine(prev_metrics, metrics), None)
        return jax.tree.map(jnp.add, grad_accum, grad), metrics

    return lax.fori_loop(0, MICRO, per_microbatch, (zeros, metrics0))


@shardscope.program(args=(params, inputs, targets))
@jax.jit
def t5x_jit(params, inputs, targets):
    """jit and shardings: every micro-batch's gradient and metrics summed by the partitioner."""
    return _accumulate(params, inputs, targets)


@shardscope.program(args=(params, inputs, targets))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P())
def t5x_shard_map(params, inputs, targets):
    """Per device: the micro-batch's gradient (summed by jax.grad) and metrics summed with lax.psum."""
    grad_fn = jax.value_and_grad(loss_and_metrics, has_aux=True)
    zeros = jax.tree.map(jnp.zeros_like, params)
    metrics0 = {"loss": jnp.float32(0.0), "weight": jnp.float32(0.0)}

    def per_microbatch(i, state):
        grad_accum, prev_metrics = state
        (_, metrics), grad = grad_fn(params, inputs[i], targets[i])
        metrics = lax.psum(metrics, "data")
        metrics = lax.cond(i == 0, lambda _: metrics, lambda _: merge(prev_metrics, metrics), None)
        return jax.tree.map(jnp.add, grad_accum, grad), metrics

    return lax.fori_loop(0, MICRO, per_microbatch, (zeros, metrics0))


def _max_merge(a, b):
    return {"loss": jnp.maximum(a["loss"], b["loss"]), "weight": a["weight"] + b["weight"]}


@shardscope.program(args=(params, inputs, targets))
@jax.jit
def t5x_max_merge(params, inputs, targets):
    """The worst micro-batch loss kept with jnp.maximum: the loss's sum is read by the max."""
    return _accumulate(params, inputs, targets, combine=_max_merge)
