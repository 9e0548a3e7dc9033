"""FSDP / ZeRO-3: an MLP whose big weights are sharded over the data axis, its biases replicated.

Each device holds 1/n of ``w1`` and ``w2`` (split along their first dimension over ``data``);
every plan gathers them where the model needs them whole. It runs on its own mesh ``data=4``
(``mesh=`` below) unless given another with a ``data`` axis, e.g. ``--mesh data=4,model=2``.
"""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import shardscope

D, H, O = 64, 256, 16


@shardscope.demo(
    params={
        "w1": jax.ShapeDtypeStruct((D, H), jnp.float32),
        "b1": jax.ShapeDtypeStruct((H,), jnp.float32),
        "w2": jax.ShapeDtypeStruct((H, O), jnp.float32),
        "b2": jax.ShapeDtypeStruct((O,), jnp.float32),
    },
    param_specs={"w1": P("data"), "b1": P(), "w2": P("data"), "b2": P()},
    x=jax.ShapeDtypeStruct((256, D), jnp.float32),
    mesh="data=4",
)
def fsdp(params, x):
    """tanh MLP, w1 and w2 sharded over data (FSDP): naive gathers them every chunk, deferred once."""
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]
