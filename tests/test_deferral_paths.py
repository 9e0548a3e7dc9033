"""The deferrable search through ``cond``, ``select_n``, calls and nested loops, and what stays needed.

A reduction is deferrable when every path from its result to a loop's carry is additive; a
``cond`` or ``select_n`` whose selector is the same on every device and comes from neither the
reduction nor the accumulator is linear in the value it passes on. Real jaxprs, exact verdicts.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

SDS = jax.ShapeDtypeStruct
W, XS, FLAGS = SDS((8, 8), jnp.float32), SDS((3, 16, 8), jnp.float32), SDS((3,), jnp.int32)


def _mesh(n=4):
    return Mesh(np.array(jax.devices()[:n]), ("d",))


def _grad(w, x):
    """The local (varying) gradient of a tanh layer on this device's rows."""
    w = lax.pcast(w, "d", to="varying")
    return x.T @ (1 - jnp.tanh(x @ w) ** 2)


def inspect_loop(body, *, flags=False, init=None):
    """Inspect ``scan(body, init(w), xs[, flags])`` under shard_map over ``d`` (xs sharded on rows)."""

    def run(w, xs, fl):
        start = jnp.zeros_like(w) if init is None else init(w)
        return lax.scan(lambda c, inp: (body(w, c, *inp), None), start, (xs, fl))[0]

    fn = jax.shard_map(run, mesh=_mesh(), in_specs=(P(), P(None, "d"), P()), out_specs=P())
    return shardscope.inspect(fn, W, XS, FLAGS)


def found(inspection):
    """(primitive, loop trip counts, runs per call as shown, verdict) per collective.

    ``lax.psum`` binds ``psum_invariant`` or ``psum`` depending on the JAX version: both read ``psum``.
    """
    return [
        ("psum" if c.primitive.startswith("psum") else c.primitive, c.loop_trip_counts, c.runs.text(), c.verdict_kind)
        for c in inspection.collectives
    ]


def test_psum_in_a_cond_branch_that_adds_or_passes_through_is_deferrable():
    def body(w, acc, x, flag):
        return lax.cond(flag > 0, lambda a: a + lax.psum(_grad(w, x), "d"), lambda a: a, acc)

    ins = inspect_loop(body)
    assert found(ins) == [("psum", (3,), "≤ 3", "deferrable")]
    (c,) = ins.collectives
    assert c.in_conditional and c.executions == 3 and c.verdict.executions_after == 1
    assert "1 run/call instead of ≤ 3" in c.verdict.fix
    (flagged,) = ins.flagged  # the all-reduce it compiles to, in the branch of the while body
    assert flagged.equations == (c,) and flagged.compiled.in_conditional and flagged.compiled.loop_trip_counts == (3,)


def test_psum_in_both_branches_each_adding_into_the_carry_is_deferrable():
    def body(w, acc, x, flag):
        return lax.cond(
            flag > 0,
            lambda a: a + lax.psum(_grad(w, x), "d"),
            lambda a: a - 0.5 * lax.psum(_grad(w, 2 * x), "d"),
            acc,
        )

    assert found(inspect_loop(body)) == [
        ("psum", (3,), "≤ 3", "deferrable"),
        ("psum", (3,), "≤ 3", "deferrable"),
    ]


def test_a_cond_choosing_between_the_reduced_gradient_and_zeros_is_deferrable():
    def body(w, acc, x, flag):
        g = lax.psum(_grad(w, x), "d")
        return acc + lax.cond(flag > 0, lambda: g, lambda: jnp.zeros_like(g))

    assert found(inspect_loop(body)) == [("psum", (3,), "3", "deferrable")]


def test_select_n_with_a_replicated_selector_is_deferrable():
    def body(w, acc, x, flag):
        return acc + jnp.where(flag > 0, lax.psum(_grad(w, x), "d"), 0.0)

    assert found(inspect_loop(body)) == [("psum", (3,), "3", "deferrable")]


def test_select_n_with_a_selector_each_device_picks_is_needed():
    """Each device keeps the sum or not from its own rows: the sum over devices does not commute."""

    def run(w, xs):
        def body(acc, x):
            return acc + jnp.where(jnp.sum(x) > 0, lax.psum(_grad(w, x), "d"), 0.0), None

        return lax.scan(body, lax.pcast(jnp.zeros_like(w), "d", to="varying"), xs)[0]

    fn = jax.shard_map(run, mesh=_mesh(), in_specs=(P(), P(None, "d")), out_specs=P("d"))
    assert found(shardscope.inspect(fn, W, XS)) == [("psum", (3,), "3", "needed")]


