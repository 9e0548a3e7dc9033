"""What the Llama- and Mixtral-shaped train steps share (``llama_model``, ``mixtral_model``).

Both are next-token language models compiled over a mesh and never run: their weights are
``jax.ShapeDtypeStruct`` leaves in bf16 laid out as MaxText lays them out (the embedding over
``tp`` x the data axis, the head the other way round, the layers' stacked weights by a table of
each one's shape and spec), an RMS norm, and the same loss (the embedding looked up, the stacked
layers scanned, the cross-entropy of each next token).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

Layer = Callable[[jax.Array, dict[str, jax.Array]], tuple[jax.Array, None]]


def sharded_weights(mesh: Mesh, layer: dict[str, tuple[tuple[int, ...], P]], vocab: int, width: int,
                    data: str) -> dict[str, Any]:
    """The model's weights over ``mesh``: ``layer`` maps each stacked layer weight to its shape and
    spec; the embedding is split over ``tp`` and ``data``, the head over ``data`` and ``tp``."""
    def leaf(shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))

    return {
        "embed": leaf((vocab, width), P("tp", data)),
        "layers": {name: leaf(shape, spec) for name, (shape, spec) in layer.items()},
        "final_norm": leaf((width,), P()),
        "head": leaf((width, vocab), P(data, "tp")),
    }


def rms_norm(x: jax.Array, g: jax.Array) -> jax.Array:
    """Llama's norm: the root mean square taken in f32 (bf16 loses it), the result in ``x``'s type."""
    x32 = x.astype(jnp.float32)
    return (x32 * lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-5)).astype(x.dtype) * g


def next_token_loss(layer: Layer) -> Callable[[dict[str, Any], jax.Array], jax.Array]:
    """The mean cross-entropy of each next token, the stacked layers run by ``lax.scan`` of ``layer``."""
    def loss(params: dict[str, Any], tokens: jax.Array) -> jax.Array:
        x = params["embed"][tokens]
        x, _ = lax.scan(layer, x, params["layers"])
        logits = (rms_norm(x, params["final_norm"]) @ params["head"]).astype(jnp.float32)
        targets = jnp.roll(tokens, -1, axis=1)
        chosen = jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, -1) - chosen)

    return loss
