"""shardscope.inspect and the verdicts, on real jaxprs: demos, plans, while loops, nested loops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope
from _support import load_program_module
from _tpu_text import all_reduces

from conftest import DEMOS

SDS = jax.ShapeDtypeStruct


def rows(inspection):
    """(primitive, value, loop trip counts, runs per call, bytes per call, verdict) per collective."""
    return [
        (c.primitive, c.value, c.loop_trip_counts, c.executions, c.bytes_per_call, c.verdict_kind)
        for c in inspection.collectives
    ]


@pytest.fixture(scope="module")
def train_step():
    return load_program_module(DEMOS / "train_step.py")


def test_train_step_naive_all_reduces_every_micro_batch_and_is_deferrable(train_step):
    ins = shardscope.inspect(train_step.step, train_step.params, train_step.xs, train_step.ys)
    # W2 is 32x1 f32 (128 B), W1 16x32 f32 (2,048 B); 4 micro-batches
    assert rows(ins) == [
        ("psum_invariant", "grad(params['W2'])", (4,), 4, 512, "deferrable"),  # the gradient of params['W2']
        ("psum_invariant", "grad(params['W1'])", (4,), 4, 8192, "deferrable"),
    ]
    assert ins.jaxpr_counts() == {"psum_invariant": 8}
    # XLA combines the two sums into one all-reduce: one finding, made of both equations, 4 runs
    (finding,) = ins.flagged
    assert [e.equation_id for e in finding.equations] == [c.equation_id for c in ins.collectives]
    assert ins.executed_collectives == finding.executions == 4 and finding.bytes_per_execution == 2048 + 128
    for c in ins.collectives:
        assert c.source.startswith("train_step.py:") and "(loss)" in c.source
        assert c.verdict.executions_after == 1
        assert "params = jax.tree.map(lambda p: lax.pcast(p, 'batch', to='varying'), params)" in c.verdict.fix and "1 run/call instead of 4" in c.verdict.fix


def test_train_step_fixed_reduces_once_after_the_loop(train_step):
    ins = shardscope.inspect(train_step.step_fixed, train_step.params, train_step.xs, train_step.ys)
    assert rows(ins) == [
        ("psum_invariant", "out['W1']", (), 1, 2048, "needed"),
        ("psum_invariant", "out['W2']", (), 1, 128, "needed"),
    ]
    assert ins.flagged == () and ins.findings == ()


def test_pipeline_ppermute_in_fori_loop_is_needed():
    module = load_program_module(DEMOS / "pipeline.py")
    ins = shardscope.inspect(module.pipeline, module.weights, module.inputs)
    # per device: 8 x 16 f32 activations = 512 B, sent on each of 4 steps
    assert rows(ins) == [("ppermute", "h", (4,), 4, 2048, "needed")]  # what lax.ppermute(h, ...) sends
    assert ins.flagged == ()
    assert "must run in the loop" in ins.collectives[0].verdict.reason


def _mesh(n=4):
    return Mesh(np.array(jax.devices()[:n]), ("d",))


def test_while_loop_with_unknown_trip_count_counts_as_unknown():
    mesh = _mesh()

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P("d")), out_specs=P())
    def solve(w, x):
        def body(carry):
            h, _ = carry
            h = jnp.tanh(h @ w)
            total = lax.psum(jnp.sum(x), "d")  # the same every iteration
            return h, lax.psum(jnp.sum(h * h), "d") / total  # read by the condition: needed

        h, _ = lax.while_loop(lambda c: c[1] > 1e-3, body, (x, lax.psum(jnp.sum(x), "d")))
        return lax.psum(jnp.sum(h, 0), "d")

    ins = shardscope.inspect(solve, SDS((8, 8), jnp.float32), SDS((16, 8), jnp.float32))
    found = rows(ins)
    assert [r[2:] for r in found] == [
        ((), 1, 4, "needed"),
        ((None,), None, None, "loop_invariant"),
        ((None,), None, None, "needed"),
        ((), 1, 32, "needed"),
    ]
    assert found[1][1] == "x"  # named after the input it reduces
    text = solve.trace(SDS((8, 8), jnp.float32), SDS((16, 8), jnp.float32)).lower().compile().as_text()
    assert " while(" in text and '"known_trip_count":' not in text  # the compiled loop has no static count either
    assert ins.executed_collectives is None
    assert ins.jaxpr_counts() == {"psum_invariant": None} and ins.counts() == {"all-reduce": None}
    hoist = ins.collectives[1].verdict
    assert hoist.hoist_bytes == 4 and hoist.executions_after == 1
    assert "4 B result per device" in hoist.fix and "an unknown number" in hoist.fix
    # The compiler already hoists the loop-invariant sum (and merges it with the equal one before the
    # loop): of the compiled module's three all-reduces only the one the condition reads runs in the
    # loop, so the compiled plan flags nothing and the hoisted sum runs nowhere of its own.
    assert sorted(depth for _, depth in all_reduces(text)) == [0, 0, 1]
    assert ins.flagged == ()
    hoisted = next(p for p in ins.paired if p.compiled is None)
    assert hoisted.equations == (ins.collectives[1],) and hoisted.executions == 0 and not hoisted.in_loop
    text = str(ins)
    assert "unknown runs/call" in text and "none runs in a loop without needing to" in text


def test_nested_loops_gather_is_invariant_and_reduce_scatter_deferrable_out_of_both():
    mesh = _mesh()

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("d"), P(None, None, "d")), out_specs=P("d"))
    def fsdp(w_shard, xs):
        def outer(acc, x_outer):
            def inner(acc, x):
                w = lax.all_gather(w_shard, "d", tiled=True)
                g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
                return acc + lax.psum_scatter(g, "d", tiled=True), None

            return lax.scan(inner, acc, x_outer)[0], None

        return lax.scan(outer, jnp.zeros_like(w_shard), xs)[0]

    ins = shardscope.inspect(fsdp, SDS((8, 8), jnp.float32), SDS((3, 2, 16, 8), jnp.float32))
    # per device: the 2x8 shard (64 B) gathers into 8x8 (256 B); the 8x8 gradient (256 B) scatters
    assert rows(ins) == [
        ("all_gather", "w_shard", (3, 2), 6, 6 * 64, "loop_invariant"),
        ("reduce_scatter", "out", (3, 2), 6, 6 * 256, "deferrable"),
    ]
    gather, scatter = (c.verdict for c in ins.collectives)
    assert len(gather.loop_ids) == 2 and gather.executions_after == 1 and gather.hoist_bytes == 256
    assert len(scatter.loop_ids) == 2 and scatter.executions_after == 1
    assert "lax.psum_scatter(acc, 'd')" in scatter.fix


def test_a_reduction_read_by_the_next_iteration_is_needed():
    mesh = _mesh()

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("d"), P(None, "d")), out_specs=P("d"))
    def normalise(h, xs):
        def body(h, x):
            return h / lax.psum(jnp.sum(h * x), "d"), None

        return lax.scan(body, h, xs)[0]

    ins = shardscope.inspect(normalise, SDS((8,), jnp.float32), SDS((5, 8), jnp.float32))
    assert [r[2:] for r in rows(ins)] == [((5,), 5, 20, "needed")]


@pytest.mark.parametrize(
    ("demo", "naive"),
    [
        ("linear.py", [("grad(params)", (2,), 2, 40)]),
        ("rnn.py", [("grad(params['Wh'])", (2, 8), 16, 16384), ("grad(params['b'])", (2,), 2, 128),
                    ("grad(params['Wx'])", (2,), 2, 512)]),
    ],
)
def test_plans_go_through_the_same_engine(analysis_of, demo, naive):
    analysis = analysis_of(demo)
    plan = analysis.plans["naive"]
    assert [(c.value, c.loop_trip_counts, c.executions, c.bytes_per_call) for c in plan.collectives] == naive
    assert all(c.verdict_kind == "deferrable" and c.verdict.executions_after == 1 for c in plan.collectives)
    deferred = analysis.plans["deferred"]
    # the sum after the loop carries the same gradient, accumulated per device first: it reaches the
    # plan's output, the gradient of params
    assert sorted(c.value for c in deferred.collectives) == sorted(v for v, *_ in naive)
    assert all(not c.in_loop and c.verdict_kind == "needed" for c in deferred.collectives)


def test_inspection_renders_as_rich_text_and_html(train_step):
    ins = shardscope.inspect(train_step.step, train_step.params, train_step.xs, train_step.ys)
    text = str(ins)
    assert "all-reduce[batch]" in text and "params['W1']" in text and "deferrable" in text
    assert "psum_invariant of grad(params['W2']) + psum_invariant of grad(params['W1']) -> all-reduce" in text
    assert "Fix: cast" in text
    html = ins._repr_html_()
    assert html.startswith('<div id="shardscope-') and "deferrable" in html  # tests/test_inspection_html.py
    assert ins.__rich__() is not None


def test_inspect_reports_a_function_that_does_not_trace():
    def broken(x):
        return x @ jnp.ones((3, 3))

    with pytest.raises(shardscope.ShardscopeError, match="broken fails to trace"):
        shardscope.inspect(broken, SDS((2, 2), jnp.float32))


def _loss(w, x):
    return jnp.sum(jnp.tanh(x @ w))


@jax.custom_vjp
def _custom(w, x):
    return jnp.sum(jnp.sin(x @ w))


def _custom_fwd(w, x):
    return _custom(w, x), (w, x)


def _custom_bwd(residuals, g):
    w, x = residuals
    return lax.psum(x.T @ (jnp.cos(x @ w) * g), "d"), jnp.zeros_like(x)


_custom.defvjp(_custom_fwd, _custom_bwd)


@pytest.mark.parametrize(
    ("label", "grad_fn"),
    [
        ("nested jit", jax.jit(jax.grad(_loss))),
        ("checkpoint", jax.grad(jax.checkpoint(_loss))),
        ("custom_vjp", jax.grad(_custom)),
    ],
)
def test_the_reduction_is_found_deferrable_through_calls_inside_the_loop(label, grad_fn):
    def accumulate(w, xs):  # not jitted: inspect jits it
        def body(acc, x):
            return acc + grad_fn(w, x), None

        return lax.scan(body, jnp.zeros_like(w), xs)[0]

    fn = jax.shard_map(accumulate, mesh=_mesh(), in_specs=(P(), P(None, "d")), out_specs=P())
    ins = shardscope.inspect(fn, SDS((8, 8), jnp.float32), SDS((3, 16, 8), jnp.float32))
    assert [(c.primitive, c.value, c.loop_trip_counts, c.executions, c.verdict_kind) for c in ins.collectives] == [
        ("psum_invariant", "grad(w)", (3,), 3, "deferrable")  # the gradient of w
    ], label


def test_an_accumulation_through_a_cond_is_conservatively_needed():
    def accumulate(w, xs):
        def body(acc, x):
            g = jax.grad(_loss)(w, x)
            return lax.cond(jnp.sum(acc) > 1e9, lambda: acc, lambda: acc + g), None

        return lax.scan(body, jnp.zeros_like(w), xs)[0]

    fn = jax.shard_map(accumulate, mesh=_mesh(), in_specs=(P(), P(None, "d")), out_specs=P())
    ins = shardscope.inspect(fn, SDS((8, 8), jnp.float32), SDS((3, 16, 8), jnp.float32))
    assert [(c.executions, c.verdict_kind) for c in ins.collectives] == [(3, "needed")]


def _written_psum_step(reduce: str, fixed: bool):
    """Params cast to varying before the loop, and the program's own ``lax.{reduce}`` of each
    micro-batch's gradient inside it (``fixed``: summed once after the loop instead)."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("dp",))
    sum_over = getattr(lax, reduce)

    def loss(p, x):
        return jnp.sum(jnp.tanh(x @ p["W"]) * p["b"])

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "dp")), out_specs=P())
    def step(p, xs):
        local = jax.tree.map(lambda a: lax.pcast(a, "dp", to="varying"), p)

        def body(acc, x):
            g = jax.grad(loss)(local, x)
            if not fixed and reduce == "psum":
                g = lax.psum(g, "dp")  # as users write it: the call on the line
            elif not fixed:
                g = lax.pmean(g, "dp")
            return jax.tree.map(jnp.add, acc, g), None

        start = local if fixed else p
        grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, start), xs)
        return sum_over(grads, "dp") if fixed else grads

    rng = np.random.default_rng(0)
    params = {"W": jnp.asarray(rng.normal(size=(6, 5)), jnp.float32), "b": jnp.asarray(rng.normal(size=(5,)), jnp.float32)}
    return step, (params, jnp.asarray(rng.normal(size=(3, 16, 6)), jnp.float32))


