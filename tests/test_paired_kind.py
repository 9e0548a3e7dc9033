"""A paired collective's two names: ``opcode`` is always the HLO kind (the instruction's, or the one
a dead primitive compiles to), ``label`` what the tables show (a dead one's primitive)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from shardscope.pipeline.one_program import inspect


def test_a_dead_psum_is_labelled_by_its_primitive_and_its_opcode_is_the_all_reduce_it_would_be():
    mesh = jax.make_mesh((4,), ("x",))

    def step(x):
        jax.lax.psum(x * 3, "x")  # its result is never used: XLA removes it
        return jax.lax.psum(x, "x")

    f = jax.shard_map(step, mesh=mesh, in_specs=P("x"), out_specs=P())
    x = jax.device_put(jnp.ones(8), NamedSharding(mesh, P("x")))
    text = jax.jit(f).lower(x).compile().as_text()
    assert text.count(" all-reduce(") == 1  # the compiled module keeps one all-reduce, counted here
    paired = inspect(jax.jit(f), x).paired
    dead = [p for p in paired if p.dead]
    live = [p for p in paired if p.compiled is not None]
    assert len(dead) == 1 and len(live) == 1
    # JAX writes a psum of a varying value as psum_invariant (0.10) or psum: either compiles to an all-reduce
    assert dead[0].label in ("psum", "psum_invariant") and dead[0].opcode == "all-reduce"
    assert (live[0].label, live[0].opcode) == ("all-reduce", "all-reduce")
    assert dead[0].kind == dead[0].label  # the public name, kept
    assert dead[0].label in str(inspect(jax.jit(f), x))  # the table names the dead one by its primitive
