"""A deep residual MLP unrolled by a Python loop, one train step under jit with shardings (a program file).

``LAYERS`` layers (``SHARDSCOPE_UNROLLED_LAYERS``, default 600), each ``x = x + tanh(x @ W)``
written in a Python loop over a list of weights, so every layer's equations share one source
line; the weights replicated, the batch sharded over ``data`` of 8 devices. The partitioner sums
the 600 gradients after the backward pass, and XLA's combiner merges them into one all-reduce:
naming its 600 values is what this program measures (benchmark 4a, ``benchmarks/check_cost.py``).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

LAYERS = int(os.environ.get("SHARDSCOPE_UNROLLED_LAYERS", "600"))
WIDTH, BATCH = 16, 64

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
params = [jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32, sharding=replicated) for _ in range(LAYERS)]
batch = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32, sharding=NamedSharding(mesh, P("data")))


def loss(params, x):
    for w in params:
        x = x + jnp.tanh(x @ w)
    return jnp.mean(x ** 2)


@shardscope.program(args=(params, batch))
@jax.jit
def unrolled_step(params, x):
    """One SGD step: the gradients' all-reduce runs once, after the backward pass."""
    grads = jax.grad(loss)(params, x)
    return [w - 1e-3 * g for w, g in zip(params, grads)]
