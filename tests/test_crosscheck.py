"""The gradient cross-check between plans: dtype-aware, warned in the report, the JSON and the app."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from _support import GATED_COND_DEMO, write_demo

from shardscope.config.settings import Settings
from shardscope.measure.crosscheck import compare_results as compare, relative_tolerance
from shardscope.pipeline.run import analyze

GATED = GATED_COND_DEMO


def test_tolerance_follows_the_dtype():
    assert relative_tolerance(jnp.float32) == pytest.approx(3.4527e-4, rel=1e-3)
    assert relative_tolerance(jnp.bfloat16) == pytest.approx(0.0884, rel=1e-2)
    assert relative_tolerance(jnp.complex64) == relative_tolerance(jnp.float32)
    assert relative_tolerance(jnp.float64) < 1e-7


def test_compare_flags_a_difference_beyond_rounding_only():
    grads = {"w": np.linspace(-10, 10, 50, dtype=np.float32)}
    close = {"w": grads["w"] * np.float32(1 + 1e-6)}
    (same,) = compare({"naive": grads, "deferred": close})
    assert same.agree and same.warning is None and same.tolerance == pytest.approx(10 * relative_tolerance(np.float32))
    far = {"w": grads["w"] + np.float32(0.01)}
    (diff,) = compare({"naive": grads, "deferred": far})
    assert not diff.agree and diff.max_abs_diff == pytest.approx(0.01, rel=1e-3)
    assert diff.warning.startswith("the naive and deferred plans' gradients differ by 1.00e-02")
    nan = {"w": np.full(50, np.nan, dtype=np.float32)}
    assert not compare({"naive": grads, "deferred": nan})[0].agree


def test_the_tolerance_says_it_is_relative_to_the_largest_entry():
    """float32's machine epsilon is 2**-23, its square root 2**-11.5 = 3.4527e-04; the largest
    |entry| of the leaf out['W1'] in either result is 120.01: the tolerance is their product,
    4.1436e-02, and the words say so (it reads as absolute otherwise)."""
    a = {"W1": np.array([[120.0, 1.0], [-3.0, 0.5]], dtype=np.float32), "b": np.zeros(3, np.int32)}
    b = {"W1": a["W1"] + np.float32(0.01), "b": a["b"]}
    (check,) = compare({"step": a, "step_fixed": b}, subject="outputs")
    root_eps = 2 ** -11.5
    scale = float(np.float32(120.0) + np.float32(0.01))
    assert check.leaf == "['W1']" and check.scale == scale
    assert check.tolerance == pytest.approx(root_eps * scale, rel=1e-6)
    assert check.tolerance_text() == (
        f"{root_eps * scale:.1e} = sqrt(eps) of float32 ({root_eps:.1e}) x {scale:.1e}, the largest |entry| of out['W1']")
    assert check.tolerance_text() == "4.1e-02 = sqrt(eps) of float32 (3.5e-04) x 1.2e+02, the largest |entry| of out['W1']"
    (ints,) = compare({"a": {"n": np.arange(3)}, "b": {"n": np.arange(3)}})
    assert ints.tolerance_text() == f"0 ({np.arange(3).dtype} must match exactly)"


def test_report_warns_when_the_plans_disagree(tmp_path, shardscope_cli):
    path = write_demo(tmp_path, "gated.py", GATED)
    result = shardscope_cli("report", path, "--chunk-size", "4", "--repeats", "1", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (check,) = data["gradient_checks"]
    assert (check["baseline"], check["candidate"], check["agree"]) == ("naive", "deferred", False)
    assert check["max_abs_diff"] > 1.0 and check["dtype"] == "float32"
    (warning,) = data["warnings"]
    assert "gradients differ by" in warning and "lax.cond" in warning
    text = shardscope_cli("report", path, "--chunk-size", "4", "--repeats", "1")
    assert "warning: the naive and deferred plans' gradients differ" in " ".join(text.stdout.split())


def test_agreeing_plans_give_no_warning(analysis_of):
    analysis = analysis_of("rnn.py")
    (check,) = analysis.gradient_checks
    assert check.agree and analysis.warnings == []
    assert check.max_abs_diff <= check.tolerance



def test_an_optimizer_state_is_compared_on_its_floating_leaves_and_names_the_worst():
    """An optax step's outputs: the parameters and adam's state, whose int32 step ``count`` is
    equal in both (difference 0, tolerance 0: it said nothing, yet it was reported). The float
    leaves differ by rounding: the largest relative to its own tolerance is reported, by path."""
    import jax
    import optax

    params = {"w1": np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), "w2": np.ones(4, np.float32)}
    optimizer = optax.adam(1e-2)
    state = optimizer.init(params)
    grads = jax.tree.map(lambda p: p * np.float32(0.5), params)
    updates, state = optimizer.update(grads, state, params)
    original = jax.tree.map(np.asarray, (optax.apply_updates(params, updates), state))
    nudged = jax.tree.map(np.array, original)
    nudged[1][0].mu["w2"][0] += np.float32(2e-6)  # mu['w2'] is 0.05: 4e-5 of its tolerance's scale
    nudged[0]["w1"][0, 0] += np.float32(1e-7)  # w1 reaches 1: a smaller difference relative to its tolerance
    (check,) = compare({"original": original, "rewritten": nudged}, subject="outputs")
    expected = float(np.abs(nudged[1][0].mu["w2"] - original[1][0].mu["w2"]).max())
    assert check.max_abs_diff == pytest.approx(expected) and check.max_abs_diff > 0
    assert check.leaf == "[1][0].mu['w2']" and check.dtype == "float32"
    scale = max(np.abs(original[1][0].mu["w2"]).max(), np.abs(nudged[1][0].mu["w2"]).max())
    assert check.tolerance == pytest.approx(relative_tolerance(np.float32) * scale)
    assert check.agree


def test_an_integer_leaf_that_differs_is_the_worst():
    (check,) = compare({"a": {"count": np.int32(3), "w": np.ones(3, np.float32)},
                        "b": {"count": np.int32(4), "w": np.ones(3, np.float32)}})
    assert (check.leaf, check.max_abs_diff, check.agree) == ("['count']", 1.0, False)


def test_nan_in_the_same_entries_agrees_and_the_finite_ones_set_the_tolerance():
    """NaN at the same 2 places and -inf at the same place in both: those agree; the finite
    entries (largest |entry| 4) differ by 1e-6, within sqrt(eps) x 4 = 1.38e-3."""
    a = {"v": np.array([1.0, np.nan, -4.0, np.nan, -np.inf, 2.0], np.float32), "n": np.int32(3)}
    b = {"v": a["v"] + np.float32(1e-6), "n": np.int32(3)}
    (check,) = compare({"original": a, "rewritten": b}, subject="outputs")
    assert check.agree and check.warning is None and check.non_finite == 3
    assert check.non_finite_leaves == ("['v']",) and check.non_finite_mismatch == ""
    assert check.scale == 4.0 and check.tolerance == pytest.approx(4.0 * 2 ** -11.5)
    assert check.max_abs_diff == pytest.approx(float(np.float32(2.0) + np.float32(1e-6)) - 2.0)
    assert check.non_finite_note == ("both outputs are NaN or inf in the same 3 entries (out['v']) on these "
                                     "example arguments: there only the places were compared, not the numbers")


def test_nan_in_other_entries_differs_and_the_warning_says_where():
    """The rewrite has NaN in 2 entries where the original is finite, and +inf where the
    original has -inf: a real difference, whatever the finite entries say."""
    a = {"m": np.ones(4, np.float32), "v": np.array([1.0, 2.0, 3.0, -np.inf, np.nan], np.float32)}
    b = {"m": np.ones(4, np.float32), "v": np.array([np.nan, np.nan, 3.0, np.inf, np.nan], np.float32)}
    (check,) = compare({"original": a, "rewritten": b}, subject="outputs")
    assert not check.agree and check.leaf == "['v']" and check.max_abs_diff == 0.0
    assert check.non_finite_mismatch == (
        "the rewritten program has NaN in 2 entries of out['v'] where the original program's are finite; "
        "1 entry of out['v'] is -inf in the original program and +inf in the rewritten program")
    assert check.warning.startswith("the original and rewritten programs' outputs are not finite in different "
                                    "entries: the rewritten program has NaN in 2 entries of out['v']")
    reverse = compare({"original": b, "rewritten": a}, subject="outputs")[0].non_finite_mismatch
    assert reverse.startswith("the original program has NaN in 2 entries of out['v'] where the rewritten program's are finite")


def test_a_complex_leaf_is_compared_on_its_values_not_its_parts():
    """|a - b| of a complex entry is its modulus: 5e-4 + 5e-4j is |.| = 7.07e-4 away, beyond
    sqrt(eps) of complex64 (float32's, 2**-11.5) x the largest |entry|, |2 + 0j| = 2: 6.91e-4.
    (Compared part by part it was 5.0e-4, within the tolerance: the plans were said to agree.)"""
    a = {"w": np.array([2 + 0j, 1 + 1j], np.complex64)}
    b = {"w": a["w"] + np.array([0, 5e-4 + 5e-4j], np.complex64)}
    (check,) = compare({"naive": a, "deferred": b})
    part = float(np.float32(1.0) + np.float32(5e-4)) - 1.0  # each part's difference, in float32
    assert check.max_abs_diff == pytest.approx(abs(complex(part, part))) == pytest.approx(7.07e-4, rel=1e-3)
    assert check.scale == 2.0 and check.tolerance == pytest.approx(2 * 2 ** -11.5)
    assert check.tolerance == pytest.approx(6.91e-4, rel=1e-3) and not check.agree


def test_a_complex_entry_not_finite_in_either_part_counts_once():
    """complex(nan, nan) is one entry; so is complex(nan, 1), which is another kind than
    complex(nan, nan): NaN in the real part only differs from NaN in both."""
    a = {"z": np.array([complex(np.nan, np.nan), 3 + 4j], np.complex64)}
    (same,) = compare({"original": a, "rewritten": a}, subject="outputs")
    assert same.agree and same.non_finite == 1 and same.scale == 5.0
    assert same.non_finite_note.startswith("both outputs are NaN or inf in the same 1 entry (out['z'])")
    b = {"z": np.array([complex(np.nan, 1.0), 3 + 4j], np.complex64)}
    (other,) = compare({"original": a, "rewritten": b}, subject="outputs")
    assert not other.agree and other.non_finite == 0
    assert other.non_finite_mismatch == ("1 entry of out['z'] is NaN in the original program and "
                                         "NaN (real part) in the rewritten program")


GATED_SQRT = """
@shardscope.demo(
    params={"a": jax.ShapeDtypeStruct((5,), jnp.float32), "b": jax.ShapeDtypeStruct((5,), jnp.float32)},
    x=jax.ShapeDtypeStruct((64, 5), jnp.float32),
)
def gated_sqrt(p, x):
    return lax.cond(x[0, 0] > 2.0, lambda: jnp.sqrt(x @ p["b"]), lambda: jnp.tanh(x @ p["a"]))
"""


def test_a_plan_whose_gradient_is_not_finite_gets_one_warning(tmp_path):
    """Both plans' gradients are NaN somewhere, in different entries: each plan's not-finite
    warning says so, and the check's "not finite in different entries" is not said a second time."""
    analysis = analyze(Settings(path=write_demo(tmp_path, "gated_sqrt.py", GATED_SQRT), chunk_size=4, repeats=1))
    (check,) = analysis.gradient_checks
    assert check.non_finite_mismatch and not check.agree  # the case: NaN in other entries of the two plans
    assert [p.max_abs_err for p in analysis.plans.values()] == [pytest.approx(np.nan, nan_ok=True)] * 2
    assert analysis.warnings == [
        f"the {name} plan's gradient is not finite (NaN or inf somewhere, in it or in the reference): its "
        "max_abs_err is nan, not a small number" for name in analysis.plans]
