"""Models written by users, not the shipped demos: own loops, dynamic loops, nested pytrees, complex."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from _support import BRANCHY, DYNAMIC_WHILE, write_demo

from shardscope.render.text import summary

FORI = """
STEPS = 3

@shardscope.demo(params=jax.ShapeDtypeStruct((4, 4), jnp.float32),
                 x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
def fori(W, x):
    # static bounds: JAX turns this fori_loop into a scan of STEPS iterations
    return lax.fori_loop(0, STEPS, lambda i, h: jnp.tanh(h @ W), x)
"""

PYTREES = """
@shardscope.demo(
    params={"layers": [(jax.ShapeDtypeStruct((3, 6), jnp.float32), jax.ShapeDtypeStruct((6,), jnp.float32)),
                       (jax.ShapeDtypeStruct((6, 2), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.float32))],
            "scale": jax.ShapeDtypeStruct((), jnp.float32)},
    x=(jax.ShapeDtypeStruct((16, 3), jnp.float32), jax.ShapeDtypeStruct((16,), jnp.float32)),
)
def tree(params, x):
    h, weight = x
    for w, b in params["layers"]:
        h = jnp.tanh(h @ w + b)
    return {"out": params["scale"] * h, "weighted": (weight[:, None] * h).sum(-1)}
"""

COMPLEX_OUT = """
@shardscope.demo(params=(jax.ShapeDtypeStruct((3,), jnp.complex64), jax.ShapeDtypeStruct((3,), jnp.float32)),
                 x=jax.ShapeDtypeStruct((16, 3), jnp.complex64))
def phase(params, x):
    a, b = params
    return jnp.exp(x @ a) + x @ b
"""

CONCRETE = """
import numpy as np

@shardscope.demo(params=np.linspace(-1.0, 1.0, 4).astype(np.float32),
                 x=np.arange(32 * 4, dtype=np.float32).reshape(32, 4) / 100.0)
def concrete(W, x):
    return jnp.sin(x @ W)
"""


def analyze(path, **settings):
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    return analyze(Settings(path=path, repeats=1, **settings))


def test_model_with_its_own_static_loop(tmp_path):
    a = analyze(write_demo(tmp_path, "fori.py", FORI), devices=2, chunk_size=4)
    chunks = a.shapes.chunks_per_device
    assert chunks == 4
    naive, deferred = a.plans["naive"], a.plans["deferred"]
    (c,) = naive.collectives
    assert c.loop_trip_counts == (chunks, 3) and c.executions == 12
    assert c.bytes_per_execution == 4 * 4 * 4 and naive.jaxpr_bytes_per_call == 12 * 64
    assert deferred.jaxpr_runs_per_call == 1 and deferred.collectives_in_loops == 0
    assert [h.loop_trip_counts for h in naive.compiled.collectives] == [(4, 3)]
    assert naive.max_abs_err < 1e-5 and deferred.max_abs_err < 1e-5


def test_model_with_a_dynamic_while_loop(tmp_path):
    a = analyze(write_demo(tmp_path, "dyn.py", DYNAMIC_WHILE), devices=4, chunk_size=2)
    naive = a.plans["naive"]
    (c,) = naive.collectives
    assert c.loop_trip_counts == (4, None)
    assert c.executions is None and c.bytes_per_call is None  # unknown, not a guess
    assert naive.jaxpr_runs_per_call is None and naive.jaxpr_bytes_per_call is None
    assert naive.collectives_in_loops == 1
    assert "?" in summary(naive)
    assert a.plans["deferred"].jaxpr_runs_per_call == 1
    assert naive.max_abs_err < 1e-5 and a.plans["deferred"].max_abs_err < 1e-5


def test_nested_pytrees_with_tuples_and_lists(tmp_path):
    from shardscope.sources.loading import load_demo_file
    from shardscope.plans.registry import build_plans
    from shardscope.config.settings import Settings

    path = write_demo(tmp_path, "tree.py", PYTREES)
    a = analyze(path, devices=2, chunk_size=4)
    leaves = 5  # two (w, b) pairs and a scalar
    for name in ("naive", "deferred"):
        plan = a.plans[name]
        assert len(plan.collectives) == leaves, name
        assert sorted(c.bytes_per_execution for c in plan.collectives) == sorted([4, 3 * 6 * 4, 6 * 4, 6 * 2 * 4, 2 * 4])
        assert plan.max_abs_err < 1e-5
    assert a.plans["naive"].jaxpr_runs_per_call == leaves * 2
    assert a.plans["deferred"].jaxpr_runs_per_call == leaves

    settings = Settings(path=path, devices=2, chunk_size=4)
    built = build_plans(load_demo_file(path).get(None), settings)
    got = built.functions["naive"](*built.args)
    want = built.functions["reference"](*built.args)
    assert jax.tree.structure(got) == jax.tree.structure(want) == jax.tree.structure(built.args[0])
    assert isinstance(got["layers"], list) and isinstance(got["layers"][0], tuple)


def test_complex_inputs_and_outputs(tmp_path):
    a = analyze(write_demo(tmp_path, "phase.py", COMPLEX_OUT), devices=2, chunk_size=4)
    naive = a.plans["naive"]
    sizes = sorted(c.bytes_per_execution for c in naive.collectives)
    assert sizes == [3 * 4, 3 * 8]  # the real b's cotangent stays f32, the complex a's is c64
    assert naive.max_abs_err < 1e-5 and a.plans["deferred"].max_abs_err < 1e-5


def test_concrete_example_arrays(tmp_path):
    path = write_demo(tmp_path, "concrete.py", CONCRETE)
    a = analyze(path, devices=4)
    assert (a.shapes.batch, a.shapes.chunk_size, a.shapes.chunks_per_device) == (32, 4, 2)
    assert a.plans["naive"].jaxpr_runs_per_call == 2
    from shardscope.plans.registry import materialize

    W = materialize(np.linspace(-1.0, 1.0, 4).astype(np.float32), seed=0)
    np.testing.assert_array_equal(W, np.linspace(-1.0, 1.0, 4).astype(np.float32))  # used as given


def test_materialize_is_reproducible_and_complex_has_both_parts():
    from shardscope.plans.registry import materialize

    spec = {"a": jax.ShapeDtypeStruct((50,), np.complex64), "b": jax.ShapeDtypeStruct((2, 3), np.float32)}
    one, two = materialize(spec, 7), materialize(spec, 7)
    np.testing.assert_array_equal(one["a"], two["a"])
    np.testing.assert_array_equal(one["b"], two["b"])
    assert not np.array_equal(one["b"], materialize(spec, 8)["b"])
    assert one["a"].dtype == np.complex64 and one["b"].dtype == np.float32 and one["b"].shape == (2, 3)
    assert np.abs(one["a"].real).max() > 0.1 and np.abs(one["a"].imag).max() > 0.1


def test_batch_leaves_must_agree(tmp_path):
    from shardscope.errors import SettingsError

    path = write_demo(tmp_path, "ragged.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((3,), jnp.float32),
                         x=(jax.ShapeDtypeStruct((16, 3), jnp.float32), jax.ShapeDtypeStruct((8,), jnp.float32)))
        def ragged(W, x):
            return x[0] @ W
    """)
    with pytest.raises(SettingsError, match="leading"):
        analyze(path, devices=2)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_materialize_draws_normal_values_for_every_float_dtype(dtype):
    import jax.numpy as jnp

    from shardscope.plans.registry import materialize

    values = np.asarray(materialize(jax.ShapeDtypeStruct((256,), jnp.dtype(dtype)), 0), dtype=np.float32)
    assert np.asarray(materialize(jax.ShapeDtypeStruct((2,), jnp.dtype(dtype)), 0)).dtype == jnp.dtype(dtype)
    assert len(np.unique(values)) > 100  # not a handful of integers
    assert values.min() < -1 and values.max() > 1