@pytest.mark.parametrize("reduce", ["psum", "pmean"])
def test_a_psum_the_program_wrote_in_the_loop_is_moved_not_cast(reduce):
    """The parameters are already varying: the sum in the loop is the program's own ``lax.psum``
    (a psum_invariant no pvary's transpose made). Its fix moves that call after the loop; done
    so, no collective is left in the loop and the gradient is the same."""
    step, args = _written_psum_step(reduce, fixed=False)
    found = shardscope.inspect(step, *args).findings
    assert found and all(c.primitives == ("psum_invariant",) and c.verdict_kind == "deferrable" for c in found)
    for c in found:
        assert c.verdict.fix.startswith(f"move the lax.{reduce} at test_inspection.py:"), c.verdict.fix
        assert f"lax.{reduce}(acc, 'dp') once after the loop" in c.verdict.fix and "cast" not in c.verdict.fix.split(":")[0]
    fixed, _ = _written_psum_step(reduce, fixed=True)
    assert not shardscope.inspect(fixed, *args).findings
    naive, moved = step(*args), fixed(*args)
    for name in ("W", "b"):
        np.testing.assert_allclose(np.asarray(moved[name]), np.asarray(naive[name]), rtol=1e-5, atol=1e-5)


def _fsdp_step(fixed: bool):
    """FSDP under shard_map: each device holds a row block of W, gathered (tiled) in every
    micro-batch; the gradient of the block is the gather's transpose, a reduce-scatter.
    ``fixed``: the fix's words as code, the gathered gradient accumulated, one psum_scatter."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("dp",))

    def loss(W, x):
        return jnp.sum(jnp.tanh(x @ W) ** 2)

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("dp"), P(None, "dp")), out_specs=P("dp"))
    def step(Ws, xs):
        def body(acc, x):
            if fixed:
                Wf = lax.all_gather(Ws, "dp", tiled=True)
                return acc + jax.grad(loss)(Wf, x), None
            return acc + jax.grad(lambda w, x: loss(lax.all_gather(w, "dp", tiled=True), x))(Ws, x), None

        start = lax.pcast(jnp.zeros((Ws.shape[0] * 4, Ws.shape[1]), Ws.dtype), "dp", to="varying") if fixed \
            else jnp.zeros_like(Ws)
        grads, _ = lax.scan(body, start, xs)
        return lax.psum_scatter(grads, "dp", tiled=True) if fixed else grads

    rng = np.random.default_rng(1)
    return step, (jnp.asarray(rng.normal(size=(8, 5)), jnp.float32), jnp.asarray(rng.normal(size=(3, 16, 8)), jnp.float32))


def test_an_fsdp_gradients_reduce_scatter_fix_names_the_gather_and_works_as_written():
    step, args = _fsdp_step(fixed=False)
    (finding,) = [c for c in shardscope.inspect(step, *args).findings if "reduce_scatter" in c.primitives]
    fix = finding.verdict.fix
    assert fix.startswith("it is the transpose of the lax.all_gather at test_inspection.py:"), fix
    assert "take the gradient of the gathered value instead" in fix and "of the gathered size" in fix
    assert "lax.psum_scatter(acc, 'dp', tiled=True) once after the lax.scan" in fix
    fixed, _ = _fsdp_step(fixed=True)
    assert not [c for c in shardscope.inspect(fixed, *args).findings if "reduce_scatter" in c.primitives]
    np.testing.assert_allclose(np.asarray(fixed(*args)), np.asarray(step(*args)), rtol=1e-4, atol=1e-4)
