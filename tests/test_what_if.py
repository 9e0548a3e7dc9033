"""The what-if: each flagged finding rewritten as a user would fix it, checked before it is reported.

Every expected count is recounted from the compiled text here (``_what_if_programs.recount``),
every expected output comes from the hand-written fix or from numpy; never from shardscope.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import _compiled_programs as cp
import _what_if_programs as wp
from _support import DEMOS
from shardscope.whatif.deferral import SHARD_MAP, Deferral, EquationIndex
from shardscope.whatif.type_reach import type_reach
from shardscope.whatif.what_if import (DEFER, FAILED, HOIST, NO_SAVING, OUTPUTS_DIFFER, REFUSED, VERIFIED, Rewrite,
                                       rewrites_of, rewritten_program, subject_of, verify)
from shardscope.pipeline.what_if_programs import as_pipeline_program
from shardscope.sources.loading import import_file


def _one(subject):
    rewrites = rewrites_of(subject)
    assert len(rewrites) == 1, [r.summary() for r in rewrites]
    return rewrites[0]


def _jaxpr_primitives(closed, inside_loops: bool) -> list[str]:
    """The primitives of ``closed`` (a traced jaxpr) at any depth, inside loops or outside them."""
    from jax.extend.core import jaxprs_in_params

    found = []

    def walk(jaxpr, in_loop):
        for eqn in jaxpr.eqns:
            if in_loop == inside_loops:
                found.append(eqn.primitive.name)
            loop = in_loop or eqn.primitive.name in ("scan", "while")
            for sub in jaxprs_in_params(eqn.params):
                walk(getattr(sub, "jaxpr", sub), loop)

    walk(closed.jaxpr, False)
    return found


# --------------------------------------------------------------------------- the train-step demo


@pytest.fixture(scope="module")
def train_step():
    module, _ = import_file(DEMOS / "train_step.py")
    subject = subject_of(module.step, (module.params, module.xs, module.ys))
    return module, subject, _one(subject)


def test_the_rewrite_of_step_equals_step_fixed(train_step):
    """``step``'s per-micro-batch all-reduce moved after the scan: the compiled module is
    ``step_fixed``'s in counts (recounted from both texts), and so are the outputs."""
    module, subject, rewrite = train_step
    assert rewrite.status == VERIFIED and rewrite.kind == DEFER and rewrite.route == SHARD_MAP
    args, _ = subject.run_arguments
    naive = wp.recount(subject.compiled.as_text())
    fixed = wp.recount(module.step_fixed.trace(*args).lower().compile().as_text())
    rewritten = wp.recount(rewrite.program.compiled.as_text())
    assert naive["in_loop"] == {"all-reduce": 1} and naive["runs"] == {"all-reduce": module.MICRO_BATCHES}
    assert rewritten == fixed
    assert rewritten["in_loop"] == {} and rewritten["runs"] == {"all-reduce": 1}
    # the engine reads the rewritten program's plan the same way
    assert rewrite.program.plan.counts() == {"all-reduce": 1}
    assert rewrite.plan_check.instruction_runs == (module.MICRO_BATCHES, 1)
    # in the rewritten jaxpr both sums are after the loop, none inside it
    assert "psum_invariant" not in _jaxpr_primitives(rewrite.program.traced.jaxpr, inside_loops=True)
    assert _jaxpr_primitives(rewrite.program.traced.jaxpr, inside_loops=False).count("psum_invariant") == 2
    outputs = rewrite.program.run(*subject.run_arguments)
    wp.assert_same(wp.outputs(module.step_fixed, args), jax.tree.map(np.asarray, outputs), rtol=1e-6)
    wp.assert_same(wp.outputs(module.step, args), jax.tree.map(np.asarray, outputs))
    assert rewrite.findings and rewrite.findings[0].kind == "all-reduce" and rewrite.findings[0].executions == 4
    assert rewrite.values == ("grad(params['W1'])", "grad(params['W2'])")  # the sums moved are of the gradients


def test_the_patch_of_step_reads_like_step_fixed_and_applied_gives_it(train_step, tmp_path):
    """The diff against demos/train_step.py casts ``params`` before the loop with the demo's own
    names and lines; the patched file's ``step`` compiles to ``step_fixed``'s counts and outputs."""
    module, subject, rewrite = train_step
    patch = rewrite.patch
    assert patch is not None and patch.is_diff and patch.path.endswith("train_step.py")
    added = [line[1:].strip() for line in patch.text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:].strip() for line in patch.text.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert "local_params = jax.tree.map(lambda p: lax.pcast(p, 'batch', to='varying'), params)" in added
    assert "grads = jax.grad(loss)(params, *batch)" in removed and "grads = jax.grad(loss)(local_params, *batch)" in added
    assert "grads = lax.psum(grads, 'batch')" in added
    assert any("lax.pcast(a, 'batch', to='varying')" in line and "zeros_like" in line for line in added)
    patched_path = tmp_path / "train_step_patched.py"
    patched_path.write_text(patch.patched)
    patched, _ = import_file(patched_path)
    args, _ = subject.run_arguments
    fixed = wp.recount(module.step_fixed.trace(*args).lower().compile().as_text())
    assert wp.recount(patched.step.trace(*args).lower().compile().as_text()) == fixed
    wp.assert_same(wp.outputs(module.step_fixed, args), wp.outputs(patched.step, args), rtol=1e-6)


