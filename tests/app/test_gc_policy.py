"""The app's GC policy: a run's start collects what earlier runs left, even while another thread collects."""

from __future__ import annotations

import gc
import threading
import weakref

from shardscope.app import gc_policy


def test_collecting_earlier_runs_waits_for_a_collection_running_in_another_thread():
    inside, release = threading.Event(), threading.Event()

    class SlowToFinalize:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it

        def __del__(self):
            inside.set()
            release.wait(10)  # the other thread's collection is still running while this waits

    class Garbage:
        def __init__(self):
            self.me = self

    def full_passes_in_this_thread(found: list) -> callable:
        me = threading.get_ident()

        def count(phase, info):
            if phase == "stop" and info["generation"] == 2 and threading.get_ident() == me:
                found.append(1)
        return count

    SlowToFinalize()
    other = threading.Thread(target=gc.collect)
    other.start()
    try:
        assert inside.wait(10), "the other thread's collection reached the finalizer"
        skipped: list = []
        gc.callbacks.append(count := full_passes_in_this_thread(skipped))
        try:
            assert gc.collect() == 0 and not skipped, "CPython: a collect during another one does nothing"
        finally:
            gc.callbacks.remove(count)
        garbage = Garbage()
        earlier_run = weakref.ref(garbage)
        gc.freeze()  # an earlier run's garbage, frozen out of the collector with what lived then
        del garbage
        threading.Timer(0.05, release.set).start()
        gc_policy.collect_earlier_runs()
        release.set()
        other.join(10)
        assert earlier_run() is None, "the earlier run's garbage was collected, not frozen again"
    finally:
        release.set()
        other.join(10)
        gc.unfreeze()


def test_a_first_run_with_nothing_frozen_walks_no_object():
    """Nothing is frozen before an app's first result shows: the collector sees every object as
    usual, and a full pass would only walk all the process holds (seconds in a long-lived one)."""
    gc.unfreeze()
    passes: list = []

    def count(phase, info):
        if phase == "stop" and info["generation"] == 2:
            passes.append(1)

    gc.callbacks.append(count)
    try:
        gc_policy.collect_earlier_runs()
        assert passes == [], "a full collection ran with nothing frozen"
        gc.freeze()  # an earlier run's result, frozen when it showed
        gc_policy.collect_earlier_runs()
        assert passes, "with a run frozen, its garbage is collected"
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()
