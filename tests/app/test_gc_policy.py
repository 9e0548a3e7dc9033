"""The app's GC policy: a run's start collects what earlier runs left, even while another thread collects."""

from __future__ import annotations

import gc
import threading
import weakref

from shardscope.app.base import gc_policy


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
        collector = gc_policy.Collector()
        collector.freeze_what_lives()  # an earlier run's garbage, frozen out of the collector with what lived then
        del garbage
        threading.Timer(0.05, release.set).start()
        collector.collect_earlier_runs()
        release.set()
        other.join(10)
        assert earlier_run() is None, "the earlier run's garbage was collected, not frozen again"
    finally:
        release.set()
        other.join(10)
        gc.unfreeze()


def test_a_first_run_walks_no_object_whatever_the_process_froze_before():
    """Before an app's first result shows it has frozen nothing: a full pass would only walk all
    the process holds (seconds in a long-lived one), what others froze included. Once it froze a
    result, the next run collects; another app's collector is not moved by that."""
    passes: list = []

    def count(phase, info):
        if phase == "stop" and info["generation"] == 2:
            passes.append(1)

    class Garbage:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it

    gc.callbacks.append(count)
    try:
        collector, other_app = gc_policy.Collector(), gc_policy.Collector()
        gc.unfreeze()
        collector.collect_earlier_runs()
        assert passes == [], "a full collection ran with nothing frozen"
        gc.freeze()  # frozen by someone else: the process before the app started, a test harness
        collector.collect_earlier_runs()
        assert passes == [], "a full collection ran though this app had frozen nothing"
        assert gc.get_freeze_count(), "what others froze is left frozen"

        garbage = Garbage()
        earlier_run = weakref.ref(garbage)
        collector.freeze_what_lives()  # an earlier run's result, frozen when it showed
        del garbage
        other_app.collect_earlier_runs()
        assert passes == [] and earlier_run() is not None, "another app's first run collected this one's"
        collector.collect_earlier_runs()
        assert passes, "with a run frozen, its garbage is collected"
        assert earlier_run() is None, "the earlier run's garbage was collected"
        assert gc.get_freeze_count(), "what lives is frozen again"
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()
