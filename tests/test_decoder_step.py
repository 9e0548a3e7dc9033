"""benchmarks/decoder_step.py's fused projections (MaxText's ``fused_qkv`` and ``fused_mlp``): the
same layer as the separate matmuls, written as fewer of them."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.decoder_step import TINY, TINY_GPT, _layer_shapes, layer_of

WIDTH, HEADS, HEAD_DIM, FFN, TOKENS = 64, 4, 16, 128, 32


def _weights(block: str, seed: int = 0) -> dict[str, np.ndarray]:
    """One layer's weights, unfused, drawn at a scale that keeps activations of order one."""
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    if block == "gpt":
        return {"ln1_scale": np.ones(WIDTH, np.float32), "ln1_bias": np.zeros(WIDTH, np.float32),
                "ln2_scale": np.ones(WIDTH, np.float32), "ln2_bias": np.zeros(WIDTH, np.float32),
                "wqkv": w(WIDTH, 3, HEADS, HEAD_DIM), "wo": w(HEADS, HEAD_DIM, WIDTH) / np.sqrt(HEAD_DIM),
                "w1": w(WIDTH, FFN), "w2": w(FFN, WIDTH)}
    return {"attn_norm": np.ones(WIDTH, np.float32), "mlp_norm": np.ones(WIDTH, np.float32),
            "wq": w(WIDTH, HEADS, HEAD_DIM), "wk": w(WIDTH, HEADS, HEAD_DIM), "wv": w(WIDTH, HEADS, HEAD_DIM),
            "wo": w(HEADS, HEAD_DIM, WIDTH) / np.sqrt(HEAD_DIM), "w1": w(WIDTH, FFN), "w3": w(WIDTH, FFN),
            "w2": w(FFN, WIDTH)}


def _fused(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The llama layer's weights as MaxText's fused_qkv and fused_mlp lay them out."""
    fused = {k: v for k, v in weights.items() if k not in ("wq", "wk", "wv", "w1", "w3")}
    fused["wqkv"] = np.stack([weights["wq"], weights["wk"], weights["wv"]], axis=1)
    fused["wi"] = np.stack([weights["w1"], weights["w3"]], axis=1)
    return fused


def _dots(fn, *args) -> int:  # noqa: ANN001 - any layer function
    """How many dot_general equations the layer's jaxpr holds at its top level."""
    return sum(eqn.primitive.name == "dot_general" for eqn in jax.make_jaxpr(fn)(*args).jaxpr.eqns)


def test_fused_projections_are_refused_where_maxtext_has_none():
    with pytest.raises(ValueError, match="as many key-value heads"):
        _layer_shapes(replace(TINY, fused_qkv=True), 1)  # 4 heads, 2 kv heads
    with pytest.raises(ValueError, match="a GPT block has one"):
        _layer_shapes(replace(TINY_GPT, fused_mlp=True), 1)


@pytest.mark.parametrize("block", ["llama", "gpt"])
def test_fused_projections_compute_the_same_layer_with_fewer_matmuls(block):
    x = jnp.asarray(np.random.default_rng(1).standard_normal((2, TOKENS, WIDTH)), jnp.bfloat16)
    weights = _weights(block)
    model = TINY_GPT if block == "gpt" else replace(TINY, kv_heads=TINY.heads)  # fused_qkv: as many kv heads as heads
    fused = replace(model, fused_qkv=True) if block == "gpt" else replace(model, fused_qkv=True, fused_mlp=True)
    separate, fused_layer = layer_of(model), layer_of(fused)
    fused_weights = weights if block == "gpt" else _fused(weights)
    fewer = 2 if block == "gpt" else 3  # three projections in one; and two MLP inputs in one
    # the weights the fused model's step declares, each layer's (the stack's first axis left out)
    declared = {name: shape[1:] for name, (shape, _) in _layer_shapes(fused, 1).items()}
    assert declared == {name: w.shape for name, w in fused_weights.items()}
    expected = np.asarray(separate(x, weights), np.float32)
    got = np.asarray(fused_layer(x, fused_weights), np.float32)
    # bfloat16 weights and activations: the same products, summed in another order
    np.testing.assert_allclose(got, expected, rtol=0.05, atol=0.05)
    assert np.abs(got - expected).mean() < 0.01 * np.abs(expected).mean() + 1e-3
    assert _dots(separate, x, weights) - _dots(fused_layer, x, fused_weights) == fewer
