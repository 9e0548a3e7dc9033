"""A deep, narrow tanh MLP: a big program from a small model, to see how shardscope scales.

Every layer has its own weight and bias leaf, so the naive plan all-reduces 2 x depth gradients
inside its chunk loop, and each layer adds a dozen equations forward and backward. The depth
comes from the environment variable ``SHARDSCOPE_DEEP_DEPTH`` (default 128: a few thousand
equations per plan); the benchmarks use it to build programs of 1k to 50k equations.
"""

import os

import jax
import jax.numpy as jnp

import shardscope

DEPTH = int(os.environ.get("SHARDSCOPE_DEEP_DEPTH", "128"))
WIDTH = 8


@shardscope.demo(
    params=[
        {"w": jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32), "b": jax.ShapeDtypeStruct((WIDTH,), jnp.float32)}
        for _ in range(DEPTH)
    ],
    x=jax.ShapeDtypeStruct((64, WIDTH), jnp.float32),
    description=f"tanh MLP, {DEPTH} layers of width {WIDTH}: 2 x {DEPTH} all-reduces per chunk when naive",
)
def deep(params, x):
    """A residual tanh MLP; ``SHARDSCOPE_DEEP_DEPTH`` layers (default 128)."""
    h = x
    for layer in params:
        h = h + jnp.tanh(h @ layer["w"] + layer["b"]) / len(params)
    return h
