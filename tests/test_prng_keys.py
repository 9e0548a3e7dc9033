"""PRNG keys in a model: typed keys in x, a fixed key inside f, key dtypes in ShapeDtypeStructs.

Dropout is in most real models; each path a key takes through shardscope is checked here on a
dropout model, against real JAX: example inputs, the program tree, the plans' gradients, the
report's JSON and the diff.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _support import DROPOUT, write_demo
from shardscope.errors import SettingsError
from shardscope.config.settings import Settings

KEY_BYTES = 8  # a threefry key's data is uint32[2]


@pytest.fixture(scope="module")
def dropout_path(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("keys"), "dropout.py", DROPOUT)


@pytest.fixture(scope="module")
def dropout_analysis(dropout_path):
    from shardscope.pipeline.run import analyze

    return analyze(Settings(path=dropout_path, devices=2, chunk_size=8, repeats=2))


def test_example_keys_are_split_from_the_seed_reproducibly():
    from shardscope.plans.registry import materialize

    spec = {"key": jax.ShapeDtypeStruct((6,), jax.random.key(0).dtype), "w": jax.ShapeDtypeStruct((3,), jnp.float32)}
    one, two, other = materialize(spec, 5), materialize(spec, 5), materialize(spec, 6)
    assert one["key"].dtype == jax.random.key(0).dtype and one["key"].shape == (6,)
    data = np.asarray(jax.random.key_data(one["key"]))
    np.testing.assert_array_equal(data, np.asarray(jax.random.key_data(two["key"])))  # same seed, same keys
    assert not np.array_equal(data, np.asarray(jax.random.key_data(other["key"])))
    assert len({tuple(row) for row in data}) == 6  # six different keys, not one repeated


def test_keys_of_another_implementation_keep_their_dtype():
    from shardscope.plans.registry import materialize

    rbg = jax.random.key(0, impl="rbg").dtype
    keys = materialize(jax.ShapeDtypeStruct((4, 2), rbg), 0)
    assert keys.dtype == rbg and keys.shape == (4, 2)


def test_key_values_are_sized_from_their_key_data(dropout_analysis):
    program = dropout_analysis.plans["naive"].program
    (keys,) = [v for v in program.root.inputs if v.dtype.startswith("key<")]
    assert keys.type_str == "key<fry>[32]"
    assert keys.nbytes == 32 * KEY_BYTES


def test_dropout_counts_and_gradients_match_the_reference(dropout_analysis):
    naive, deferred = dropout_analysis.plans["naive"], dropout_analysis.plans["deferred"]
    (c,) = naive.collectives
    assert c.primitive == "psum_invariant" and c.loop_trip_counts == (2,) and c.bytes_per_execution == 4 * 4 * 4
    assert (naive.jaxpr_runs_per_call, deferred.jaxpr_runs_per_call) == (2, 1)
    assert naive.max_abs_err < 1e-5 and deferred.max_abs_err < 1e-5


def test_dropout_gradient_is_the_gradient_of_the_masked_model(dropout_path):
    """The keys reach f: the gradient equals one computed by hand from the same keys and mask."""
    from shardscope.sources.loading import load_demo_file
    from shardscope.plans.registry import build_plans

    settings = Settings(path=dropout_path, devices=2, chunk_size=8)
    built = build_plans(load_demo_file(dropout_path).get(None), settings)
    W, x, v = built.args
    # the draws in one jit (op by op, each draw would compile kernels of its own); the rest in numpy
    draw = jax.jit(lambda keys: (jax.vmap(lambda k: jax.random.bernoulli(k, 0.5, (4,)))(keys),
                                 jax.random.normal(jax.random.PRNGKey(0), (4,))))
    keep, noise = (np.asarray(a) for a in draw(x["key"]))
    inputs = np.asarray(x["inputs"])
    h = np.tanh(inputs @ np.asarray(W) + noise)
    by_hand = inputs.T @ (np.where(keep, np.asarray(v) / 0.5, 0.0) * (1 - h**2))
    assert 0 < int(keep.sum()) < keep.size  # some units dropped, some kept
    for name in ("naive", "deferred", "reference"):
        np.testing.assert_allclose(built.functions[name](*built.args), by_hand, rtol=1e-5, atol=1e-5, err_msg=name)


def test_report_json_of_the_dropout_model(dropout_path, shardscope_cli):
    result = shardscope_cli("report", dropout_path, "--json", "-r", "2", "--chunk-size", "8")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    naive, deferred = data["variants"]["naive"], data["variants"]["deferred"]
    assert (naive["executed_collectives"], naive["bytes_per_call"]) == (2, 2 * 64)
    assert (deferred["executed_collectives"], deferred["bytes_per_call"]) == (1, 64)
    assert naive["max_abs_err"] < 1e-5 and deferred["max_abs_err"] < 1e-5


def test_diff_of_the_dropout_model_shows_the_keys(dropout_path, shardscope_cli):
    result = shardscope_cli("diff", dropout_path, "--chunk-size", "8")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(l.startswith(" in ") and "key<fry>[32]" in l for l in lines)
    assert any("random_seed" in l for l in lines)  # the fixed key made inside f
    changed = [l for l in lines if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    assert any("psum_invariant" in l for l in changed)


def test_keys_in_params_are_refused_with_a_hint(tmp_path):
    from shardscope.pipeline.run import analyze

    path = write_demo(tmp_path, "keyparams.py", """
        @shardscope.demo(params={"W": jax.ShapeDtypeStruct((4,), jnp.float32),
                                 "key": jax.ShapeDtypeStruct((), jax.random.key(0).dtype)},
                         x=jax.ShapeDtypeStruct((16, 4), jnp.float32))
        def f(p, x):
            return x @ p["W"] + jax.random.normal(p["key"], (16,))
    """)
    with pytest.raises(SettingsError, match=r"found key<fry>") as info:
        analyze(Settings(path=path, devices=2, repeats=1))
    assert "x" in info.value.hint and "key" in info.value.hint.lower()
