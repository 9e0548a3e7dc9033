"""The pattern of the discussion shardscope answers: a vjp in chunks inside a shard_map'd scan.

``f(W, x) -> x @ W`` with ``x`` sharded over ``s``; the vjp of the replicated ``W`` is computed
chunk by chunk in a ``lax.scan`` and accumulated. The vjp of a replicated parameter sums over
``s`` (``psum_invariant``) in every chunk: ``seed_one_leaf`` (``W: f32[M]``) and
``seed_three_leaves`` (a weight, a bias and a scale: XLA's combiner merges the three sums).
``seed_pvary`` is the answer of the discussion: ``W`` cast to varying before the scan and one
psum after it.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

M, N, CHUNK = 5, 512, 16

mesh = Mesh(np.array(jax.devices()[:8]), ("s",))
W = jax.ShapeDtypeStruct((M,), jnp.float32, sharding=NamedSharding(mesh, P()))
xs = jax.ShapeDtypeStruct((N, M), jnp.float32, sharding=NamedSharding(mesh, P("s")))
v = jax.ShapeDtypeStruct((N,), jnp.float32, sharding=NamedSharding(mesh, P("s")))
layer = {"W": W, "b": jax.ShapeDtypeStruct((), jnp.float32, sharding=NamedSharding(mesh, P())),
         "scale": jax.ShapeDtypeStruct((M,), jnp.float32, sharding=NamedSharding(mesh, P()))}


def model(W, x):
    return x @ W


def affine(p, x):
    return (x * p["scale"]) @ p["W"] + p["b"]


def _chunks(xs_shard, v_shard):
    chunks = xs_shard.shape[0] // CHUNK
    return xs_shard.reshape((chunks, CHUNK, M)), v_shard.reshape((chunks, CHUNK))


@shardscope.program(args=(W, xs, v))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(None), P("s"), P("s")), out_specs=P(None))
def seed_one_leaf(W, xs_shard, v_shard):
    """The discussion's program: the vjp of ``W`` chunk by chunk, accumulated in a scan."""

    def body(acc, inputs):
        x_c, v_c = inputs
        _, vjp_fn = jax.vjp(lambda w: model(w, x_c), W)
        return acc + vjp_fn(v_c)[0], None

    grad, _ = lax.scan(body, jnp.zeros_like(W), _chunks(xs_shard, v_shard))
    return grad


@shardscope.program(args=(layer, xs, v))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P("s"), P("s")), out_specs=P())
def seed_three_leaves(p, xs_shard, v_shard):
    """The same with three parameter leaves (weight, bias, scale)."""

    def body(acc, inputs):
        x_c, v_c = inputs
        _, vjp_fn = jax.vjp(lambda q: affine(q, x_c), p)
        return jax.tree.map(jnp.add, acc, vjp_fn(v_c)[0]), None

    grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, p), _chunks(xs_shard, v_shard))
    return grads


@shardscope.program(args=(W, xs, v))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(None), P("s"), P("s")), out_specs=P(None))
def seed_pvary(W, xs_shard, v_shard):
    """The answer: ``W`` cast to varying before the scan, one psum after it."""
    W = lax.pcast(W, "s", to="varying")

    def body(acc, inputs):
        x_c, v_c = inputs
        _, vjp_fn = jax.vjp(lambda w: model(w, x_c), W)
        return acc + vjp_fn(v_c)[0], None

    grad, _ = lax.scan(body, jnp.zeros_like(W), _chunks(xs_shard, v_shard))
    return lax.psum(grad, "s")
