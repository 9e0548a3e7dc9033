"""A two-layer MLP whose parameters are a dict of arrays (a pytree)."""

import jax
import jax.numpy as jnp

import shardscope

D, H, O = 16, 32, 4


@shardscope.demo(
    params={
        "w1": jax.ShapeDtypeStruct((D, H), jnp.float32),
        "b1": jax.ShapeDtypeStruct((H,), jnp.float32),
        "w2": jax.ShapeDtypeStruct((H, O), jnp.float32),
        "b2": jax.ShapeDtypeStruct((O,), jnp.float32),
    },
    x=jax.ShapeDtypeStruct((128, D), jnp.float32),
)
def mlp(params, x):
    """tanh MLP: four parameter leaves, four all-reduces per chunk in the naive plan."""
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]
