"""The seed case: a linear model f(W, x) = x @ W with a replicated W of 5 parameters."""

import jax
import jax.numpy as jnp

import shardscope


@shardscope.demo(
    params=jax.ShapeDtypeStruct((5,), jnp.float32),
    x=jax.ShapeDtypeStruct((64, 5), jnp.float32),
)
def linear(W, x):
    """x @ W: the gradient of W is all-reduced once per chunk in the naive plan."""
    return x @ W
