"""A Llama-3-8B-shaped FSDP x TP train step of one batch and an AdamW update, over any mesh.

The program benchmark 7b (``benchmarks/check_at_scale.py``) measures at 256 and at 1,024 chips,
written after the issue that asked for it (a Llama-3-8B-shaped step whose slice compiles in a
fraction of :mod:`benchmarks.llama_model`'s time, so that what ``check`` adds weighs more): Llama
3 8B's shapes (32 layers of d=4096, 32 query heads and 8 key-value heads of 128, a SwiGLU MLP of
14,336, a vocabulary of 128,256), the layers stacked and scanned under ``jax.checkpoint``, one
batch per step (no micro-batches), the gradients' global norm clipped and an AdamW update of
moments kept in f32 (arguments of the step). Weights over ``fsdp`` x ``tp`` as MaxText
lays them, the batch over ``fsdp``. Everything is a ``jax.ShapeDtypeStruct``: compiled, never run.

``SHARDSCOPE_SCALE_CHIPS=1024`` lays it over 1,024 chips (``v5p:8x8x16``: fsdp 256 x tp 4, 1,024
sequences); the default is 256 (``v5p:8x8x4``: fsdp 64 x tp 4, 256 sequences).
:func:`build` makes the step over a mesh: ``benchmarks/llama_adamw_step.py`` over the CPU devices,
``python -m benchmarks.bare_llama_target llama_adamw`` over the slice's compile-only devices.
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
"""Toy sizes on 8 devices (``SHARDSCOPE_LLAMA_SIZE=tiny``, as the other steps'): the smoke run."""
CHIPS = 8 if TINY else int(os.environ.get("SHARDSCOPE_SCALE_CHIPS", "256"))
LAYERS, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = ((2, 64, 4, 2, 16, 128, 256) if TINY
                                                       else (32, 4096, 32, 8, 128, 14336, 128256))
TP = 2 if TINY else 4
FSDP = CHIPS // TP
DEVICES = FSDP * TP
BATCH, TOKENS = (8, 16) if TINY else (4 * FSDP, 2048)
"""4 sequences of 2,048 tokens per fsdp shard."""
TOPOLOGY = {8: "v5e:2x4", 256: "v5p:8x8x4", 1024: "v5p:8x8x16"}[CHIPS]
MESH = {"fsdp": FSDP, "tp": TP}


def _weights(mesh: Mesh) -> dict[str, Any]:
    layer = {
        "attn_norm": ((LAYERS, WIDTH), P()),
        "wq": ((LAYERS, WIDTH, HEADS * HEAD_DIM), P(None, "fsdp", "tp")),
        "wk": ((LAYERS, WIDTH, KV_HEADS * HEAD_DIM), P(None, "fsdp", "tp")),
        "wv": ((LAYERS, WIDTH, KV_HEADS * HEAD_DIM), P(None, "fsdp", "tp")),
        "wo": ((LAYERS, HEADS * HEAD_DIM, WIDTH), P(None, "tp", "fsdp")),
        "mlp_norm": ((LAYERS, WIDTH), P()),
        "w_gate": ((LAYERS, WIDTH, FFN), P(None, "fsdp", "tp")),
        "w_up": ((LAYERS, WIDTH, FFN), P(None, "fsdp", "tp")),
        "w_down": ((LAYERS, FFN, WIDTH), P(None, "tp", "fsdp")),
    }
    return sharded_weights(mesh, layer, VOCAB, WIDTH, "fsdp")


def _rotary(x: jax.Array) -> jax.Array:
    """Rotary position embedding, the interleaved pairs rotated (GPT-J's layout)."""
    freq = 1.0 / (500_000.0 ** (jnp.arange(0, HEAD_DIM, 2, dtype=jnp.float32) / HEAD_DIM))
    angle = jnp.arange(TOKENS, dtype=jnp.float32)[:, None] * freq
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], HEAD_DIM // 2, 2)
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    turned = jnp.stack([pairs[..., 0] * cos - pairs[..., 1] * sin, pairs[..., 0] * sin + pairs[..., 1] * cos], -1)
    return turned.reshape(x.shape).astype(x.dtype)


def _layer(mesh: Mesh) -> Callable:
    activations = NamedSharding(mesh, P("fsdp", None, None))
    group = HEADS // KV_HEADS

    @jax.checkpoint
    def layer(x: jax.Array, p: dict[str, jax.Array]) -> tuple[jax.Array, None]:
        batch = x.shape[0]
        h = rms_norm(x, p["attn_norm"])
        q = _rotary((h @ p["wq"]).reshape(batch, TOKENS, HEADS, HEAD_DIM))
        k = jnp.repeat(_rotary((h @ p["wk"]).reshape(batch, TOKENS, KV_HEADS, HEAD_DIM)), group, axis=2)
        v = jnp.repeat((h @ p["wv"]).reshape(batch, TOKENS, KV_HEADS, HEAD_DIM), group, axis=2)
        attended = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(batch, TOKENS, HEADS * HEAD_DIM)
        x = x + attended @ p["wo"]
        h = rms_norm(x, p["mlp_norm"])
        x = x + (jax.nn.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
        return lax.with_sharding_constraint(x, activations), None

    return layer


def _adamw(params: Any, grads: Any, moments: tuple[Any, Any], count: jax.Array) -> tuple[Any, tuple[Any, Any]]:
    """AdamW (b1 0.9, b2 0.95, weight decay 0.1) after clipping the gradients' global norm to 1."""
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in jax.tree.leaves(grads)))
    scale = jnp.minimum(1.0, 1.0 / (norm + 1e-6))
    first = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * scale * g.astype(jnp.float32), moments[0], grads)
    second = jax.tree.map(lambda v, g: 0.95 * v + 0.05 * jnp.square(scale * g.astype(jnp.float32)), moments[1], grads)
    step = count.astype(jnp.float32) + 1.0
    unbias1, unbias2 = 1.0 - 0.9 ** step, 1.0 - 0.95 ** step

    def update(p: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
        p32 = p.astype(jnp.float32)
        return (p32 - 3e-4 * (m / unbias1 / (jnp.sqrt(v / unbias2) + 1e-8) + 0.1 * p32)).astype(p.dtype)

    return jax.tree.map(update, params, first, second), (first, second)


def build(mesh: Mesh) -> tuple[Callable, tuple[Any, ...]]:
    """The jitted train step over ``mesh`` (axes ``fsdp`` and ``tp``) and its example arguments
    (the weights, AdamW's two moments, the step count, the batch)."""
    loss = next_token_loss(_layer(mesh))

    @jax.jit
    def step(params: dict[str, Any], moments: tuple[Any, Any], count: jax.Array,
             tokens: jax.Array) -> tuple[Any, Any, jax.Array, jax.Array]:
        value, grads = jax.value_and_grad(loss)(params, tokens)
        params, moments = _adamw(params, grads, moments, count)
        return params, moments, count + 1, value

    weights = _weights(mesh)
    moment = jax.tree.map(lambda w: jax.ShapeDtypeStruct(w.shape, jnp.float32, sharding=w.sharding), weights)
    count = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))
    tokens = jax.ShapeDtypeStruct((BATCH, TOKENS), jnp.int32, sharding=NamedSharding(mesh, P("fsdp")))
    return step, (weights, (moment, moment), count, tokens)
