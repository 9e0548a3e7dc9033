"""A 12-layer transformer train step with 4-step gradient accumulation, in both styles (a program file).

``step_shardings``: jit with shardings (the parameters replicated, the batch sharded over ``data``
of a 4x2 mesh; the partitioner writes the collectives). ``step_shard_map``: the same model and
batch under ``jax.shard_map`` over ``data`` (the program writes them: the implicit ``pvary``'s
transpose sums each parameter's gradient in every micro-batch). Benchmark 4a
(``benchmarks/check_cost.py``) times ``shardscope check`` on each against JAX's own
``lower(*args).compile()`` of the same program (``benchmarks/bare_compile.py``).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

LAYERS = int(os.environ.get("SHARDSCOPE_TRANSFORMER_LAYERS", "12"))  # fewer in a benchmark's smoke run
WIDTH, HEADS, FFN, TOKENS, BATCH, MICRO, VOCAB = 64, 4, 256, 32, 16, 4, 256

mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
replicated = NamedSharding(mesh, P())


def _layer() -> dict:
    shapes = {"qkv": (WIDTH, 3 * WIDTH), "o": (WIDTH, WIDTH), "w1": (WIDTH, FFN), "w2": (FFN, WIDTH),
              "ln1": (WIDTH,), "ln2": (WIDTH,)}
    return {name: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=replicated) for name, shape in shapes.items()}


params = {"embed": jax.ShapeDtypeStruct((VOCAB, WIDTH), jnp.float32, sharding=replicated),
          "layers": [_layer() for _ in range(LAYERS)]}
batches = jax.ShapeDtypeStruct((MICRO, BATCH, TOKENS), jnp.int32, sharding=NamedSharding(mesh, P(None, "data")))


def _norm(x, g):
    return g * (x - x.mean(-1, keepdims=True)) * lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)


def _block(p, x):
    h = _norm(x, p["ln1"])
    q, k, v = jnp.split(h @ p["qkv"], 3, -1)
    q, k, v = (a.reshape(a.shape[0], TOKENS, HEADS, WIDTH // HEADS) for a in (q, k, v))
    mask = jnp.tril(jnp.ones((TOKENS, TOKENS), bool))
    att = jnp.where(mask, jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(WIDTH // HEADS), -1e9)
    x = x + jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(att, -1), v).reshape(x.shape) @ p["o"]
    return x + jax.nn.gelu(_norm(x, p["ln2"]) @ p["w1"]) @ p["w2"]


def loss(params, tokens):
    """Next-token cross entropy (against token 0, a fixed target: the cost, not the task, matters)."""
    x = params["embed"][tokens]
    for p in params["layers"]:
        x = _block(p, x)
    return -jnp.mean(jax.nn.log_softmax(x @ params["embed"].T)[..., 0])


def _accumulate(params, batches, scale=1.0):
    def body(acc, tokens):
        return jax.tree.map(jnp.add, acc, jax.grad(lambda p, t: loss(p, t) * scale)(params, tokens)), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    return lax.scan(body, zeros, batches)[0]


@shardscope.program(args=(params, batches))
@jax.jit
def step_shardings(params, batches):
    """jit with shardings: the partitioner all-reduces the gradients in the micro-batch loop."""
    grads = _accumulate(params, batches)
    return jax.tree.map(lambda p, g: p - 1e-3 * g / MICRO, params, grads)


@shardscope.program(args=(params, batches))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P(), axis_names={"data"})
def step_shard_map(params, batches):
    """shard_map over data: each parameter's gradient is psum-ed in every micro-batch."""
    grads = _accumulate(params, batches, scale=1.0 / mesh.shape["data"])
    return jax.tree.map(lambda p, g: p - 1e-3 * g / MICRO, params, grads)