def test_a_branch_that_multiplies_the_reduction_by_the_accumulator_is_needed():
    def body(w, acc, x, flag):
        return lax.cond(flag > 0, lambda a: a + lax.psum(_grad(w, x), "d") * jnp.tanh(a), lambda a: a, acc)

    assert found(inspect_loop(body)) == [("psum", (3,), "≤ 3", "needed")]


def test_a_branch_that_replaces_the_accumulator_keeps_the_sum_in_the_loop_in_both_views():
    """The other branch returns a value of its own: deferred, each of the 4 devices would keep it
    and the sum after the loop would give 4 times it."""

    def body(w, acc, x, flag):
        return lax.cond(flag > 0, lambda a, b: a + lax.psum(_grad(w, x), "d"), lambda a, b: b, acc, jnp.tanh(w) * 2)

    ins = inspect_loop(body)
    assert found(ins) == [("psum", (3,), "≤ 3", "needed")]
    assert [p.verdict_kind for p in ins.paired] == ["needed"] and ins.flagged == ()


def test_a_cond_whose_predicate_reads_the_accumulator_is_needed():
    def body(w, acc, x, flag):
        return lax.cond(jnp.sum(acc) > 1.0, lambda a: a, lambda a: a + lax.psum(_grad(w, x), "d"), acc)

    assert found(inspect_loop(body)) == [("psum", (3,), "≤ 3", "needed")]


def test_multiplying_the_reduction_by_the_accumulator_without_a_cond_is_needed():
    def body(w, acc, x, flag):
        return acc + lax.psum(_grad(w, x), "d") * acc

    assert found(inspect_loop(body, init=jnp.ones_like)) == [("psum", (3,), "3", "needed")]


def test_scaling_by_a_carry_the_reduction_never_reaches_stays_deferrable():
    """A decaying step size carried next to the accumulator is the same on every device and does not
    depend on the sums: psum(sum_t lr_t g_t) = sum_t lr_t psum(g_t)."""

    def run(w, xs):
        def body(carry, x):
            acc, lr = carry
            return (acc + lr * lax.psum(_grad(w, x), "d"), lr * 0.9), None

        return lax.scan(body, (jnp.zeros_like(w), jnp.float32(1.0)), xs)[0][0]

    fn = jax.shard_map(run, mesh=_mesh(), in_specs=(P(), P(None, "d")), out_specs=P())
    assert found(shardscope.inspect(fn, W, XS)) == [("psum", (3,), "3", "deferrable")]


def test_the_reduction_passed_into_a_nested_jit_that_adds_it_is_deferrable():
    add = jax.jit(lambda a, g: a + 2.0 * g)

    def body(w, acc, x, flag):
        return add(acc, lax.psum(_grad(w, x), "d"))

    assert found(inspect_loop(body)) == [("psum", (3,), "3", "deferrable")]


def test_a_nested_jit_that_squares_the_reduction_is_needed():
    square = jax.jit(lambda a, g: a + g * g)

    def body(w, acc, x, flag):
        return square(acc, lax.psum(_grad(w, x), "d"))

    assert found(inspect_loop(body)) == [("psum", (3,), "3", "needed")]


def _nested(inner_body):
    """Inspect an outer scan (2 steps) over an inner scan (3 micro-batches) with ``inner_body``."""

    def run(w, xs, flags):
        def outer(acc, batch):
            inner = lax.scan(lambda a, inp: (inner_body(w, a, *inp), None), acc, batch)[0]
            return inner, None

        return lax.scan(outer, jnp.zeros_like(w), (xs, flags))[0]

    fn = jax.shard_map(run, mesh=_mesh(), in_specs=(P(), P(None, None, "d"), P()), out_specs=P())
    return shardscope.inspect(fn, W, SDS((2, 3, 16, 8), jnp.float32), SDS((2, 3), jnp.int32))


def test_psum_in_a_cond_branch_of_nested_loops_is_deferrable_out_of_both():
    def body(w, acc, x, flag):
        return lax.cond(flag > 0, lambda a: a + lax.psum(_grad(w, x), "d"), lambda a: a, acc)

    ins = _nested(body)
    assert found(ins) == [("psum", (2, 3), "≤ 6", "deferrable")]
    verdict = ins.collectives[0].verdict
    assert len(verdict.loop_ids) == 2 and verdict.executions_after == 1
    lines = Path(__file__).read_text().splitlines()
    inner = next(k for k, line in enumerate(lines, 1) if "inner = lax.scan(" in line)
    outer = next(k for k, line in enumerate(lines, 1) if "return lax.scan(outer," in line)
    assert (f"the 2 nested loops (2 x 3 iterations: the lax.scan at test_deferral_paths.py:{inner} (_nested.<locals>.run."
            f"<locals>.outer) inside the lax.scan at test_deferral_paths.py:{outer} (_nested.<locals>.run))") in verdict.reason
    assert "1 run/call instead of ≤ 6" in verdict.fix


