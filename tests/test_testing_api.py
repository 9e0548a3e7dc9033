"""shardscope.testing: counts and assertions a project's own tests use."""

from __future__ import annotations

import pytest
from _support import DEMOS, load_program_module

from shardscope.testing import assert_collectives, assert_no_collectives_in_loops, collective_counts


@pytest.fixture(scope="module")
def ts():
    return load_program_module(DEMOS / "train_step.py")


def test_collective_counts_are_runs_per_call(ts):
    assert collective_counts(ts.step, ts.params, ts.xs, ts.ys) == {"psum_invariant": 8}
    assert collective_counts(ts.step_fixed, ts.params, ts.xs, ts.ys) == {"psum_invariant": 2}


def test_assert_no_collectives_in_loops_fails_with_the_findings_table(ts):
    with pytest.raises(AssertionError) as failure:
        assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys)
    message = str(failure.value)
    assert message.startswith("2 collective equation(s) inside loops: psum_invariant of params['W2'] (4 runs/call)")
    assert "deferrable" in message and "Fix: cast" in message and "psum_invariant[batch]" in message


def test_assert_no_collectives_in_loops_passes_and_allows(ts):
    inspection = assert_no_collectives_in_loops(ts.step_fixed, ts.params, ts.xs, ts.ys)
    assert inspection.findings == ()
    pipeline = load_program_module(DEMOS / "pipeline.py")
    with pytest.raises(AssertionError, match="ppermute"):
        assert_no_collectives_in_loops(pipeline.pipeline, pipeline.weights, pipeline.inputs)
    assert_no_collectives_in_loops(pipeline.pipeline, pipeline.weights, pipeline.inputs, allow=["ppermute"])
    assert_no_collectives_in_loops(pipeline.pipeline, pipeline.weights, pipeline.inputs, allow=["needed"])
    with pytest.raises(AssertionError):
        assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys, allow=["params['W1']"])  # W2 still fails
    assert_no_collectives_in_loops(ts.step, ts.params, ts.xs, ts.ys, allow=["params['W1']", "params['W2']"])


def test_assert_collectives_max_per_call(ts):
    assert_collectives(ts.step_fixed, ts.params, ts.xs, ts.ys, max_per_call={"psum_invariant": 2})
    assert_collectives(ts.step, ts.params, ts.xs, ts.ys, max_per_call={"all_gather": 0})  # none present
    with pytest.raises(AssertionError) as failure:
        assert_collectives(ts.step, ts.params, ts.xs, ts.ys, max_per_call={"psum_invariant": 2})
    assert "psum_invariant: 8 runs/call (at most 2)" in str(failure.value)
    assert "params['W1']" in str(failure.value)
