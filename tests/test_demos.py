"""Every shipped demo: naive all-reduces inside loops, deferred once per parameter leaf, same gradient."""

from __future__ import annotations

import runpy

import jax
import numpy as np
import pytest

from _support import DEMOS, plan_outputs
from shardscope.render.text import diff_text

DEMO_FILES = ["linear.py", "mlp.py", "rnn.py", "rbm.py"]
PARAM_LEAVES = {"linear.py": 1, "mlp.py": 4, "rnn.py": 3, "rbm.py": 3}


def equation(program, equation_id):
    """The equation of ``program`` called ``equation_id``."""
    (found,) = [s.equation for s in program.sites() if s.equation.id == equation_id]
    return found


def leaf_bytes(tree):
    return sorted(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(tree))


@pytest.mark.parametrize("demo", DEMO_FILES)
def test_naive_collectives_all_in_loops(analysis_of, demo):
    a = analysis_of(demo)
    chunks = a.shapes.chunks_per_device
    assert chunks == 2  # the default chunk size gives two chunks per device
    naive = a.plans["naive"]
    assert len(naive.collectives) == PARAM_LEAVES[demo]
    assert naive.collectives_in_loops == len(naive.collectives)
    for c in naive.collectives:
        assert c.axes == ("s",)
        assert c.loop_trip_counts[0] == chunks  # the outermost loop is the scan over chunks
        assert c.executions == np.prod(c.loop_trip_counts)
        assert c.bytes_per_call == c.executions * c.bytes_per_execution
    assert naive.jaxpr_runs_per_call == sum(c.executions for c in naive.collectives)
    assert len(naive.compiled.collectives) >= 1 and len(naive.compiled.findings) == len(naive.compiled.collectives)


@pytest.mark.parametrize("demo", DEMO_FILES)
def test_deferred_one_collective_per_leaf_outside_loops(analysis_of, demo):
    a = analysis_of(demo)
    deferred = a.plans["deferred"]
    assert len(deferred.collectives) == PARAM_LEAVES[demo]
    assert deferred.collectives_in_loops == 0
    assert all(c.executions == 1 and c.loop_trip_counts == () for c in deferred.collectives)
    assert deferred.jaxpr_runs_per_call == PARAM_LEAVES[demo]
    assert len(deferred.compiled.collectives) >= 1 and len(deferred.compiled.findings) == 0


@pytest.mark.parametrize("demo", DEMO_FILES)
def test_collective_payloads_are_the_param_leaves(analysis_of, demo):
    a = analysis_of(demo)
    (params, _, _), _ = plan_outputs(demo)
    sizes = leaf_bytes(params)
    for name in ("naive", "deferred"):
        assert sorted(c.bytes_per_execution for c in a.plans[name].collectives) == sizes, name
    assert a.plans["deferred"].jaxpr_bytes_per_call == sum(sizes)


@pytest.mark.parametrize("demo", DEMO_FILES)
def test_gradients_match_reference(analysis_of, demo):
    a = analysis_of(demo)
    _, outputs = plan_outputs(demo)
    scale = max(float(np.abs(leaf).max()) for leaf in jax.tree.leaves(outputs["reference"]))
    assert scale > 0.1  # the reference gradient is not trivially zero
    assert {"naive", "deferred"} <= set(a.plans)
    for name in a.plans:  # every plan built here, the reduced one too where JAX can build it
        assert a.plans[name].max_abs_err / scale < 2e-6, name
        # recomputed here from the programs' own outputs, leaf by leaf
        for got, want in zip(jax.tree.leaves(outputs[name]), jax.tree.leaves(outputs["reference"]), strict=True):
            assert got.shape == want.shape and got.dtype == want.dtype
            assert np.abs(got - want).max() / scale < 2e-6, name


@pytest.mark.parametrize("demo", DEMO_FILES)
def test_naive_and_deferred_differ_in_the_diff(analysis_of, demo):
    a = analysis_of(demo)
    text = diff_text(a)
    assert "--- naive" in text and "+++ deferred" in text
    removed = [l for l in text.splitlines() if l.startswith("-") and "psum" in l and not l.startswith("---")]
    added = [l for l in text.splitlines() if l.startswith("+") and "psum" in l and not l.startswith("+++")]
    assert removed and added  # the all-reduce moved


def test_rnn_naive_runs_chunks_times_T(analysis_of):
    T = runpy.run_path(str(DEMOS / "rnn.py"))["T"]
    for devices, chunk_size in [(2, None), (2, 8), (4, 4)]:
        a = analysis_of("rnn.py", devices=devices, chunk_size=chunk_size, repeats=1)
        chunks = a.shapes.chunks_per_device
        naive = a.plans["naive"]
        inner = [c for c in naive.collectives if len(c.loop_trip_counts) == 2]
        assert len(inner) == 1  # the recurrent weight's gradient, inside the time loop
        (wh,) = inner
        assert wh.loop_trip_counts == (chunks, T)
        assert wh.executions == chunks * T
        H = runpy.run_path(str(DEMOS / "rnn.py"))["H"]
        assert wh.bytes_per_execution == H * H * 4
        others = [c for c in naive.collectives if c is not wh]
        assert [c.executions for c in others] == [chunks] * len(others)
        assert naive.jaxpr_runs_per_call == chunks * T + chunks * len(others)
        hlo_inner = [c for c in naive.compiled.collectives if len(c.loop_trip_counts) == 2]
        assert [c.loop_trip_counts for c in hlo_inner] == [(chunks, T)]
        assert a.plans["deferred"].jaxpr_runs_per_call == 3


def test_rbm_collectives_are_complex64(analysis_of):
    a = analysis_of("rbm.py")
    for name in ("naive", "deferred"):
        plan = a.plans[name]
        for c in plan.collectives:
            (operand,) = equation(plan.program, c.equation_id).inputs
            assert operand.dtype == "complex64"
            assert c.bytes_per_execution == 8 * int(np.prod(operand.shape))
    assert any(op.shape.startswith("c64") for c in a.plans["naive"].compiled.collectives for op in c.operands)


def test_rbm_gradient_is_really_complex():
    _, outputs = plan_outputs("rbm.py")
    for leaf in jax.tree.leaves(outputs["naive"]):
        assert leaf.dtype == np.complex64
        assert np.abs(leaf.imag).max() > 1e-3


def test_mlp_one_collective_per_dict_leaf(analysis_of):
    a = analysis_of("mlp.py")
    (params, _, _), outputs = plan_outputs("mlp.py")
    assert sorted(outputs["naive"]) == sorted(outputs["deferred"]) == ["b1", "b2", "w1", "w2"]
    # the bias gradients may be all-reduced as f32[1,H] before the batch sum: compare sizes
    sizes = sorted(int(np.prod(equation(a.plans["naive"].program, c.equation_id).inputs[0].shape))
                   for c in a.plans["naive"].collectives)
    assert sizes == sorted(p.size for p in params.values())
