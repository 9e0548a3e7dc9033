"""A chain of dependent psums written by a Python loop, under ``shard_map`` (a program file).

``LINKS`` psums (``SHARDSCOPE_PSUM_CHAIN``, default 1,000), each summing the last one's result
scaled (``x = psum(x * 1.01, 'data')``), all on one source line, over ``data`` of 8 devices.
Every compiled all-reduce has a thousand jaxpr psums of its kind and line to pair with, and
each psum's value reaches the one output through every later one: what this program measures
is that pairing them and naming them stays linear in their number (benchmark 4a,
``benchmarks/check_cost.py``; 1,000 took 261 s before, most of it in pairing).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

LINKS = int(os.environ.get("SHARDSCOPE_PSUM_CHAIN", "1000"))

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
x = jax.ShapeDtypeStruct((64,), jnp.float32, sharding=NamedSharding(mesh, P("data")))


@shardscope.program(args=(x,))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=P("data"), out_specs=P())
def psum_chain(x):
    """Each link sums the last one's result over the devices: no loop, every psum needed."""
    for _ in range(LINKS):
        x = lax.psum(x * 1.01, "data")
    return x
