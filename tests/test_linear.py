"""The seed case (demos/linear.py): one all-reduce per chunk naively, one per call deferred."""

from __future__ import annotations

import numpy as np
import pytest

from _support import plan_outputs
from shardscope.render.text import diff_text, summary


@pytest.fixture(scope="module")
def seed_case(analysis_of):
    return analysis_of("linear.py", devices=2, chunk_size=16)


def test_settings_resolved(seed_case):
    s = seed_case.shapes
    assert (s.batch, s.devices, s.per_device_batch, s.chunk_size, s.chunks_per_device) == (64, 2, 32, 16, 2)
    assert seed_case.function == "linear"
    assert seed_case.settings.chunk_size == 16
    assert seed_case.backend == "cpu"


def test_naive_all_reduces_every_chunk(seed_case):
    naive = seed_case.plans["naive"]
    assert len(naive.collectives) == 1
    (c,) = naive.collectives
    assert c.primitive == "psum_invariant"
    assert c.axes == ("s",)
    assert c.in_loop
    assert c.loop_trip_counts == (2,)
    assert c.executions == 2
    assert c.bytes_per_execution == 20  # f32[5]
    assert c.bytes_per_call == 40
    assert naive.collectives_in_loops == 1
    assert naive.jaxpr_runs_per_call == 2
    assert naive.jaxpr_bytes_per_call == 40


def test_deferred_all_reduces_once(seed_case):
    deferred = seed_case.plans["deferred"]
    assert len(deferred.collectives) == 1
    (c,) = deferred.collectives
    assert c.axes == ("s",)
    assert not c.in_loop
    assert c.loop_trip_counts == ()
    assert c.executions == 1
    assert c.bytes_per_call == 20
    assert deferred.collectives_in_loops == 0
    assert deferred.jaxpr_runs_per_call == 1
    assert deferred.jaxpr_bytes_per_call == 20


def test_hlo_agrees(seed_case):
    naive, deferred = seed_case.plans["naive"].compiled, seed_case.plans["deferred"].compiled
    assert naive.backend == deferred.backend == "cpu"
    assert [c.opcode for c in naive.collectives] == ["all-reduce"]
    assert naive.collectives[0].loop_trip_counts == (2,)
    assert (len(naive.collectives), len(naive.findings)) == (1, 1)
    assert [c.opcode for c in deferred.collectives] == ["all-reduce"]
    assert deferred.collectives[0].loop_trip_counts == ()
    assert (len(deferred.collectives), len(deferred.findings)) == (1, 0)


def test_both_plans_match_reference(seed_case):
    for name in ("naive", "deferred"):
        assert seed_case.plans[name].max_abs_err < 1e-5, name


def test_gradient_against_numpy():
    """x.T @ v computed by numpy on the very inputs the plans ran on: not shardscope against itself."""
    (W, x, v), outputs = plan_outputs("linear.py", devices=2, chunk_size=16)
    assert W.shape == (5,) and x.shape == (64, 5) and v.shape == (64,)
    expected = x.astype(np.float64).T @ v.astype(np.float64)
    assert np.abs(expected).max() > 1.0  # a non-trivial gradient
    for name in ("naive", "deferred", "reference"):
        np.testing.assert_allclose(outputs[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)


def test_timings_and_memory(seed_case):
    for name, plan in seed_case.plans.items():
        assert plan.compile_s > 0 and plan.trace_s > 0, name
        assert 0 < plan.run_s.min <= plan.run_s.median <= plan.run_s.max, name
        assert len(plan.run_s.samples) == seed_case.settings.repeats
        assert plan.memory["argument_size_in_bytes"] > 0
        assert plan.memory["output_size_in_bytes"] == 20  # the f32[5] gradient


@pytest.mark.parametrize(
    ("devices", "chunk_size", "chunks"),
    [(2, 16, 2), (2, 8, 4), (4, 4, 4), (4, 16, 1), (8, 2, 4), (1, 8, 8)],
)
def test_counts_follow_devices_and_chunks(analysis_of, devices, chunk_size, chunks):
    a = analysis_of("linear.py", devices=devices, chunk_size=chunk_size, repeats=1)
    assert a.shapes.chunks_per_device == chunks == 64 // devices // chunk_size
    naive, deferred = a.plans["naive"], a.plans["deferred"]
    (c,) = naive.collectives
    assert c.loop_trip_counts == (chunks,)
    assert naive.jaxpr_runs_per_call == chunks
    assert naive.jaxpr_bytes_per_call == 20 * chunks
    assert deferred.jaxpr_runs_per_call == 1 and deferred.collectives_in_loops == 0
    assert len(naive.compiled.collectives) == 1 and len(deferred.compiled.findings) == 0
    if chunks > 1:
        # XLA may fully unroll a one-trip loop, so only check the while body when it loops
        assert naive.compiled.collectives[0].loop_trip_counts == (chunks,)
    for plan in (naive, deferred):
        assert plan.max_abs_err < 1e-5


def test_default_chunk_size_gives_two_chunks(analysis_of):
    a = analysis_of("linear.py", devices=2, chunk_size=None, repeats=1)
    assert (a.shapes.chunk_size, a.shapes.chunks_per_device) == (16, 2)
    a4 = analysis_of("linear.py", devices=4, chunk_size=None, repeats=1)
    assert (a4.shapes.chunk_size, a4.shapes.chunks_per_device) == (8, 2)


def test_structure_only_analysis_agrees_and_is_deterministic(seed_case):
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    from _support import DEMOS

    settings = Settings(path=DEMOS / "linear.py", devices=2, chunk_size=16, repeats=1)
    first, second = analyze(settings, measure=False), analyze(settings, measure=False)
    for name in ("naive", "deferred"):
        plan = first.plans[name]
        assert plan.collectives == seed_case.plans[name].collectives
        assert plan.canonical_text == seed_case.plans[name].canonical_text
        assert plan.run_s is None and "run median" not in summary(plan)
    assert diff_text(first) == diff_text(second)
    assert "--- naive" in diff_text(first)


def test_progress_stages_in_order_and_cancellation():
    from shardscope.pipeline.analysis import STAGES
    from shardscope.pipeline.run import analyze
    from shardscope.errors import Cancelled
    from shardscope.config.settings import Settings

    from _support import DEMOS

    settings = Settings(path=DEMOS / "linear.py", devices=2, chunk_size=16, repeats=2)
    seen = []
    analyze(settings, progress=lambda stage, fraction: seen.append((stage, fraction)))
    stages = [s for s, _ in seen]
    assert set(stages) == set(STAGES)
    assert sorted(stages, key=STAGES.index) == stages  # never goes back to an earlier stage
    assert all(0.0 <= f <= 1.0 for _, f in seen)

    for stop_at in ("tracing", "compiling", "timing"):
        def progress(stage, fraction, stop_at=stop_at):
            if stage == stop_at:
                raise Cancelled()

        with pytest.raises(Cancelled):  # not wrapped into a user error
            analyze(settings, progress=progress)