# --------------------------------------------------------------------------- jit with shardings


def _explicit_gradient(W, xs, ys):
    """The accumulated gradient of ``mean((tanh(x @ W) - y) ** 2)`` by hand, in numpy (float64)."""
    W = np.asarray(W, np.float64)
    total = np.zeros_like(W)
    for x, y in zip(np.asarray(xs, np.float64), np.asarray(ys, np.float64)):
        h = np.tanh(x @ W)
        total += x.T @ ((2 * (h - y) / h.size) * (1 - h**2))
    return total


@pytest.mark.parametrize("shardy", cp.shardy_modes())
def test_an_explicit_axes_accumulation_gets_one_all_reduce_after_the_loop_and_the_same_gradient(shardy):
    case = cp.explicit_accumulate(False)
    with cp.partitioner(shardy), case.context():
        subject = subject_of(case.fn, case.args)
        rewrite = _one(subject)
    assert rewrite.status == VERIFIED
    if shardy is False:  # the unreduced reshard compiles with Shardy only (DESIGN.md): the step runs per device
        (tried,) = rewrite.tried
        assert rewrite.route == "shard_map" and tried.route == "explicit" and tried.status == FAILED
        assert "compile" in tried.reason and "Shardy" in tried.reason
    else:
        assert rewrite.route == "explicit" and not rewrite.tried
    naive = wp.recount(subject.compiled.as_text())
    rewritten = wp.recount(rewrite.program.compiled.as_text())
    assert naive["in_loop"] == {"all-reduce": 1} and naive["runs"] == {"all-reduce": wp.MICRO}
    assert rewritten["instructions"] == {"all-reduce": 1} and rewritten["in_loop"] == {}
    assert rewritten["runs"] == {"all-reduce": 1}
    gradient = np.asarray(rewrite.program.run(*subject.run_arguments))
    W, xs, ys = case.args
    np.testing.assert_allclose(gradient, _explicit_gradient(W, xs, ys), rtol=0, atol=1e-5 * np.abs(gradient).max())
    if shardy is False:
        assert "jax.shard_map(mesh=mesh, in_specs=(P(), P(None, 'data'), P(None, 'data'))" in rewrite.patch.text
        return
    with cp.partitioner(shardy):
        _, _, hand_fixed = cp.compile_case(cp.explicit_accumulate, True, shardy=shardy)
    assert wp.recount(hand_fixed.as_text())["runs"] == rewritten["runs"]
    assert "jax.reshard(W, P(reduced={'data'}))" in rewrite.patch.text
    assert "acc = jax.reshard(acc, P())" in rewrite.patch.text


@pytest.mark.parametrize("shardy", cp.shardy_modes())
def test_an_auto_axes_accumulation_is_rewritten_with_explicit_axes(shardy):
    """jit with Auto axes cannot be told to accumulate unreduced: the program is traced again
    on the same devices with Explicit axes, and deferred there; the gradient is numpy's."""
    case = cp.gspmd_accumulate()
    with cp.partitioner(shardy):
        subject = subject_of(case.fn, case.args)
        rewrite = _one(subject)
    assert rewrite.status == VERIFIED
    if shardy is False:  # Explicit axes' unreduced accumulator compiles with Shardy only: the step runs per device
        assert rewrite.route == "shard_map" and [t.route for t in rewrite.tried] == ["auto"]
    else:
        assert rewrite.route == "auto" and not rewrite.tried
    assert wp.recount(subject.compiled.as_text())["in_loop"] == {"all-reduce": 1}
    rewritten = wp.recount(rewrite.program.compiled.as_text())
    assert rewritten["in_loop"] == {} and rewritten["runs"] == {"all-reduce": 1}
    grads = jax.tree.map(np.asarray, rewrite.program.run(*subject.run_arguments))
    expected = cp.reference_gradient(*case.args)
    for name in ("W", "V"):
        np.testing.assert_allclose(grads[name], expected[name], rtol=0, atol=1e-5 * np.abs(expected[name]).max())
    assert not rewrite.patch.is_diff  # the mesh changes, or the step moves inside a shard_map: a snippet
    assert ("jax.shard_map(" if shardy is False else "Explicit") in rewrite.patch.text


