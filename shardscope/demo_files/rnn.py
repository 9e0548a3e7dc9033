"""An RNN with its own lax.scan over T time steps.

In the naive plan the recurrent weights' gradient is all-reduced inside the time loop, which
itself runs once per chunk: chunks x T all-reduces per call.
"""

import jax
import jax.numpy as jnp
from jax import lax

import shardscope

T, D, H = 8, 4, 16


@shardscope.demo(
    params={
        "Wx": jax.ShapeDtypeStruct((D, H), jnp.float32),
        "Wh": jax.ShapeDtypeStruct((H, H), jnp.float32),
        "b": jax.ShapeDtypeStruct((H,), jnp.float32),
    },
    x=jax.ShapeDtypeStruct((64, T, D), jnp.float32),
)
def rnn(params, x):
    """Elman RNN over T=8 steps; returns the last hidden state."""
    inputs = jnp.swapaxes(x, 0, 1) @ params["Wx"] + params["b"]  # (T, batch, H)

    def step(h, u):
        h = jnp.tanh(h @ params["Wh"] + u)
        return h, None

    # Derived from the (per-device) inputs, so the carry has the same varying axes inside
    # shard_map as the loop's output: jnp.zeros((batch, H)) would fail to trace there.
    h0 = jnp.zeros_like(inputs[0])
    h, _ = lax.scan(step, h0, inputs)
    return h
