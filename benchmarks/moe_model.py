"""A small Mixtral-like mixture-of-experts train step, data x expert parallel, over any mesh.

Benchmark 7b's held-out program for short compiles (``benchmarks/check_at_scale.py``), shaped
unlike the Llama steps on purpose and written before it was measured: 4 layers written out by a
Python loop (no scan), each under ``jax.checkpoint``; d=2048, 16 heads of 128 with no grouped
key-values, 8 experts of a SwiGLU MLP of 5,632 with 2 chosen per token (MaxText's dense dispatch
and combine tensors), a vocabulary of 32,000; the tokens over ``data``, each expert's weights on
its own ``expert`` shard and the dense weights over ``data`` (ZeRO-3 style), plain SGD with
momentum kept in bf16. Everything is a ``jax.ShapeDtypeStruct``: compiled, never run.

``SHARDSCOPE_SCALE_CHIPS=1024`` lays it over 1,024 chips (``v5p:8x8x16``: data 128 x expert 8);
the default is 256 (``v5p:8x8x4``: data 32 x expert 8). :func:`build` makes the step over a mesh:
``benchmarks/moe_step.py`` over the CPU devices, ``python -m benchmarks.bare_llama_target moe``
over the slice's compile-only devices.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from benchmarks.lm_parts import rms_norm

TINY = os.environ.get("SHARDSCOPE_LLAMA_SIZE") == "tiny"
"""Toy sizes on 8 devices (``SHARDSCOPE_LLAMA_SIZE=tiny``): the smoke run."""
CHIPS = 8 if TINY else int(os.environ.get("SHARDSCOPE_SCALE_CHIPS", "256"))
LAYERS, WIDTH, HEADS, HEAD_DIM, FFN, VOCAB, EXPERTS, CHOSEN = (
    (1, 64, 4, 16, 128, 256, 4, 2) if TINY else (4, 2048, 16, 128, 5632, 32000, 8, 2))
EXPERT_SHARDS = 2 if TINY else 8
MESH = {"data": CHIPS // EXPERT_SHARDS, "expert": EXPERT_SHARDS}
DEVICES = CHIPS
BATCH, TOKENS = (8, 16) if TINY else (2 * CHIPS, 1024)
"""2 sequences of 1,024 tokens per chip."""
TOPOLOGY = {8: "v5e:2x4", 256: "v5p:8x8x4", 1024: "v5p:8x8x16"}[CHIPS]
TOKEN_AXES = ("data", "expert")
"""The batch is split over every device; the experts' inputs are regrouped by expert."""


def _weights(mesh: Mesh) -> dict[str, Any]:
    def leaf(shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))

    def layer() -> dict[str, jax.ShapeDtypeStruct]:
        return {
            "attn_norm": leaf((WIDTH,), P()),
            "wqkv": leaf((WIDTH, 3, HEADS * HEAD_DIM), P("data", None, None)),
            "wo": leaf((HEADS * HEAD_DIM, WIDTH), P(None, "data")),
            "mlp_norm": leaf((WIDTH,), P()),
            "router": leaf((WIDTH, EXPERTS), P()),
            "w_in": leaf((EXPERTS, WIDTH, 2, FFN), P("expert", "data", None, None)),
            "w_out": leaf((EXPERTS, FFN, WIDTH), P("expert", None, "data")),
        }

    return {"embed": leaf((VOCAB, WIDTH), P(None, "data")), "layers": [layer() for _ in range(LAYERS)],
            "final_norm": leaf((WIDTH,), P()), "head": leaf((WIDTH, VOCAB), P("data", None))}


def _attention(h: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    batch = h.shape[0]
    qkv = jnp.einsum("btd,dcf->cbtf", h, p["wqkv"])
    q, k, v = (qkv[i].reshape(batch, TOKENS, HEADS, HEAD_DIM) for i in range(3))
    scores = jnp.einsum("bthd,bshd->bhts", q, k).astype(jnp.float32) * HEAD_DIM ** -0.5
    scores = jnp.where(jnp.tril(jnp.ones((TOKENS, TOKENS), bool)), scores, -jnp.inf)
    weights = jax.nn.softmax(scores, -1).astype(h.dtype)
    return jnp.einsum("bhts,bshd->bthd", weights, v).reshape(batch, TOKENS, HEADS * HEAD_DIM) @ p["wo"]


def _experts(h: jax.Array, p: dict[str, jax.Array], mesh: Mesh) -> jax.Array:
    """Top-2 routing through dense dispatch and combine tensors, the experts' inputs laid out by expert."""
    logits = (h @ p["router"]).astype(jnp.float32)
    gates, chosen = lax.top_k(jax.nn.softmax(logits, -1), CHOSEN)
    gates = gates / jnp.sum(gates, -1, keepdims=True)
    combine = jnp.einsum("btc,btce->bte", gates, jax.nn.one_hot(chosen, EXPERTS, dtype=jnp.float32)).astype(h.dtype)
    routed = lax.with_sharding_constraint(jnp.einsum("btd,bte->ebtd", h, combine),
                                          NamedSharding(mesh, P("expert", "data", None, None)))
    both = jnp.einsum("ebtd,edcf->cebtf", routed, p["w_in"])
    out = jnp.einsum("ebtf,efd->ebtd", jax.nn.silu(both[0]) * both[1], p["w_out"])
    return lax.with_sharding_constraint(jnp.sum(out, 0), NamedSharding(mesh, P(TOKEN_AXES, None, None)))


def _loss(mesh: Mesh) -> Callable:
    @jax.checkpoint
    def layer(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
        x = x + _attention(rms_norm(x, p["attn_norm"]), p)
        return x + _experts(rms_norm(x, p["mlp_norm"]), p, mesh)

    def loss(params: dict[str, Any], tokens: jax.Array) -> jax.Array:
        x = params["embed"][tokens]
        for p in params["layers"]:
            x = layer(x, p)
        logits = (rms_norm(x, params["final_norm"]) @ params["head"]).astype(jnp.float32)
        chosen = jnp.take_along_axis(logits[:, :-1], tokens[:, 1:, None], -1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits[:, :-1], -1) - chosen)

    return loss


def build(mesh: Mesh) -> tuple[Callable, tuple[Any, ...]]:
    """The jitted train step over ``mesh`` (axes ``data`` and ``expert``) and its example arguments
    (the weights, their momentum, the batch)."""
    loss = _loss(mesh)

    @jax.jit
    def step(params: dict[str, Any], momentum: dict[str, Any], tokens: jax.Array) -> tuple[Any, Any, jax.Array]:
        value, grads = jax.value_and_grad(loss)(params, tokens)
        momentum = jax.tree.map(lambda m, g: (0.9 * m + g).astype(m.dtype), momentum, grads)
        params = jax.tree.map(lambda w, m: (w - 1e-2 * m).astype(w.dtype), params, momentum)
        return params, momentum, value

    weights = _weights(mesh)
    tokens = jax.ShapeDtypeStruct((BATCH, TOKENS), jnp.int32, sharding=NamedSharding(mesh, P(TOKEN_AXES)))
    return step, (weights, weights, tokens)
