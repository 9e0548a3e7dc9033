"""One table of linear primitives for both deferral analyses: the verdicts and the what-if.

A psum's result that reaches its accumulator through ``jnp.cumsum`` or a ``lax.dynamic_slice``
at the loop's index (an offset the same on every device) is still only accumulated: each is
linear in it. The verdicts (``check``) and the what-if rewrite read one table, so both call it
deferrable, and the rewrite, one psum after the loop, gives the same result (checked here
numerically against the loop as written).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope
from shardscope.engine.jaxpr import linearity
from shardscope.whatif import type_reach
from shardscope.whatif.what_if import VERIFIED, rewrites_of, subject_of

MICRO, DEVICES = 4, 4


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:DEVICES]), ("data",))


def _grad(w, x):
    return x.T @ (1 - jnp.tanh(x @ w) ** 2)


def _cumsum_step(w, xs):
    def body(acc, x):
        return acc + jnp.cumsum(lax.psum(_grad(w, x), "data"), axis=0), None

    return lax.scan(body, jnp.zeros_like(w), xs)[0]


def _sliced_step(w, xs):
    def body(i, acc):
        g = lax.psum(_grad(w, xs[i]), "data")
        return acc + lax.dynamic_slice_in_dim(g, (i % 2) * 4, 4, axis=0)

    return lax.fori_loop(0, MICRO, body, jnp.zeros((4, 8), jnp.float32))




def _program(step):
    mesh = _mesh()
    rng = np.random.default_rng(0)
    w = jax.device_put((rng.normal(size=(8, 8)) * 0.3).astype(np.float32), NamedSharding(mesh, P()))
    xs = jax.device_put(rng.normal(size=(MICRO, 16, 8)).astype(np.float32), NamedSharding(mesh, P(None, "data")))
    fn = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P()))
    return fn, (w, xs)


@pytest.mark.parametrize("step", [_cumsum_step, _sliced_step], ids=["cumsum", "dynamic_slice"])
def test_check_and_the_what_if_agree_a_linear_step_is_deferrable(step):
    fn, args = _program(step)
    inspection = shardscope.inspect(fn, *args)
    (psum,) = [c for c in inspection.collectives if c.primitive.startswith("psum")]
    assert psum.loop_trip_counts == (MICRO,) and psum.verdict_kind == "deferrable", psum.verdict.reason
    (rewrite,) = rewrites_of(subject_of(fn, args))
    assert rewrite.status == VERIFIED, rewrite.reason
    assert rewrite.output_check.agree


def test_the_deferred_loops_give_the_same_result():
    """cumsum and a slice at offsets the same on every device commute with the sum over devices."""
    rng = np.random.default_rng(1)
    local = rng.normal(size=(MICRO, DEVICES, 8, 8))
    summed_first = sum(np.cumsum(local[i].sum(0), axis=0) for i in range(MICRO))
    deferred = sum(np.cumsum(local[i], axis=1) for i in range(MICRO)).sum(0)
    np.testing.assert_allclose(deferred, summed_first)
    sliced_first = sum(local[i].sum(0)[(i % 2) * 4:(i % 2) * 4 + 4] for i in range(MICRO))
    sliced_deferred = sum(local[i][:, (i % 2) * 4:(i % 2) * 4 + 4] for i in range(MICRO)).sum(0)
    np.testing.assert_allclose(sliced_deferred, sliced_first)


def test_both_analyses_read_the_one_table():
    """Neither analysis keeps a list of linear primitives of its own."""
    for module in (linearity, type_reach):
        own = [name for name, value in vars(module).items()
               if isinstance(value, frozenset) and ({"add", "reshape"} <= value or "cumsum" in value)]
        assert not own, (module.__name__, own)
