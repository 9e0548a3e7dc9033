"""Per-step values stacked into a buffer inside a loop: ``acc.at[i].set(...)`` and a scan's outputs.

Each iteration writes one value into its own slot of a buffer: the loss of every step, to plot
or log afterwards. One sum of the whole buffer after the loop gives every slot what the sum in
the loop gave it, the same bytes in one run instead of one per step: a trade-off (``stackable``),
not waste. ``losses_at_set`` writes ``psum(loss)`` with ``.at[i].set``, ``losses_scan_ys``
returns it as the scan's stacked output, ``maxima_at_set`` stacks a ``pmax`` (a maximum,
stacked the same way), and ``losses_jit`` is the jit form (the partitioner's sum).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

STEPS, BATCH, FEATURES = 8, 64, 16
LEARNING_RATE = 0.1

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
split = NamedSharding(mesh, P(None, "data"))

w = jax.ShapeDtypeStruct((FEATURES,), jnp.float32, sharding=replicated)
xs = jax.ShapeDtypeStruct((STEPS, BATCH, FEATURES), jnp.float32, sharding=split)


def energy(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


@shardscope.program(args=(w, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P())
def losses_at_set(w, xs):
    """Every step's summed energy written into its slot with ``.at[i].set``."""

    def step(i, losses):
        return losses.at[i].set(lax.psum(energy(w, xs[i]), "data"))

    return lax.fori_loop(0, STEPS, step, jnp.zeros((STEPS,), jnp.float32))


@shardscope.program(args=(w, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P())
def losses_scan_ys(w, xs):
    """Every step's summed energy returned as the scan's stacked output."""

    def step(carry, x):
        return carry, lax.psum(energy(w, x), "data")

    _, losses = lax.scan(step, None, xs)
    return losses


@shardscope.program(args=(w, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P())
def maxima_at_set(w, xs):
    """Every step's largest activation over the devices (``lax.pmax``), stacked with ``.at[i].set``."""

    def step(i, peaks):
        return peaks.at[i].set(lax.pmax(jnp.max(jnp.abs(xs[i] @ w)), "data"))

    return lax.fori_loop(0, STEPS, step, jnp.zeros((STEPS,), jnp.float32))


@shardscope.program(args=(w, xs))
@jax.jit
def losses_jit(w, xs):
    """The jit form: each step's energy over the whole batch (the partitioner sums it) stacked with ``.at[i].set``."""

    def step(i, losses):
        return losses.at[i].set(energy(w, xs[i]))

    return lax.fori_loop(0, STEPS, step, jnp.zeros((STEPS,), jnp.float32))
