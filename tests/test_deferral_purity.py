"""A reduction is deferrable only when nothing but reductions like it is added into the accumulator.

Deferring psums the whole per-device accumulator once after the loop: any other term added into
it (a constant, a parameter, a reset to another value) would then be counted once per device.
Each case below is checked numerically too: the rewrite the fix proposes gives another result.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

DEVICES, STEPS = 4, 3
SDS = jax.ShapeDtypeStruct
W, XS, FLAGS = SDS((8, 8), jnp.float32), SDS((STEPS, 16, 8), jnp.float32), SDS((STEPS,), jnp.int32)


def _mesh():
    return Mesh(np.array(jax.devices()[:DEVICES]), ("d",))


def _grad(w, x, vma=True):
    w = lax.pcast(w, "d", to="varying") if vma else w
    return x.T @ (1 - jnp.tanh(x @ w) ** 2)


def _program(body, *, check_vma=True, deferred=False):
    """``scan(body)`` under shard_map; ``deferred``: psum replaced by the identity and one psum after."""

    def run(w, xs, fl):
        reduce = (lambda g: g) if deferred else (lambda g: lax.psum(g, "d"))
        start = jnp.zeros_like(w)
        if deferred:
            start = lax.pcast(start, "d", to="varying")
        out = lax.scan(lambda c, inp: (body(w, c, *inp, reduce, check_vma), None), start, (xs, fl))[0]
        return lax.psum(out, "d") if deferred else out

    return jax.jit(jax.shard_map(run, mesh=_mesh(), in_specs=(P(), P(None, "d"), P()), out_specs=P(),
                                 check_vma=check_vma))


def _verdicts(body, check_vma=True):
    inspection = shardscope.inspect(_program(body, check_vma=check_vma), W, XS, FLAGS)
    return [c.verdict_kind for c in inspection.collectives]


def _results(body, check_vma=True):
    rng = np.random.default_rng(0)
    args = (rng.normal(size=W.shape).astype(np.float32), rng.normal(size=XS.shape).astype(np.float32),
            np.array([1, 0, 1], np.int32))
    naive = _program(body, check_vma=check_vma)(*args)
    deferred = _program(body, check_vma=check_vma, deferred=True)(*args)
    return np.asarray(naive), np.asarray(deferred)


IMPURE = {
    "a constant added each step": lambda w, a, x, f, r, v: a + r(_grad(w, x, v)) + 1.0,
    "a parameter added each step": lambda w, a, x, f, r, v: a + r(_grad(w, x, v)) + w,
    "a cond that resets to a parameter": lambda w, a, x, f, r, v: lax.cond(
        f > 0, lambda a: a + r(_grad(w, x, v)), lambda a: jnp.zeros_like(a) + w, a),
    "a where that resets to ones": lambda w, a, x, f, r, v: jnp.where(f > 0, a + r(_grad(w, x, v)), 1.0),
}


@pytest.mark.parametrize("case", sorted(IMPURE))
def test_anything_else_added_into_the_accumulator_keeps_the_reduction_needed(case):
    body = IMPURE[case]
    assert _verdicts(body) == ["needed"]
    naive, deferred = _results(body)
    assert not np.allclose(naive, deferred, atol=1e-3), "the deferred rewrite would have been right after all"


def test_the_plain_accumulation_stays_deferrable_and_its_rewrite_is_exact():
    def body(w, a, x, f, r, v):
        return lax.cond(f > 0, lambda a: a + r(_grad(w, x, v)), lambda a: a, a)

    assert _verdicts(body) == ["deferrable"]
    naive, deferred = _results(body)
    np.testing.assert_allclose(naive, deferred, rtol=1e-5, atol=1e-5)


def test_without_check_vma_no_factor_or_predicate_counts_as_the_same_on_every_device():
    def scaled(w, a, x, f, r, v):  # x.sum() differs between devices: psum does not commute with it
        return a + r(_grad(w, x, v)) * x.sum()

    def plain(w, a, x, f, r, v):
        return a + r(_grad(w, x, v))

    assert _verdicts(scaled, check_vma=False) == ["needed"]
    naive, deferred = _results(scaled, check_vma=False)
    assert not np.allclose(naive, deferred, atol=1e-3)
    assert _verdicts(plain, check_vma=False) == ["deferrable"]  # no factor at all: still provable
