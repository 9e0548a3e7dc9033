"""``check --target`` compiles the CPU's plan READ_ONLY (shardscope/engine/compilation.py): LLVM's
machine code unoptimized, the optimized module XLA's passes make unchanged. The module's text and
its memory and cost analyses are compared with JAX's own compile of the same step here."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardscope.engine.compilation import READ_ONLY, compile_traced


def test_a_read_only_compile_makes_the_module_jax_makes():
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("fsdp", "tp"))
    w = jax.ShapeDtypeStruct((4, 256, 512), jnp.float32, sharding=NamedSharding(mesh, P(None, "fsdp", "tp")))
    x = jax.ShapeDtypeStruct((32, 256), jnp.float32, sharding=NamedSharding(mesh, P("fsdp")))

    def loss(w, x):
        def layer(h, wl):
            return jnp.tanh(h @ wl)[:, :256], None
        return jnp.sum(lax.scan(layer, x, w)[0] ** 2)

    traced = jax.jit(jax.grad(loss)).trace(w, x)
    read_only = compile_traced(traced, READ_ONLY)
    own = traced.lower().compile()  # JAX's route: no options
    assert read_only.as_text() == own.as_text()
    assert "all-gather" in own.as_text() or "all-reduce" in own.as_text()  # the partitioner's collectives are in it
    assert read_only.memory_analysis().temp_size_in_bytes == own.memory_analysis().temp_size_in_bytes
    assert read_only.cost_analysis()["flops"] == own.cost_analysis()["flops"]
