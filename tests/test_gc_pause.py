"""The pipeline reads programs with the cyclic GC paused; the library leaves the caller's collector alone."""

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


def _collections_during(phase):
    """``phase()`` and how many collections ran during it, with a collection due every 1,000
    allocations (reading a deep program makes 100,000s) unless the collector is paused."""
    collections = []

    def count(stage, info):
        if stage == "start":
            collections.append(info["generation"])

    gc.collect()  # what earlier phases left to collect, before the count starts
    threshold = gc.get_threshold()
    gc.set_threshold(1000, 1, 1)
    gc.callbacks.append(count)
    try:
        return phase(), len(collections)
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)


def _deep_naive_plan(monkeypatch):
    """The deep demo's naive plan, traced, with the names of its inputs and outputs."""
    from shardscope.engine.joined.inspection import pytree_names
    from shardscope.plans import registry
    from shardscope.config.settings import Settings
    from shardscope.sources.loading import load_demo_file

    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", "48")
    demo = load_demo_file(DEMOS / "deep.py").get("deep")
    built = registry.build_plans(demo, Settings(path=DEMOS / "deep.py"))
    traced = built.functions["naive"].trace(*built.args)
    params, x, v = built.args
    inputs = pytree_names(params, "params") + pytree_names(x, "x") + pytree_names(v, "v")
    return traced, inputs, pytree_names(traced.out_info, "params")


def test_the_pipeline_reads_a_deep_program_with_no_collection(monkeypatch):
    """The pipeline (the CLI's and the app's) reads each traced program with the collector paused:
    at most one collection, when the pause ends (tracing itself may collect, and is not counted)."""
    from shardscope.pipeline import one_program, run as pipeline

    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", "48")
    counted = []
    read = one_program.inspect_traced  # the one path the pipeline reads each program on

    def counting(*args, **kwargs):
        result, collections = _collections_during(lambda: read(*args, **kwargs))
        counted.append((result.program.equation_count, collections))
        return result

    monkeypatch.setattr(one_program, "inspect_traced", counting)
    gc.enable()
    from shardscope.config.settings import Settings

    analysis = pipeline.analyze(Settings(path=DEMOS / "deep.py"), measure=False)
    assert analysis.plans["naive"].program.equation_count > 1000
    assert counted and all(collections <= 1 for _, collections in counted), counted
    assert gc.isenabled()


def test_the_library_leaves_the_callers_collector_alone(monkeypatch):
    """``shardscope.inspect`` and the engine are called from a user's code (a pytest run): they
    never switch the collector off, so it collects as the caller set it while a program is read."""
    from shardscope.engine.joined.inspection import inspect_traced

    traced, inputs, outputs = _deep_naive_plan(monkeypatch)
    gc.enable()
    seen_enabled = []
    gc.callbacks.append(lambda stage, info: seen_enabled.append(gc.isenabled()))
    try:
        inspection, collections = _collections_during(lambda: inspect_traced(traced, "naive", inputs, outputs))
    finally:
        gc.callbacks.pop()
    assert inspection.program.equation_count > 1000
    assert collections > 1, "the collector ran while the program was read, as the caller left it"
    assert gc.isenabled()