@pytest.fixture(scope="module")
def branchy(tmp_path_factory):
    return analyze(write_demo(tmp_path_factory.mktemp("branchy"), "branchy.py", BRANCHY), devices=2, chunk_size=4)


def test_collectives_inside_jit_remat_and_cond(branchy):
    naive = branchy.plans["naive"]
    assert naive.collectives_in_loops == len(naive.collectives) == 3
    assert all(c.loop_trip_counts == (4,) for c in naive.collectives)
    assert sorted(c.in_conditional for c in naive.collectives) == [False, True, True]
    assert branchy.plans["deferred"].jaxpr_runs_per_call == 2
    assert naive.max_abs_err < 1e-5 and branchy.plans["deferred"].max_abs_err < 1e-5


def test_exclusive_cond_branches_are_not_both_counted(branchy):
    assert branchy.plans["naive"].jaxpr_runs_per_call == 8


def test_integer_inputs_embedding(tmp_path):
    path = write_demo(tmp_path, "emb.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((10, 4), jnp.float32),
                         x=jax.ShapeDtypeStruct((32, 3), jnp.int32))
        def emb(E, tokens):
            return E[tokens].sum(1)
    """)
    a = analyze(path, devices=2, chunk_size=4)
    (c,) = a.plans["naive"].collectives
    assert c.loop_trip_counts == (4,) and c.bytes_per_execution == 10 * 4 * 4
    assert a.plans["deferred"].jaxpr_bytes_per_call == 160
    assert a.plans["naive"].max_abs_err < 1e-5 and a.plans["deferred"].max_abs_err < 1e-5
