"""A small transformer-shaped train step written for any mesh of data, fsdp and tensor axes: which layout is fastest?

``build(mesh, per_device_batch)`` shards the weights as MaxText does (each weight's model
dimension over ``fsdp``, its heads or hidden dimension over ``tensor``; ``data`` replicates them),
the batch over ``data`` x ``fsdp``, scans its layers under ``jax.checkpoint`` and takes one AdamW
step. ``shardscope layouts transformer_layouts --target tpu:v5e:2x4`` compiles every assignment
of the slice's 8 chips to the three axes, at each per-device batch, and ranks them.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

import shardscope

LAYERS, WIDTH, HEADS, HEAD_DIM, HIDDEN, VOCAB, TOKENS = 2, 256, 8, 32, 1024, 512, 64
MATMUL_PARAMETERS = LAYERS * (4 * WIDTH * HEADS * HEAD_DIM + 2 * WIDTH * HIDDEN) + WIDTH * VOCAB
FLOPS_PER_TOKEN = 6 * MATMUL_PARAMETERS + 6 * LAYERS * TOKENS * HEADS * HEAD_DIM
"""A train step's model flops per token: 6 per matmul parameter (forward and backward) and the causal
attention's, as MaxText counts them."""


def _weights(mesh):
    def leaf(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    return {
        "embed": leaf((VOCAB, WIDTH), P("tensor", "fsdp")),
        "layers": {
            "wqkv": leaf((LAYERS, WIDTH, 3, HEADS, HEAD_DIM), P(None, "fsdp", None, "tensor")),
            "wo": leaf((LAYERS, HEADS, HEAD_DIM, WIDTH), P(None, "tensor", None, "fsdp")),
            "w1": leaf((LAYERS, WIDTH, HIDDEN), P(None, "fsdp", "tensor")),
            "w2": leaf((LAYERS, HIDDEN, WIDTH), P(None, "tensor", "fsdp")),
        },
        "head": leaf((WIDTH, VOCAB), P("fsdp", "tensor")),
    }


def _loss(mesh):
    between = NamedSharding(mesh, P(("data", "fsdp"), None, "tensor"))

    @jax.checkpoint
    def layer(x, p):
        w = jax.tree.map(lambda a: a.astype(jnp.bfloat16), p)
        q, k, v = (jnp.einsum("btd,dhk->bthk", x, w["wqkv"][:, i]) for i in range(3))
        scores = jnp.einsum("bthk,bshk->bhts", q, k, preferred_element_type=jnp.float32)
        mask = jnp.tril(jnp.ones((TOKENS, TOKENS), bool))
        weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), -1).astype(jnp.bfloat16)
        x = x + jnp.einsum("bhts,bshk,hkd->btd", weights, v, w["wo"])
        x = x + jax.nn.gelu(x @ w["w1"]) @ w["w2"]
        return lax.with_sharding_constraint(x, between), None

    def loss(params, tokens):
        x = lax.with_sharding_constraint(params["embed"].astype(jnp.bfloat16)[tokens], between)
        x, _ = lax.scan(layer, x, params["layers"])
        logits = jnp.einsum("btd,dv->btv", x, params["head"].astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        chosen = jnp.take_along_axis(logits, jnp.roll(tokens, -1, 1)[..., None], -1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, -1) - chosen)

    return loss


def _adamw(params, grads, m, v):
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree.map(lambda v, g: 0.95 * v + 0.05 * g * g, v, grads)
    params = jax.tree.map(lambda p, m, v: p - 1e-4 * (m / (jnp.sqrt(v) + 1e-8) + 0.1 * p), params, m, v)
    return params, m, v


@shardscope.layouts(axes=("data", "fsdp", "tensor"), options={"per_device_batch": [1, 4]},
                    tokens=lambda mesh, per_device_batch: per_device_batch * mesh.size * TOKENS,
                    model_flops=FLOPS_PER_TOKEN)
def build(mesh, per_device_batch):
    """One AdamW train step over ``mesh``; the global batch is ``per_device_batch`` per device."""
    batch = per_device_batch * mesh.size
    loss = _loss(mesh)

    @jax.jit
    def step(state, tokens):
        value, grads = jax.value_and_grad(loss)(state["params"], tokens)
        params, m, v = _adamw(state["params"], grads, state["m"], state["v"])
        return {"params": params, "m": m, "v": v}, value

    params = _weights(mesh)
    tokens = jax.ShapeDtypeStruct((batch, TOKENS), jnp.int32, sharding=NamedSharding(mesh, P(("data", "fsdp"))))
    return step, ({"params": params, "m": params, "v": params}, tokens)
