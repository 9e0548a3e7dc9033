"""shardscope.testing: counts and assertions a project's own tests use.

The counts are what XLA runs: every expected count is recounted from the compiled module's text
here (``_compiled_programs.recount``) or derived by hand (2 parameters x 4 micro-batches), never
read from shardscope.
"""

from __future__ import annotations

import re

import pytest
from _support import DEMOS, load_program_module

import _compiled_programs as programs
from shardscope.testing import (
    assert_collectives,
    assert_no_collectives_in_loops,
    collective_counts,
    jaxpr_collective_counts,
)


@pytest.fixture(scope="module")
def ts():
    return load_program_module(DEMOS / "train_step.py")


def _recounted_runs(fn, *args) -> dict[str, int]:
    """Runs per call of each collective kind, read from ``fn``'s compiled text by the test's own count."""
    return programs.recount(fn.trace(*args).lower().compile().as_text())["runs"]


def test_collective_counts_are_the_compiled_runs_per_call(ts):
    """XLA combines the two gradients' sums into one instruction: 4 runs in the loop, 1 after it."""
    naive, fixed = _recounted_runs(ts.step, ts.params, ts.xs, ts.ys), _recounted_runs(ts.step_fixed, ts.params, ts.xs, ts.ys)
    assert collective_counts(ts.step, ts.params, ts.xs, ts.ys) == naive
    assert collective_counts(ts.step_fixed, ts.params, ts.xs, ts.ys) == fixed
    assert naive == {"all-reduce": ts.MICRO_BATCHES} and fixed == {"all-reduce": 1}


def test_jaxpr_collective_counts_are_the_programs_own(ts):
    """Two parameters, each summed once per micro-batch in the jaxpr (4), or once after the loop."""
    assert jaxpr_collective_counts(ts.step, ts.params, ts.xs, ts.ys) == {"psum_invariant": 2 * ts.MICRO_BATCHES}
    assert jaxpr_collective_counts(ts.step_fixed, ts.params, ts.xs, ts.ys) == {"psum_invariant": 2}


def test_a_jit_with_shardings_counts_the_partitioners_all_reduce():
    """The issue's case: no collective in the jaxpr, an all-reduce per micro-batch in the module."""
    case = programs.gspmd_accumulate()
    recounted = _recounted_runs(case.fn, *case.args)
    assert recounted == {"all-reduce": programs.MICRO}
    assert collective_counts(case.fn, *case.args) == recounted
    assert jaxpr_collective_counts(case.fn, *case.args) == {}
    with pytest.raises(AssertionError) as failure:
        assert_no_collectives_in_loops(case.fn, *case.args)
    message = str(failure.value)
    assert message.startswith(f"1 collective(s) inside loops: all-reduce of grad(params['V']), grad(params['W']) ({programs.MICRO} runs/call)")
    assert "partitioner" in message and "deferrable" in message and "Fix: " in message
    with pytest.raises(AssertionError, match=f"all-reduce: {programs.MICRO} runs/call \\(allowed: 1\\)"):
        assert_collectives(case.fn, *case.args, max_per_call={"all-reduce": 1})
    assert_collectives(case.fn, *case.args, max_per_call={"psum_invariant": 0})  # the jaxpr has none


def test_dead_collectives_are_not_counted():
    """The loss pmean under jax.grad, a discarded ppermute and all_to_all never run: the compiled
    module has only the gradient's all-reduce, and the jaxpr counts leave the dead ones out."""
    case = programs.shard_map_dead_collectives()
    recounted = _recounted_runs(case.fn, *case.args)
    assert set(recounted) == {"all-reduce"}
    assert collective_counts(case.fn, *case.args) == recounted
    assert jaxpr_collective_counts(case.fn, *case.args) == {"psum_invariant": 1}


def test_assert_no_collectives_in_loops_fails_with_the_findings_table(ts):
    with pytest.raises(AssertionError) as failure:
        assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys)
    message = str(failure.value)
    assert message.startswith(
        f"1 collective(s) inside loops: all-reduce of grad(params['W1']), grad(params['W2']) ({ts.MICRO_BATCHES} runs/call)")
    assert "deferrable" in message and "Fix: cast" in message and "all-reduce[batch]" in message
    assert "psum_invariant of grad(params['W2']) + psum_invariant of grad(params['W1']) -> all-reduce" in message


