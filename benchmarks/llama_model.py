"""A Llama-3-8B-shaped train step, FSDP x TP, written over any mesh (the model of benchmark 4c).

Llama 3 8B's shapes (32 layers of d=4096, 32 query heads and 8 key-value heads of 128, a SwiGLU
MLP of 14,336, a vocabulary of 128,256), its layers stacked and run by ``lax.scan`` under
``jax.checkpoint``, one step that sums the gradients of 4 micro-batches in a ``lax.scan`` and
applies them. The weights are sharded as MaxText shards them over ``fsdp`` x ``tp``, the batch
over ``fsdp``; everything is a ``jax.ShapeDtypeStruct``: the step is compiled, never run.

:func:`build` makes the step and its example arguments over a mesh: ``benchmarks/llama_step.py``
over the CPU devices (what ``shardscope check --devices 256 --target tpu:v5p:8x8x4`` compiles for
the slice), ``benchmarks/bare_llama_target.py`` over the slice's own compile-only devices (JAX's
route: ``lower(*args).compile()``, as MaxText's ahead-of-time compile does).
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
"""The same program at toy sizes on 8 devices (``SHARDSCOPE_LLAMA_SIZE=tiny``): the benchmark's
smoke run, which checks that it still runs, in seconds."""
LAYERS, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = ((2, 64, 4, 2, 16, 128, 256) if TINY
                                                       else (32, 4096, 32, 8, 128, 14336, 128256))
MICRO, BATCH, TOKENS = (2, 8, 16) if TINY else (4, 256, 2048)
"""4 micro-batches of 256 sequences of 2,048 tokens (8 sequences per fsdp shard)."""
FSDP, TP = (4, 2) if TINY else (32, 8)
DEVICES = FSDP * TP
TOPOLOGY = "v5e:2x4" if TINY else "v5p:8x8x4"
"""The slice the step is compiled for: 256 chips."""


def _weights(mesh: Mesh) -> dict[str, Any]:
    layer = {
        "attn_norm": ((LAYERS, WIDTH), P()),
        "wq": ((LAYERS, WIDTH, HEADS * HEAD_DIM), P(None, "fsdp", "tp")),
        "wk": ((LAYERS, WIDTH, KV_HEADS * HEAD_DIM), P(None, "fsdp", "tp")),
        "wv": ((LAYERS, WIDTH, KV_HEADS * HEAD_DIM), P(None, "fsdp", "tp")),
        "wo": ((LAYERS, HEADS * HEAD_DIM, WIDTH), P(None, "tp", "fsdp")),
        "mlp_norm": ((LAYERS, WIDTH), P()),
        "w1": ((LAYERS, WIDTH, FFN), P(None, "fsdp", "tp")),
        "w3": ((LAYERS, WIDTH, FFN), P(None, "fsdp", "tp")),
        "w2": ((LAYERS, FFN, WIDTH), P(None, "tp", "fsdp")),
    }
    return sharded_weights(mesh, layer, VOCAB, WIDTH, "fsdp")


def _rope(x: jax.Array) -> jax.Array:
    half = HEAD_DIM // 2
    freq = 1.0 / (500_000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = jnp.arange(TOKENS, dtype=jnp.float32)[:, None] * freq
    sin, cos = jnp.sin(angle)[None, :, None, :], jnp.cos(angle)[None, :, None, :]
    a, b = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], -1).astype(x.dtype)


def _layer(mesh: Mesh) -> Callable:
    activations = NamedSharding(mesh, P("fsdp", None, None))

    @jax.checkpoint
    def layer(x: jax.Array, p: dict[str, jax.Array]) -> tuple[jax.Array, None]:
        batch = x.shape[0]
        h = rms_norm(x, p["attn_norm"])
        q = _rope((h @ p["wq"]).reshape(batch, TOKENS, HEADS, HEAD_DIM))
        k = _rope((h @ p["wk"]).reshape(batch, TOKENS, KV_HEADS, HEAD_DIM))
        v = (h @ p["wv"]).reshape(batch, TOKENS, KV_HEADS, HEAD_DIM)
        q = q.reshape(batch, TOKENS, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
        scores = jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32) / jnp.sqrt(HEAD_DIM).astype(jnp.float32)
        mask = jnp.tril(jnp.ones((TOKENS, TOKENS), bool))
        weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), -1).astype(x.dtype)
        attended = jnp.einsum("bkgts,bskd->btkgd", weights, v).reshape(batch, TOKENS, HEADS * HEAD_DIM)
        x = x + attended @ p["wo"]
        h = rms_norm(x, p["mlp_norm"])
        x = x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]
        return lax.with_sharding_constraint(x, activations), None

    return layer


def build(mesh: Mesh) -> tuple[Callable, tuple[Any, Any]]:
    """The jitted train step over ``mesh`` (axes ``fsdp`` and ``tp``) and its example arguments."""
    layer = _layer(mesh)

    loss = next_token_loss(layer)

    @jax.jit
    def step(params: dict[str, Any], batches: jax.Array) -> dict[str, Any]:
        def accumulate(grads: dict[str, Any], tokens: jax.Array) -> tuple[dict[str, Any], None]:
            micro = jax.grad(loss)(params, tokens)
            return jax.tree.map(lambda g, m: g + m.astype(jnp.float32), grads, micro), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        grads, _ = lax.scan(accumulate, zeros, batches)
        return jax.tree.map(lambda p, g: (p - 1e-4 * g / MICRO).astype(p.dtype), params, grads)

    batches = jax.ShapeDtypeStruct((MICRO, BATCH, TOKENS), jnp.int32, sharding=NamedSharding(mesh, P(None, "fsdp")))
    return step, (_weights(mesh), batches)
