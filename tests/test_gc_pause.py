"""The engine reads a program with the cyclic GC paused, and leaves the collector as it found it."""

from __future__ import annotations

import gc
import threading

import pytest

from _support import DEMOS

from shardscope.pipeline.gc_pause import paused


@pytest.fixture(autouse=True)
def _collector_back_on():
    yield
    gc.enable()


def test_paused_resumes_the_collector_once_the_outermost_pause_ends():
    gc.enable()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "an inner pause does not resume the collector"
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_caller_stays_off():
    gc.disable()
    with paused():
        pass
    assert not gc.isenabled()


def test_an_error_inside_still_resumes_the_collector():
    gc.enable()
    with pytest.raises(ValueError):
        with paused():
            raise ValueError("a phase failed")
    assert gc.isenabled()


def test_concurrent_pauses_resume_the_collector_when_the_last_one_ends():
    gc.enable()
    first_in, second_out = threading.Event(), threading.Event()
    seen = []

    def first():
        with paused():
            first_in.set()
            second_out.wait(10)
            seen.append(gc.isenabled())  # the second pause ended while this one runs

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with paused():
        pass
    second_out.set()
    thread.join(10)
    assert seen == [False], "the collector stayed paused while the first thread's pause ran"
    assert gc.isenabled()


def test_analysing_a_deep_program_runs_no_collection_in_the_engine(monkeypatch):
    """Tracing may collect; reading the traced program (from_jaxpr, collectives, graph, counts) does not."""
    from shardscope.plans import registry
    from shardscope.pipeline.analysis import PlanResult
    from shardscope.sources.demos import load_demo_file
    from shardscope.engine.inspection import inspect_traced, pytree_names
    from shardscope.plans.settings import Settings

    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", "48")
    demo = load_demo_file(DEMOS / "deep.py").get("deep")
    built = registry.build_plans(demo, Settings(path=DEMOS / "deep.py"))
    traced = built.functions["naive"].trace(*built.args)
    params, x, v = built.args
    inputs = pytree_names(params, "params") + pytree_names(x, "x") + pytree_names(v, "v")
    outputs = pytree_names(traced.out_info, "params")
    gc.enable()
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    def counted(phase):
        """``phase()`` and how many collections ran during it."""
        gc.collect()  # what earlier phases left to collect, before the count starts
        threshold = gc.get_threshold()
        gc.set_threshold(1000, 1, 1)  # a collection every 1,000 allocations (the phases make 100,000s), unless paused
        collections.clear()
        gc.callbacks.append(count)
        try:
            return phase(), len(collections)
        finally:
            gc.callbacks.remove(count)
            gc.set_threshold(*threshold)

    inspection, during_inspection = counted(lambda: inspect_traced(traced, "naive", inputs, outputs))
    result, during_result = counted(lambda: PlanResult.from_inspection(
        inspection, name="naive", description="", role="plan", trace_s=0.0, graphs=True))
    assert result.program.equation_count > 1000 and result.graph.number_of_nodes() > 1000
    # at most one: the collection that catches up with the young objects once the pause ends
    assert during_inspection <= 1, f"{during_inspection} collections while the program was read"
    assert during_result <= 1, f"{during_result} collections while its counts and graph were built"
    assert gc.isenabled()
