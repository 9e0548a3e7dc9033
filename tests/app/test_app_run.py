"""The run worker: the first paint does not wait for JAX, runs report stages, keys stay live."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest
from app_support import DEMOS, GATE, ROOT, SIZE, drain, eventually, make_app, press, run, settle, write_gated_demo
from textual.worker import WorkerState

from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.app.widgets.status import StatusLine


def test_importing_the_app_does_not_import_jax():
    probe = "import sys, shardscope.app; print(json.dumps('jax' in sys.modules))"
    result = subprocess.run([sys.executable, "-c", "import json\n" + probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) is False


@dataclass(frozen=True)
class FirstRun:
    """What the app on linear.py shows once its first run (started by itself) is done, and which
    tabs were rendered then and after the Diff tab opened. Tests that only read this finished
    screen share one app run (``first_run``)."""

    function: str | None
    status: str
    tree_ids: tuple[str, ...]  # the naive tree's collectives
    analysis_ids: tuple[str, ...]  # the naive plan's collectives in the analysis
    sidebar_functions: list[str]
    views: dict[str, str | None]  # tab: the type of its view (None: not mounted, its placeholder shows)
    views_after_diff: dict[str, str | None]  # the same once the Diff tab was opened
    behind: set[str]  # the tabs not rendered yet
    behind_after_diff: set[str]  # the same once the Diff tab was opened
    profile: dict  # the startup profile's line (the app was opened with --profile-startup)


@pytest.fixture(scope="module")
def first_run() -> FirstRun:
    from shardscope.app import make_app as make_explorer
    from shardscope.config.settings import Settings

    async def scenario() -> FirstRun:
        app = make_explorer(Settings(DEMOS / "linear.py", repeats=2), profile_startup=True)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            analysis = app.analysis
            assert analysis is not None, "the first run never showed its results"
            behind = set(app.tabs_behind)
            shown = (analysis.function, app.query_one(StatusLine).plain,
                     tuple(app.query_one(PlansView).tree("naive").collective_ids),
                     tuple(c.equation_id for c in analysis.plans["naive"].collectives),
                     list(app.query_one("#sidebar").functions), mounted_views(app))
            await press(pilot, "3")
            await eventually(pilot, lambda: bool(app.query("#diff-view")), "opening the Diff tab mounts its view")
            await drain(pilot)
            shown += (mounted_views(app), behind, set(app.tabs_behind))
        return FirstRun(*shown, json.loads(app.profile.json_line()))

    return run(scenario())


def test_first_run_starts_by_itself_and_fills_every_place(first_run):
    assert first_run.function == "linear"
    status = first_run.status
    assert "linear.py::linear" in status and "mesh s=2" in status and "chunk 16" in status
    assert "compiled runs/call: naive 2, deferred 1, reduced 1" in status
    assert first_run.tree_ids == first_run.analysis_ids
    assert first_run.sidebar_functions == ["linear"]


def test_progress_goes_through_the_stages_in_order():
    async def scenario():
        from shardscope.app import ShardscopeApp
        from shardscope.config.settings import Settings

        stages = []

        class Recording(ShardscopeApp):
            def on_run_progress(self, message):  # Textual calls the base class handler too
                stages.append(message.stage)

        app = Recording(Settings(DEMOS / "linear.py", repeats=2), autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis is None  # autorun off: only the demo file was loaded
            assert app.query_one(StatusLine).plain.startswith("linear.py::linear  mesh s=2  chunk auto")
            assert "ready: press r to run" in app.query_one(StatusLine).plain
            stages.clear()
            await press(pilot, "r")
            await settle(pilot)
            assert app.analysis is not None
        seen = list(dict.fromkeys(stages))
        assert seen == [s for s in ("loading", "tracing", "compiling", "timing", "checking") if s in seen]
        assert seen[-1] == "checking" and len(seen) >= 2  # older reports may be replaced, never reordered

    run(scenario())


def test_a_key_pressed_during_a_run_is_handled_at_once(tmp_path):
    """Runs of a demo whose tracing waits for the test: keys pressed while one traces are handled at
    once; then a new run cancels the stale one (that was a test of its own, on its own app)."""
    async def scenario():
        app = make_app(write_gated_demo(tmp_path / "gated.py"), autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "r")
            worker = next(w for w in app.workers if w.is_running)
            await press(pilot, "3")
            assert app.query_one("#tabs").active == "diff"
            await press(pilot, "question_mark")
            assert type(app.screen).__name__ == "HelpScreen"
            await press(pilot, "escape")
            assert worker.is_running and app.running, "the keys were handled while the run was still tracing"
            assert "tracing" in app.query_one(StatusLine).plain
            GATE.set()
            await settle(pilot)
            assert app.analysis is not None and not app.running

            # a new run cancels the stale one
            GATE.clear()
            runs = app.run_id  # load, run
            await press(pilot, "r")
            first = [w for w in app.workers if w.is_running]
            assert len(first) == 1
            await press(pilot, "r")
            assert first[0].is_cancelled
            GATE.set()
            await settle(pilot)
            assert first[0].state == WorkerState.CANCELLED
            assert app.analysis is not None and app.run_id == runs + 2  # run, run
            assert not app.query_one("#error").shown

    run(scenario())


def test_profile_startup_records_first_paint_then_results(first_run):
    line = first_run.profile
    assert 0 < line["first_paint_s"] < line["results_s"]


FIRST_PAINT_PROBE = '''
import asyncio, json, sys
from pathlib import Path
from shardscope.app import ShardscopeApp
from shardscope.config.settings import Settings

seen = {}

class Probe(ShardscopeApp):
    def _after_first_paint(self):
        seen["jax_at_first_paint"] = "jax" in sys.modules
        super()._after_first_paint()

async def main():
    app = Probe(Settings(Path(sys.argv[1]), repeats=2), max_devices=4)
    async with app.run_test(size=(140, 45)) as pilot:
        for _ in range(500):
            await app.workers.wait_for_complete()
            await pilot.pause()
            if app.analysis is not None:
                break
        seen["jax_after_run"] = "jax" in sys.modules
        import jax

        seen["devices"] = len(jax.devices())  # what the worker started JAX with

asyncio.run(main())
print(json.dumps(seen))
'''


@pytest.mark.slow  # the app in a fresh process
def test_first_paint_does_not_wait_for_jax_and_the_worker_sets_the_devices():
    result = subprocess.run(
        [sys.executable, "-c", FIRST_PAINT_PROBE, str(DEMOS / "linear.py")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"jax_at_first_paint": False, "devices": 4, "jax_after_run": True}


def mounted_views(app) -> dict[str, str | None]:
    """The type of each deferred tab's view, None where the tab still holds its placeholder."""
    views = {tab: app.query(f"#{tab}-view") for tab in ("graph", "diff", "timings", "hlo", "sweep", "layouts")}
    for tab, found in views.items():
        assert len(found) + len(app.query(f"#{tab} > #{tab}-placeholder")) == 1, f"the {tab} tab holds its view or its placeholder"
    return {tab: type(found.first()).__name__ if found else None for tab, found in views.items()}


