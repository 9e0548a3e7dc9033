"""demos/deep.py: its depth comes from SHARDSCOPE_DEEP_DEPTH and the analysis grows with it."""

from __future__ import annotations

import pytest

from _support import DEMOS

DEEP = DEMOS / "deep.py"


def analyse(monkeypatch, depth: int, *, measure: bool = False):
    """The analysis of the deep demo at ``depth`` (traced only unless ``measure``)."""
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", str(depth))
    return analyze(Settings(path=DEEP, repeats=2), measure=measure)


def test_default_depth_without_the_variable(monkeypatch):
    from shardscope.sources.loading import load_demo_file

    monkeypatch.delenv("SHARDSCOPE_DEEP_DEPTH", raising=False)
    demo = load_demo_file(DEEP).get(None)
    assert demo.name == "deep"
    assert len(demo.spec.params) == 128
    assert "128 layers" in demo.spec.description


@pytest.mark.parametrize("depth", [1, 3])
def test_one_naive_collective_per_leaf_in_the_chunk_loop(monkeypatch, depth):
    a = analyse(monkeypatch, depth)
    leaves = 2 * depth  # a weight and a bias per layer
    chunks = a.shapes.chunks_per_device
    naive, deferred = a.plans["naive"], a.plans["deferred"]
    assert len(naive.collectives) == leaves
    assert naive.collectives_in_loops == leaves
    assert all(c.loop_trip_counts == (chunks,) for c in naive.collectives)
    assert naive.jaxpr_runs_per_call == leaves * chunks
    assert len(deferred.collectives) == leaves
    assert deferred.collectives_in_loops == 0
    assert deferred.jaxpr_runs_per_call == leaves
    # each all-reduce carries one leaf: an 8x8 weight or an 8-vector bias, float32
    assert sorted({c.bytes_per_execution for c in naive.collectives}) == [8 * 4, 8 * 8 * 4]


def test_equation_count_grows_linearly_with_depth(monkeypatch):
    counts = {d: analyse(monkeypatch, d).plans["naive"].program.equation_count for d in (1, 2, 4)}
    per_layer = counts[2] - counts[1]
    assert per_layer > 10
    assert counts[4] - counts[2] == 2 * per_layer


def test_measured_plans_match_the_reference(monkeypatch):
    a = analyse(monkeypatch, 2, measure=True)
    for plan in a.plans.values():
        assert plan.max_abs_err < 1e-5
    # XLA's CPU compiler may combine the four per-leaf all-reduces into one tuple all-reduce,
    # so only where they run is asserted: in the while body when naive, after it when deferred
    naive, deferred = a.plans["naive"].compiled, a.plans["deferred"].compiled
    assert len(naive.collectives) >= 1 and len(naive.findings) == len(naive.collectives)
    assert len(deferred.collectives) >= 1 and len(deferred.findings) == 0
