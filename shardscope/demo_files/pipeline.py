"""A pipeline over 4 stages: a ``ppermute`` in a ``fori_loop`` that the loop needs.

Each device holds one stage's weights. On every step each stage applies its layer to the
activations it holds and passes them to the next stage with ``lax.ppermute``; the next step
computes on what arrived. The transfer's operand changes every iteration and its result feeds
the next one, so ``shardscope check demos/pipeline.py`` reports it as needed and exits 0.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

STAGES, BATCH, WIDTH = 4, 8, 16

mesh = Mesh(np.array(jax.devices()[:STAGES]), ("stage",))

weights = jax.ShapeDtypeStruct((STAGES, WIDTH, WIDTH), jnp.float32)  # one layer per stage
inputs = jax.ShapeDtypeStruct((STAGES * BATCH, WIDTH), jnp.float32)  # stage 0's batch, the rest idle


@shardscope.program(args=(weights, inputs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P("stage"), P("stage")), out_specs=P("stage"))
def pipeline(weights, activations):
    """STAGES steps: apply this stage's layer, send the result to the next stage."""
    shift = [(i, (i + 1) % STAGES) for i in range(STAGES)]

    def step(_, h):
        h = jnp.tanh(h @ weights[0])
        return lax.ppermute(h, "stage", shift)

    return lax.fori_loop(0, STAGES, step, activations)