def test_an_auto_axes_scan_over_layers_leaves_both_loops():
    """Each layer's gradient stacked by the backward scan over layers, accumulated over
    micro-batches: 4 x 3 all-reduce runs per call become 1."""
    case = cp.scan_over_layers(True)
    subject = subject_of(case.fn, case.args)
    rewrite = _one(subject)
    assert rewrite.status == VERIFIED
    assert wp.recount(subject.compiled.as_text())["runs"] == {"all-reduce": wp.MICRO * case.notes["layers"]}
    assert wp.recount(rewrite.program.compiled.as_text())["runs"] == {"all-reduce": 1}
    wp.assert_same(jax.tree.map(np.asarray, subject.compiled(*subject.run_arguments[0])),
                   jax.tree.map(np.asarray, rewrite.program.run(*subject.run_arguments)))


# --------------------------------------------------------------------------- pytrees, complex, an RNN


@pytest.mark.parametrize("builder", [wp.nested_pytree, wp.complex_parameters, wp.rnn], ids=lambda b: b.__name__)
def test_the_rewrite_equals_the_hand_written_fix(builder):
    step, args = builder()
    fixed_step, _ = builder(fixed=True)
    subject = subject_of(step, args)
    rewrite = _one(subject)
    assert rewrite.status == VERIFIED
    naive = wp.recount(subject.compiled.as_text())
    fixed = wp.recount(fixed_step.trace(*args).lower().compile().as_text())
    rewritten = wp.recount(rewrite.program.compiled.as_text())
    assert naive["in_loop"]  # the naive program sums inside its loops
    assert rewritten["in_loop"] == fixed["in_loop"] == {}
    assert rewritten["runs"] == fixed["runs"] and rewritten["value_runs"] == fixed["value_runs"]
    outputs = jax.tree.map(np.asarray, rewrite.program.run(*subject.run_arguments))
    wp.assert_same(wp.outputs(fixed_step, args), outputs)
    wp.assert_same(wp.outputs(step, args), outputs)


def test_the_rnn_sums_leave_the_time_loop_and_the_micro_batch_loop():
    step, args = wp.rnn()
    subject = subject_of(step, args)
    rewrite = _one(subject)
    naive = wp.recount(subject.compiled.as_text())
    # the recurrent weight's sum runs in the time loop inside the micro-batch loop; Wx's and b's
    # (combined) once per micro-batch
    assert naive["runs"] == {"all-reduce": wp.MICRO * wp.T + wp.MICRO}
    assert wp.recount(rewrite.program.compiled.as_text())["runs"] == {"all-reduce": 1}
    assert rewrite.values == ("grad(params['Wh'])", "grad(params['Wx'])", "grad(params['b'])")


def test_a_complex_gradient_is_compared_within_its_tolerance():
    step, args = wp.complex_parameters()
    rewrite = _one(subject_of(step, args))
    assert rewrite.output_check.dtype == "complex64" and rewrite.output_check.agree
    assert 0 < rewrite.output_check.tolerance < 1e-2


# --------------------------------------------------------------------------- refusals and the checks


@pytest.mark.parametrize("builder,words", [
    (wp.weight_decay_added, "something else is added into the accumulator"),
    (wp.accumulator_from_the_weights, "does not start from zero"),
    (wp.pmax_in_the_loop, "max over devices, not a sum"),
    (wp.normalised_every_step, "with a sqrt, which is not linear"),
], ids=lambda x: getattr(x, "__name__", ""))
def test_a_rewrite_that_would_change_the_result_is_refused_with_the_reason(builder, words):
    step, args = builder()
    rewrite = _one(subject_of(step, args))
    assert rewrite.status == REFUSED and not rewrite.verified and rewrite.program is None
    assert words in rewrite.reason.lower()
    assert "not rewritten" in rewrite.summary()


def test_a_wrong_rewrite_is_caught_by_the_output_check():
    """The weight-decay accumulation deferred anyway (the refusal bypassed): the compiled plan
    looks like a saving, but the outputs differ by the decay counted once per extra device and
    micro-batch (a numpy derivation), and the rewrite is reported as such, never verified."""
    step, args = wp.weight_decay_added()
    subject = subject_of(step, args)
    index = EquationIndex(subject.traced.jaxpr)
    (collective,) = subject.collectives
    loop = collective.loop_ids[-1]
    seeds = {collective.equation_id: frozenset(collective.axes)}
    reach = type_reach(index.jaxpr, seeds, frozenset({loop}))
    assert reach.leaks  # the analysis refuses it ...
    forced = Deferral(SHARD_MAP, tuple(seeds), loop, frozenset(collective.axes), reach.carries, reach.summed[loop])
    program = rewritten_program(subject, subject.traced.jaxpr, forced.edits(index))
    base = Rewrite(DEFER, SHARD_MAP, loop, "the loop", subject.plan.collectives, subject.collectives, REFUSED, "")
    checked = verify(subject, base, program, "all-reduce", [(c, 1) for c in subject.plan.collectives])
    assert checked.plan_check.ok  # ... the compiled plan alone would call it a saving ...
    assert checked.status == OUTPUTS_DIFFER and checked.outputs_match is False and not checked.verified
    W = np.asarray(args[0])
    devices = 4
    difference = np.asarray(program.run(*subject.run_arguments)) - wp.outputs(step, args)
    np.testing.assert_allclose(difference, (devices - 1) * 0.01 * W * wp.MICRO, rtol=1e-4, atol=1e-6)


