"""The what-if on the most common Auto-axes training step: gradients (and the loss) accumulated
in one ``lax.scan`` over micro-batches, an optax update after it, as users write it.

Expected counts are recounted from the compiled text (``_what_if_programs.recount``), expected
outputs come from running the original program: never from shardscope's own words.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import _what_if_programs as wp
from shardscope.whatif.what_if import VERIFIED, rewrites_of, subject_of
from shardscope.measure.crosscheck import relative_tolerance

MICRO = 4


def _setup():
    mesh = Mesh(np.array(jax.devices()[:4]), ("dp",))
    replicated = NamedSharding(mesh, P())
    optimizer = optax.adam(1e-2)
    rng = np.random.default_rng(0)
    params = jax.device_put({"w1": jnp.asarray(rng.normal(size=(16, 32)) * 0.1, jnp.float32),
                             "w2": jnp.asarray(rng.normal(size=(32, 4)) * 0.1, jnp.float32)}, replicated)
    opt_state = jax.device_put(optimizer.init(params), replicated)
    batch = NamedSharding(mesh, P(None, "dp"))
    xs = jax.device_put(jnp.asarray(rng.normal(size=(MICRO, 32, 16)), jnp.float32), batch)
    ys = jax.device_put(jnp.asarray(rng.normal(size=(MICRO, 32, 4)), jnp.float32), batch)
    return optimizer, (params, opt_state, xs, ys)


def _loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def _steps(optimizer):
    @jax.jit
    def train_step(params, opt_state, xs, ys):
        def body(grads, batch):
            return jax.tree.map(jnp.add, grads, jax.grad(_loss_fn)(params, *batch)), None

        grads, _ = jax.lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    @jax.jit
    def train_step_with_loss(params, opt_state, xs, ys):
        def body(carry, batch):
            grads, total = carry
            loss, g = jax.value_and_grad(_loss_fn)(params, *batch)
            return (jax.tree.map(jnp.add, grads, g), total + loss), None

        start = (jax.tree.map(jnp.zeros_like, params), jnp.zeros(()))
        (grads, total), _ = jax.lax.scan(body, start, (xs, ys))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, total / MICRO

    return train_step, train_step_with_loss


def test_the_outputs_check_names_the_float_leaf_that_differs_most():
    """The optax state's int32 ``count`` is equal in both programs: it is not what is reported."""
    optimizer, args = _setup()
    step, _ = _steps(optimizer)
    (rewrite,) = rewrites_of(subject_of(step, args, {}))
    assert rewrite.status == VERIFIED, rewrite.reason
    original = wp.outputs(step, args)
    rewritten = jax.tree.map(np.asarray, rewrite.program.run(args, {}))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(original)[0]]
    ratios = {}
    for path, a, b in zip(paths, jax.tree.leaves(original), jax.tree.leaves(rewritten)):
        if np.issubdtype(a.dtype, np.floating):
            bound = relative_tolerance(a.dtype) * max(np.abs(a).max(), np.abs(b).max())
            ratios[path] = (float(np.abs(a - b).max()) / bound if bound else 0.0, float(np.abs(a - b).max()))
    worst = max(ratios, key=lambda p: ratios[p][0])
    check = rewrite.output_check
    assert check.leaf == worst and check.max_abs_diff == pytest.approx(ratios[worst][1])
    assert check.dtype == "float32" and check.tolerance > 0


def test_the_loss_accumulated_beside_the_gradients_is_one_more_accumulated_value():
    """The loss total starts as ``jnp.zeros(())`` inside the program (no mesh of its own) and is
    the mean's ``sum / N``: both are moved out of the loop with the gradients, and verified."""
    optimizer, args = _setup()
    _, step = _steps(optimizer)
    before = wp.recount(step.lower(*args).compile().as_text())
    assert before["in_loop"].get("all-reduce", 0) >= 1 and before["runs"]["all-reduce"] >= MICRO
    (rewrite,) = rewrites_of(subject_of(step, args, {}))
    assert rewrite.status == VERIFIED, rewrite.reason
    after = wp.recount(rewrite.program.compiled.as_text())
    assert after["in_loop"].get("all-reduce", 0) == 0 and after["runs"]["all-reduce"] >= 1
    wp.assert_same(wp.outputs(step, args), jax.tree.map(np.asarray, rewrite.program.run(args, {})))


def test_outputs_that_are_nan_in_the_same_entries_agree_and_the_status_says_so():
    """Adam's second moment made negative in 5 entries of ``w1`` (as random example inputs make
    it): ``sqrt(nu_hat)`` is NaN there, in the original and in the rewrite alike, so ``w1``'s new
    values are NaN in exactly those 5 entries (``nu`` itself stays finite: 0.999 * -1 + 0.001 * g**2).
    The rewrite computes the same thing: it is verified, and the status says the NaN entries were
    compared by place only. (It was ``outputs_differ``: NaN - NaN made the difference inf.)"""
    optimizer, (params, opt_state, xs, ys) = _setup()
    negative = [(0, 0), (3, 7), (5, 1), (9, 30), (15, 31)]
    nu = np.array(opt_state[0].nu["w1"])
    for entry in negative:
        nu[entry] = -1.0
    opt_state = (opt_state[0]._replace(nu={**opt_state[0].nu, "w1": jax.device_put(nu, params["w1"].sharding)}),
                 *opt_state[1:])
    args = (params, opt_state, xs, ys)
    step, _ = _steps(optimizer)
    original = wp.outputs(step, args)
    assert sorted(zip(*np.nonzero(np.isnan(original[0]["w1"])))) == negative  # the hand derivation holds
    (rewrite,) = rewrites_of(subject_of(step, args, {}))
    assert rewrite.status == VERIFIED, rewrite.reason
    check = rewrite.output_check
    assert check.agree and check.non_finite == len(negative) and check.non_finite_leaves == ("[0]['w1']",)
    assert check.non_finite_mismatch == "" and np.isfinite(check.tolerance) and np.isfinite(check.max_abs_diff)
    assert ("both outputs are NaN or inf in the same 5 entries (out[0]['w1']) on these example arguments: "
            "there only the places were compared, not the numbers") in rewrite.reason
    rewritten = rewrite.program.run(args, {})
    assert np.array_equal(np.isnan(np.asarray(rewritten[0]["w1"])), np.isnan(original[0]["w1"]))
