"""The test run compiles at ``--xla_backend_optimization_level=0`` (``tests/_xla_flags.py``): the flag
is in force, and what shardscope reads of a compiled program is the same as at XLA's default level.

Each program is compiled twice from one lowering, at level 3 (XLA's default) and at level 0, through
``compiler_options`` (which override ``XLA_FLAGS`` for one compile): the kinds of program the suite
compiles (shard_map over a chunk loop, naive and deferred; jit with shardings, whose collectives the
partitioner writes; a 2-D mesh; a while loop of its own with a cond; complex numbers; remat).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _xla_flags import FLAG

DEFAULT, UNOPTIMIZED = ({"xla_backend_optimization_level": 3}, {"xla_backend_optimization_level": 0})


def test_the_run_compiles_unoptimized_machine_code():
    """x * y + z at level 3 is one fused multiply-add (rounded once, as float64's product then one
    rounding gives); at level 0 a multiply then an add, each rounded (numpy's float32 arithmetic).
    A plain ``jax.jit`` of this run rounds as level 0 does: the flag is in force."""
    assert FLAG in os.environ["XLA_FLAGS"].split()
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
    separately = x * y + z
    fused = (x.astype(np.float64) * y + z).astype(np.float32)
    assert (separately != fused).sum() > 100  # the two roundings tell the levels apart

    lowered = jax.jit(lambda x, y, z: x * y + z).lower(x, y, z)
    np.testing.assert_array_equal(lowered.compile(compiler_options=DEFAULT)(x, y, z), fused)
    np.testing.assert_array_equal(lowered.compile(compiler_options=UNOPTIMIZED)(x, y, z), separately)
    np.testing.assert_array_equal(jax.jit(lambda x, y, z: x * y + z)(x, y, z), separately)


def _mesh(*shape: int) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, ("data", "model")[: len(shape)], axis_types=(jax.sharding.AxisType.Auto,) * len(shape))


def _seed(deferred: bool):
    """The seed case: a chunked VJP of a replicated W in shard_map's scan, the all-reduce per chunk
    (naive) or once after the loop (deferred)."""
    mesh = _mesh(8)

    def step(W, x):
        def chunk(acc, xc):
            w = lax.pcast(W, "data", to="varying") if deferred else W
            g = jax.grad(lambda w: jnp.sum(jnp.tanh(xc @ w) ** 2))(w)
            return acc + g, None
        acc = lax.pcast(jnp.zeros_like(W), "data", to="varying") if deferred else jnp.zeros_like(W)
        acc, _ = lax.scan(chunk, acc, x.reshape(4, -1, x.shape[-1]))
        return lax.psum(acc, "data") if deferred else acc

    fn = jax.shard_map(step, mesh=mesh, in_specs=(P(), P("data")), out_specs=P())
    return jax.jit(fn), (jax.ShapeDtypeStruct((64, 32), jnp.float32), jax.ShapeDtypeStruct((8 * 64, 64), jnp.float32))


def _jit_scan():
    """A jit step with shardings and a scan over layers: the partitioner writes the collectives."""
    mesh = _mesh(4, 2)
    params = NamedSharding(mesh, P(None, None, "model"))
    batch = NamedSharding(mesh, P("data", None))

    def loss(ws, x):
        def layer(h, w):
            return jnp.tanh(h @ w), None
        h, _ = lax.scan(jax.checkpoint(layer), x, ws)
        return jnp.mean(h ** 2)

    fn = jax.jit(jax.grad(loss), in_shardings=(params, batch), out_shardings=params)
    return fn, (jax.ShapeDtypeStruct((3, 32, 32), jnp.float32), jax.ShapeDtypeStruct((16, 32), jnp.float32))


def _while_and_cond():
    """A while loop of its own, a cond inside, complex numbers, and a psum per trip."""
    mesh = _mesh(8)

    def step(z, n):
        def body(carry):
            i, z = carry
            z = lax.cond(i % 2 == 0, lambda z: z * (1 + 1j), lambda z: jnp.conj(z), z)
            return i + 1, z - lax.psum(z, "data") / 8
        return lax.while_loop(lambda c: c[0] < n, body, (0, z))[1]

    fn = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P("data"), P()), out_specs=P("data")))
    return fn, (jax.ShapeDtypeStruct((64,), jnp.complex64), jax.ShapeDtypeStruct((), jnp.int32))


PROGRAMS = {"naive": lambda: _seed(False), "deferred": lambda: _seed(True), "jit_scan": _jit_scan,
            "while_cond_complex": _while_and_cond}


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_compiled_module_and_its_analyses_are_the_same_at_both_levels(name):
    fn, args = PROGRAMS[name]()
    lowered = fn.lower(*args)
    default, unoptimized = (lowered.compile(compiler_options=options) for options in (DEFAULT, UNOPTIMIZED))
    text = default.as_text()
    assert "all-reduce" in text  # a program with collectives, read as shardscope reads it
    assert unoptimized.as_text() == text
    assert unoptimized.cost_analysis() == default.cost_analysis()
    memory = lambda compiled: {field: getattr(compiled.memory_analysis(), field)  # noqa: E731
                               for field in ("argument_size_in_bytes", "output_size_in_bytes",
                                             "temp_size_in_bytes", "alias_size_in_bytes")}
    assert memory(unoptimized) == memory(default)
