"""A Mixtral-shaped mixture-of-experts train step, data x expert x tensor parallel, written over any mesh.

The held-out program of benchmark 7b (``benchmarks/check_at_scale.py``): shaped differently from
``benchmarks/llama_model.py`` on purpose. Mixtral 8x7B's widths (d=4096, 32 query heads and 8
key-value heads of 128, 8 experts of a SwiGLU MLP of 14,336, 2 chosen per token, a vocabulary of
32,000) over 16 layers; the layers are stacked and scanned under a ``dots_saveable`` remat policy
(not a full ``jax.checkpoint``), the tokens are routed to their top-2 experts through dense
dispatch and combine tensors (as MaxText's dense MoE path does), the experts are sharded over
their own mesh axis, one step with no micro-batches, and an Adam update of moments kept in f32.
Everything is a ``jax.ShapeDtypeStruct``: the step is compiled, never run.

:func:`build` makes the step and its example arguments over a mesh with axes ``data``,
``expert`` and ``tp``: ``benchmarks/mixtral_step.py`` over 256 CPU devices,
``python -m benchmarks.bare_llama_target mixtral`` over the slice's compile-only devices.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from benchmarks.lm_parts import next_token_loss, rms_norm, sharded_weights

TINY = os.environ.get("SHARDSCOPE_LLAMA_SIZE") == "tiny"
"""Toy sizes on 8 devices (``SHARDSCOPE_LLAMA_SIZE=tiny``, as the Llama step's): the smoke run."""
LAYERS, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, EXPERTS, CHOSEN = (
    (2, 64, 4, 2, 16, 128, 256, 4, 2) if TINY else (16, 4096, 32, 8, 128, 14336, 32000, 8, 2))
BATCH, TOKENS = (8, 16) if TINY else (64, 2048)
"""64 sequences of 2,048 tokens in one step (no micro-batches; 8 per ``data`` shard)."""
MESH = {"data": 2, "expert": 2, "tp": 2} if TINY else {"data": 8, "expert": 8, "tp": 4}
AXES = tuple(MESH)
DEVICES = 8 if TINY else 256
TOPOLOGY = "v5e:2x4" if TINY else "v5p:8x8x4"


def _weights(mesh: Mesh) -> dict[str, Any]:
    layer = {
        "attn_norm": ((LAYERS, WIDTH), P()),
        "wqkv": ((LAYERS, WIDTH, (HEADS + 2 * KV_HEADS) * HEAD_DIM), P(None, "data", "tp")),
        "wo": ((LAYERS, HEADS * HEAD_DIM, WIDTH), P(None, "tp", "data")),
        "mlp_norm": ((LAYERS, WIDTH), P()),
        "router": ((LAYERS, WIDTH, EXPERTS), P()),
        "w1": ((LAYERS, EXPERTS, WIDTH, FFN), P(None, "expert", "data", "tp")),
        "w3": ((LAYERS, EXPERTS, WIDTH, FFN), P(None, "expert", "data", "tp")),
        "w2": ((LAYERS, EXPERTS, FFN, WIDTH), P(None, "expert", "tp", "data")),
    }
    return sharded_weights(mesh, layer, VOCAB, WIDTH, "data")


def _attention(h: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    batch = h.shape[0]
    qkv = (h @ p["wqkv"]).reshape(batch, TOKENS, HEADS + 2 * KV_HEADS, HEAD_DIM)
    q, k, v = qkv[:, :, :HEADS], qkv[:, :, HEADS:HEADS + KV_HEADS], qkv[:, :, HEADS + KV_HEADS:]
    q = q.reshape(batch, TOKENS, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) * HEAD_DIM ** -0.5
    mask = jnp.tril(jnp.ones((TOKENS, TOKENS), bool))
    weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), -1).astype(h.dtype)
    return jnp.einsum("bkgts,bskd->btkgd", weights, v).reshape(batch, TOKENS, HEADS * HEAD_DIM) @ p["wo"]


def _experts(h: jax.Array, p: dict[str, jax.Array], mesh: Mesh) -> jax.Array:
    """Top-2 routing through dense dispatch and combine tensors (tokens x experts)."""
    logits = (h @ p["router"]).astype(jnp.float32)
    top, chosen = lax.top_k(logits, CHOSEN)
    gates = jax.nn.softmax(top, -1)
    combine = jnp.sum(jax.nn.one_hot(chosen, EXPERTS, dtype=jnp.float32) * gates[..., None], -2).astype(h.dtype)
    routed = lax.with_sharding_constraint(jnp.einsum("btd,bte->ebtd", h, combine),
                                          NamedSharding(mesh, P("expert", "data", None, None)))
    hidden = jax.nn.silu(jnp.einsum("ebtd,edf->ebtf", routed, p["w1"])) * jnp.einsum("ebtd,edf->ebtf", routed, p["w3"])
    out = jnp.einsum("ebtf,efd->ebtd", hidden, p["w2"])
    return jnp.sum(out, 0)


def _layer(mesh: Mesh) -> Callable:
    activations = NamedSharding(mesh, P("data", None, None))

    def layer(x: jax.Array, p: dict[str, jax.Array]) -> tuple[jax.Array, None]:
        x = x + _attention(rms_norm(x, p["attn_norm"]), p)
        x = x + _experts(rms_norm(x, p["mlp_norm"]), p, mesh)
        return lax.with_sharding_constraint(x, activations), None

    return jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)


def build(mesh: Mesh) -> tuple[Callable, tuple[Any, Any, Any]]:
    """The jitted train step over ``mesh`` (axes ``data``, ``expert``, ``tp``) and its example
    arguments (the weights, Adam's two moments, the batch)."""
    layer = _layer(mesh)

    loss = next_token_loss(layer)

    @jax.jit
    def step(params: dict[str, Any], moments: tuple[Any, Any], tokens: jax.Array) -> tuple[Any, Any]:
        grads = jax.grad(loss)(params, tokens)
        first = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g.astype(jnp.float32), moments[0], grads)
        second = jax.tree.map(lambda v, g: 0.95 * v + 0.05 * jnp.square(g.astype(jnp.float32)), moments[1], grads)
        params = jax.tree.map(lambda p, m, v: (p - 1e-4 * m / (jnp.sqrt(v) + 1e-8)).astype(p.dtype),
                              params, first, second)
        return params, (first, second)

    weights = _weights(mesh)
    moment = jax.tree.map(lambda w: jax.ShapeDtypeStruct(w.shape, jnp.float32, sharding=w.sharding), weights)
    tokens = jax.ShapeDtypeStruct((BATCH, TOKENS), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    return step, (weights, (moment, moment), tokens)