def test_tab_views_are_mounted_after_the_first_paint_and_shown_when_opened(first_run):
    """Each deferred tab's view is mounted when its tab is first shown (a tab never opened costs
    nothing), and a tab that shows renders the analysis then."""
    assert first_run.views == dict.fromkeys(("graph", "diff", "timings", "hlo", "sweep", "layouts"))
    assert first_run.views_after_diff == {**first_run.views, "diff": "DiffView"}
    assert first_run.behind == {"graph", "diff", "timings", "hlo", "sweep", "layouts"}  # only the visible tab rendered
    assert first_run.behind_after_diff == {"graph", "timings", "hlo", "sweep", "layouts"}


def test_the_other_tabs_load_after_the_first_run_unless_one_is_opened_sooner(tmp_path):
    """Their imports would compete with the first run's import of JAX: they wait for the run to end,
    but opening a tab during the run loads them at once. A Diff action asked for before there is a
    diff waits for it."""

    async def scenario():
        app = make_app(write_gated_demo(tmp_path / "gated.py"))  # the first run blocks while tracing
        async with app.run_test(size=SIZE) as pilot:
            await eventually(pilot, lambda: "tracing" in app.query_one(StatusLine).plain, "the first run traces")
            await drain(pilot)
            assert not app.query("#graph-view") and not app.query("#diff-view"), "not while the first run runs"
            commands = {c.title: c for c in app.get_system_commands(app.screen)}
            commands["Side by side"].callback()  # opens the Diff tab, whose view does not exist yet
            await eventually(pilot, lambda: bool(app.query("#diff-view")), "opening the Diff tab loaded the views")
            await drain(pilot)
            assert app.query_one("#tabs").active == "diff" and app.running, "while the first run still traces"
            assert not app.query_one("#diff-view").side_by_side, "no diff to lay out yet"
            GATE.set()
            await settle(pilot)
            assert app.analysis is not None and app.query_one("#tabs").active == "diff"
            assert app.query_one("#diff-view").side_by_side, "the layout switch asked for waited for the diff"

    run(scenario())


def test_a_diff_action_that_waits_lapses_when_the_user_leaves_the_tab(tmp_path):
    async def scenario():
        app = make_app(write_gated_demo(tmp_path / "gated.py"))
        async with app.run_test(size=SIZE) as pilot:
            await eventually(pilot, lambda: "tracing" in app.query_one(StatusLine).plain, "the first run traces")
            commands = {c.title: c for c in app.get_system_commands(app.screen)}
            commands["Side by side"].callback()
            await eventually(pilot, lambda: app.query_one("#tabs").active == "diff", "the palette opened the Diff tab")
            await press(pilot, "1")  # back to Plans, before or while the views load
            GATE.set()
            await settle(pilot)  # the views' import is one of the workers it waits for
            assert app.analysis is not None
            assert app.query_one("#tabs").active == "plans", "loading the views does not pull the user back"
            await press(pilot, "3")
            await settle(pilot)
            assert not app.query_one("#diff-view").side_by_side, "the request lapsed when the user left"

    run(scenario())


def test_after_a_first_run_that_fails_the_other_tabs_load_anyway(tmp_path):
    async def scenario():
        path = tmp_path / "broken.py"
        path.write_text("import jax\nimport shardscope\nraise RuntimeError('no model today')\n")
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.query_one(ErrorPanel).shown and app.analysis is None
            await press(pilot, "2")
            await eventually(pilot, lambda: bool(app.query("#graph-view")), "the Graph tab's view, after the failed run")
            await drain(pilot)
            assert "press r to run" in str(app.query_one("#graph-view #graph-placeholder").content)

    run(scenario())
