"""A restricted Boltzmann machine wave function with complex parameters, as in variational
Monte Carlo: log psi(s) = a.s + sum_j log cosh(b_j + W_j.s) over spin configurations s."""

import jax
import jax.numpy as jnp

import shardscope

SITES, HIDDEN = 12, 24


@shardscope.demo(
    params={
        "a": jax.ShapeDtypeStruct((SITES,), jnp.complex64),
        "b": jax.ShapeDtypeStruct((HIDDEN,), jnp.complex64),
        "W": jax.ShapeDtypeStruct((SITES, HIDDEN), jnp.complex64),
    },
    x=jax.ShapeDtypeStruct((128, SITES), jnp.float32),
)
def rbm(params, s):
    """Complex log-amplitude of each configuration; the gradient of W, a, b is complex."""
    theta = s @ params["W"] + params["b"]
    return s @ params["a"] + jnp.sum(jnp.log(jnp.cosh(theta)), axis=-1)