def test_a_loop_invariant_gather_in_a_branch_moves_before_the_loop():
    """XLA's loop-invariant code motion does not look into a conditional: the CPU module keeps
    the gather in the loop (recounted), the rewrite gathers once before it, as the hand fix does."""
    step, args = wp.gather_in_a_branch()
    fixed_step, _ = wp.gather_in_a_branch(fixed=True)
    subject = subject_of(step, args)
    rewrite = _one(subject)
    assert rewrite.kind == HOIST and rewrite.status == VERIFIED
    naive = wp.recount(subject.compiled.as_text())
    rewritten = wp.recount(rewrite.program.compiled.as_text())
    fixed = wp.recount(fixed_step.trace(*args).lower().compile().as_text())
    assert naive["in_loop"] == {"all-gather": 1} and naive["runs"] == {"all-gather": wp.MICRO}
    assert rewritten == fixed and rewritten["in_loop"] == {} and rewritten["runs"] == {"all-gather": 1}
    assert "all_gather" not in _jaxpr_primitives(rewrite.program.traced.jaxpr, inside_loops=True)
    # the gathered 8 x 8 float32 weight stays alive through the loop on every device
    assert rewrite.memory_bytes == 8 * 8 * 4
    outputs = np.asarray(rewrite.program.run(*subject.run_arguments))
    wp.assert_same(wp.outputs(fixed_step, args), outputs, rtol=1e-6)
    wp.assert_same(wp.outputs(step, args), outputs, rtol=1e-6)


def test_a_gather_the_compiler_already_hoists_is_no_saving():
    """The same gather straight in the body: flagged in the jaxpr, but the CPU already runs it
    once (recounted), so the rewrite is reported as changing nothing here, not as a saving."""
    step, args = wp.gather_in_the_body()
    subject = subject_of(step, args)
    assert wp.recount(subject.compiled.as_text())["in_loop"] == {}
    rewrite = _one(subject)
    assert rewrite.status == NO_SAVING and not rewrite.verified and "already" in rewrite.reason
    assert rewrite.outputs_match is True


def test_the_rewritten_program_goes_through_the_pipeline_as_a_program(train_step):
    """``pipeline_program`` gives the lead's pipeline the rewrite in the original's place."""
    from shardscope.pipeline.workload import PipelineProgram

    module, subject, rewrite = train_step
    original = PipelineProgram(name="step", description="", role="program", function=module.step,
                               arguments=((module.params, module.xs, module.ys), {}), input_names=lambda t: [],
                               output_names=lambda t: [], run_arguments=lambda t, c: subject.run_arguments,
                               trace_failure=lambda exc: (None, ""))
    program = as_pipeline_program(rewrite.program, original)
    assert program.name == "step-what-if" and program.role == "program"
    traced = program.function.trace(*program.arguments[0], **program.arguments[1])
    compiled = traced.lower().compile()
    assert wp.recount(compiled.as_text())["runs"] == {"all-reduce": 1}
    args, kwargs = program.run_arguments(traced, compiled)
    wp.assert_same(jax.tree.map(np.asarray, compiled(*args, **kwargs)),
                   jax.tree.map(np.asarray, rewrite.program.run(*subject.run_arguments)), rtol=0)
    assert dataclasses.is_dataclass(rewrite) and rewrite.__dataclass_params__.frozen


def test_the_plan_check_fails_a_rewrite_whose_sum_stayed_in_the_loop():
    """The compiled check on its own: a "rewritten" plan that is the original's (the sum still
    in the loop, 4 runs per call where the rewrite predicts 1) fails with the counts in words."""
    from shardscope.whatif.checks import plan_check

    step, args = wp.weight_decay_added()
    subject = subject_of(step, args)
    assert wp.recount(subject.compiled.as_text())["runs"] == {"all-reduce": wp.MICRO}
    (c,) = subject.plan.collectives
    check = plan_check(subject.plan, subject.plan, "all-reduce", [(c, 1)])
    assert not check.ok and check.runs_before == check.runs_after == wp.MICRO and check.runs_expected == 1
    assert check.in_loops == (1, 0, 1)
    assert "still carries 1 value(s) in all-reduces inside loops" in check.reason()