def test_nested_loops_whose_inner_branch_reads_the_accumulator_are_needed():
    def body(w, acc, x, flag):
        return lax.cond(flag > 0, lambda a: a + lax.psum(_grad(w, x), "d") * jnp.sum(a), lambda a: a, acc)

    assert found(_nested(body)) == [("psum", (2, 3), "≤ 6", "needed")]


def test_a_while_loop_whose_condition_reads_the_accumulator_is_needed():
    def run(w, xs):
        def body(carry):
            i, acc = carry
            return i + 1, acc + lax.psum(_grad(w, xs[i % 3]), "d")

        return lax.while_loop(lambda c: jnp.sum(c[1]) < 100.0, body, (0, jnp.zeros_like(w)))[1]

    fn = jax.shard_map(run, mesh=_mesh(), in_specs=(P(), P(None, "d")), out_specs=P())
    assert found(shardscope.inspect(fn, W, XS)) == [("psum", (None,), "?", "needed")]


def test_a_while_loop_counting_its_steps_accumulates_a_deferrable_reduction():
    def run(w, xs):
        def body(carry):
            i, acc = carry
            return i + 1, acc + lax.psum(_grad(w, xs[i % 3]), "d")

        return lax.while_loop(lambda c: c[0] < 5, body, (0, jnp.zeros_like(w)))[1]

    fn = jax.shard_map(run, mesh=_mesh(), in_specs=(P(), P(None, "d")), out_specs=P())
    assert found(shardscope.inspect(fn, W, XS)) == [("psum", (None,), "?", "deferrable")]


def test_a_gather_under_a_cond_on_the_loop_counter_is_not_loop_invariant():
    """The predicate picks what is gathered, so the operand changes with the carry."""

    def run(w_shard, xs):
        def body(carry, x):
            i, acc = carry
            w = lax.cond(i % 2 == 0, lambda: w_shard, lambda: 2.0 * w_shard)
            full = lax.all_gather(w, "d", tiled=True)
            return (i + 1, acc + jnp.sum(x @ full)[None]), None

        start = (0, lax.pcast(jnp.zeros(1), "d", to="varying"))
        return lax.scan(body, start, xs)[0][1]

    fn = jax.shard_map(run, mesh=_mesh(), in_specs=(P("d"), P(None, "d")), out_specs=P("d"))
    assert found(shardscope.inspect(fn, W, XS)) == [("all_gather", (3,), "3", "needed")]


def test_the_deferred_rewrite_of_a_cond_accumulation_computes_the_same_result():
    """What the verdict claims, on numbers: accumulate the local gradient varying through the same
    cond (the other branch decays the accumulator: linear too) and reduce once after the loop."""

    def accumulate(w, xs, flags, reduce_inside):
        def body(acc, inp):
            x, flag = inp
            g = lax.psum(_grad(w, x), "d") if reduce_inside else _grad(w, x)
            return lax.cond(flag > 0, lambda a: a + 0.5 * g, lambda a: a * 0.9, acc), None

        start = jnp.zeros_like(w) if reduce_inside else lax.pcast(jnp.zeros_like(w), "d", to="varying")
        acc = lax.scan(body, start, (xs, flags))[0]
        return acc if reduce_inside else lax.psum(acc, "d")

    def shard(reduce_inside):
        fn = lambda w, xs, flags: accumulate(w, xs, flags, reduce_inside)  # noqa: E731
        return jax.shard_map(fn, mesh=_mesh(), in_specs=(P(), P(None, "d"), P()), out_specs=P())

    keys = jax.random.split(jax.random.key(0), 2)
    w, xs = jax.random.normal(keys[0], (8, 8)), jax.random.normal(keys[1], (5, 16, 8))
    flags = jnp.array([1, 0, 1, 1, 0], jnp.int32)
    assert found(shardscope.inspect(shard(True), w, xs, flags)) == [("psum", (5,), "5", "deferrable")]
    naive, deferred = (np.asarray(jax.jit(shard(inside))(w, xs, flags)) for inside in (True, False))
    assert np.abs(naive).max() > 1.0  # not a trivial zero
    np.testing.assert_allclose(deferred, naive, rtol=1e-5, atol=1e-5)