def test_assert_no_collectives_in_loops_passes_and_allows(ts):
    inspection = assert_no_collectives_in_loops(ts.step_fixed, ts.params, ts.xs, ts.ys)
    assert inspection.findings == ()
    pipeline = load_program_module(DEMOS / "pipeline.py")
    with pytest.raises(AssertionError, match="collective-permute"):
        assert_no_collectives_in_loops(pipeline.pipeline, pipeline.weights, pipeline.inputs)
    for allow in (["ppermute"], ["collective-permute"], ["needed"]):
        assert_no_collectives_in_loops(pipeline.pipeline, pipeline.weights, pipeline.inputs, allow=allow)
    with pytest.raises(AssertionError):  # the combined all-reduce carries W2 too
        assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys, allow=["params['W1']"])
    assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys, allow=["params['W1']", "params['W2']"])


def test_allow_names_a_gradient_by_its_label_or_its_parameter(ts):
    """The combined all-reduce carries the gradients of params['W1'] and params['W2'], labelled
    grad(params['W1']) and grad(params['W2']): a user's allow may name either the label or the
    parameter, and must cover both values."""
    inspection = assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys,
                                                allow=["grad(params['W1'])", "grad(params['W2'])"])
    (finding,) = inspection.findings
    assert sorted(finding.values) == ["grad(params['W1'])", "grad(params['W2'])"]
    assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys, allow=["grad(params['W1'])", "params['W2']"])
    with pytest.raises(AssertionError, match=re.escape("all-reduce of grad(params['W1']), grad(params['W2'])")):
        assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys, allow=["grad(params['W1'])"])
    with pytest.raises(AssertionError):  # a gradient's label is not its parameter's own value
        assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys, allow=["grad(params)"])


def test_assert_collectives_max_per_call_takes_both_kinds_of_key(ts):
    assert_collectives(ts.step_fixed, ts.params, ts.xs, ts.ys, max_per_call={"all-reduce": 1, "psum_invariant": 2})
    assert_collectives(ts.step, ts.params, ts.xs, ts.ys, max_per_call={"all_gather": 0, "all-gather": 0})  # none present
    with pytest.raises(AssertionError) as failure:
        assert_collectives(ts.step, ts.params, ts.xs, ts.ys, max_per_call={"psum_invariant": 2})
    assert "psum_invariant: 8 runs/call (allowed: 2)" in str(failure.value)
    assert "params['W1']" in str(failure.value)
    with pytest.raises(AssertionError, match="all-reduce: 4 runs/call \\(allowed: 1\\)"):
        assert_collectives(ts.step, ts.params, ts.xs, ts.ys, max_per_call={"all-reduce": 1})


def test_assert_collectives_refuses_a_key_that_names_no_collective(ts):
    """``all_reduce`` is neither HLO's ``all-reduce`` nor a JAX primitive: a limit on it could never fail."""
    with pytest.raises(ValueError, match="'all_reduce' is neither a compiled collective kind"):
        assert_collectives(ts.step, ts.params, ts.xs, ts.ys, max_per_call={"all_reduce": 1})


def test_a_sum_in_a_cond_branch_is_an_upper_bound_in_every_count_and_the_assertion_says_so():
    """A psum in the branch of a ``lax.cond`` taken on even steps of a 6-step scan runs 3 times a
    call, which no static count can know: 6 runs (and 6 x 16 B of f32[4]) are the bound, marked ``≤``
    on the runs, the bytes and the summary alike, and an assertion over 3 fails saying it is a bound."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P())
    def every_other(xs):
        def body(acc, i):
            summed = lax.cond(i % 2 == 0, lambda a: a + lax.psum(xs[0], "x"), lambda a: a, acc)
            return summed, None

        return lax.scan(body, jnp.zeros(4, jnp.float32), jnp.arange(6))[0]

    xs = jnp.ones((16, 4), jnp.float32)
    with pytest.raises(AssertionError) as failure:
        assert_collectives(every_other, xs, max_per_call={"all-reduce": 3})
    text = str(failure.value)
    assert text.startswith("too many collective runs per call: all-reduce: ≤ 6 runs/call "
                           "(allowed: 3; counted as if every cond branch that holds one ran)")
    assert ", ≤ 6 runs/call;" in text.splitlines()[1] + " " + text.splitlines()[2]  # the summary
    row = next(line for line in text.splitlines() if "all-reduce[x]" in line)
    assert row.split()[4:7] == ["≤", "6", "≤"] and row.split()[7] == f"{6 * 4 * 4:,}"
