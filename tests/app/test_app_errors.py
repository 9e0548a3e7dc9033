"""Errors a user can cause show in the error panel; the app keeps running, old results stay."""

from __future__ import annotations

from app_support import DEMOS, SIZE, drain, make_app, press, run, settle, write_demo
from textual.widgets import Input

from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.views.plans.plans_view import PlansView

BAD_PARAMS_DEMO = '''
import jax
import jax.numpy as jnp

import shardscope


class Weights:
    """Not an array: turning it into one fails with a RuntimeError."""

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("these weights cannot become an array")


@shardscope.demo(params=Weights(), x=jax.ShapeDtypeStruct((64, 5), jnp.float32))
def odd(W, x):
    return x @ W
'''


def test_bad_chunk_size_is_flagged_and_refused_before_running():
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            before = app.analysis
            chunk = app.query_one("#chunk", Input)
            chunk.focus()
            await press(pilot, "7")
            assert chunk.has_class("-invalid")
            assert app.query_one("#chunk-help").has_class("-invalid")
            await press(pilot, "enter", "escape", "r")
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown
            assert "Chunk size 7 does not divide the per-device batch 32" in panel.message
            assert "1, 2, 4, 8, 16, 32" in panel.hint
            assert app.run_id == 1, "no run started"
            assert app.analysis is before
            assert app.query_one(PlansView).tree("naive").collective_ids  # old results still shown
            await press(pilot, "escape")
            assert not panel.shown

    run(scenario())


def test_model_that_fails_to_trace(tmp_path):
    async def scenario():
        path = write_demo(tmp_path / "model.py", extra='''

        @shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32), x=jax.ShapeDtypeStruct((64, 5), jnp.float32))
        def mismatched(W, x):
            return x @ jnp.ones((3,))
        ''')
        app = make_app(path, function="mismatched")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "fails" in panel.message and panel.hint
            assert app.analysis is None and app.is_running

    run(scenario())


def test_an_unexpected_exception_becomes_an_error_panel_not_a_traceback(tmp_path):
    async def scenario():
        path = tmp_path / "odd.py"
        path.write_text(BAD_PARAMS_DEMO)
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown
            assert panel.message.startswith("RuntimeError: these weights cannot become an array")
            assert app.is_running and app.return_code is None

    run(scenario())


def test_missing_demo_file_is_an_error_panel(tmp_path):
    async def scenario():
        app = make_app(tmp_path / "nowhere.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "No such file" in panel.message
            assert app.check_action("export", ()) is None

    run(scenario())


def test_a_fifo_is_named_in_the_error_panel_and_never_read(tmp_path):
    import os

    fifo = tmp_path / "model.py"
    os.mkfifo(fifo)

    async def scenario():
        app = make_app(fifo)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "is a FIFO (a named pipe), not a Python file" in panel.message
            await press(pilot, "r")  # the reload check does not read it either
            await settle(pilot)
            assert panel.shown and "is a FIFO" in panel.message and app.is_running

    run(scenario())


def test_r_reloads_the_demo_file_after_an_edit(tmp_path):
    """One app on a demo file edited three times while it runs: r reuses the file unchanged on
    disk; an edit that stops it importing is an error panel and the results stay, and fixed, r
    runs it again (that was a test of its own, on its own app); a demo added is offered."""
    async def scenario():
        path = write_demo(tmp_path / "model.py", batch=64)
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis.shapes.batch == 64
            first_file = app.demo_file
            await press(pilot, "r")  # unchanged on disk: the loaded file is reused
            await settle(pilot)
            assert app.demo_file is first_file

            # a demo file that stops importing after an edit
            before = app.analysis
            assert before is not None
            path.write_text(path.read_text() + "\nraise RuntimeError('broken on purpose')\n")
            await press(pilot, "r")
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown
            assert "Importing" in panel.message and "broken on purpose" in panel.message
            assert panel.hint and "model.py line" in panel.hint
            assert app.analysis is before and app.is_running
            assert "failed" in app.query_one("#status").plain
            write_demo(path)  # fixed again
            await press(pilot, "r")
            await settle(pilot)
            assert not panel.shown and app.analysis is not before

            # a second demo added while the app runs
            first_file = app.demo_file  # the file as fixed
            write_demo(path, batch=32, extra='''

            @shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32), x=jax.ShapeDtypeStruct((48, 5), jnp.float32))
            def second(W, x):
                """A second demo, added while the app runs."""
                return 2.0 * (x @ W)
            ''')
            await press(pilot, "r")
            await settle(pilot)
            assert app.demo_file is not first_file
            assert app.analysis.shapes.batch == 32
            assert app.query_one("#sidebar").functions == ["linear", "second"]
            assert "chunk 8" in app.query_one("#status").plain  # 16 per device -> default chunk 8

    run(scenario())


def test_a_chunk_size_that_stops_fitting_when_the_mesh_grows_is_flagged():
    """Before any run, two settings refused in turn on one app: a bad axis name (that was a test
    of its own, on its own app), then a chunk size that stops fitting when the mesh grows."""
    from textual.widgets import Select

    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            # a bad axis name is refused before running
            axis = app.query_one("#axis", Input)
            typed = axis.value
            axis.value = "my axis"
            await drain(pilot)
            assert axis.has_class("-invalid")
            await press(pilot, "r")
            await settle(pilot)
            assert app.query_one(ErrorPanel).shown and "'my axis'" in app.query_one(ErrorPanel).message
            assert app.run_id == 1
            axis.value = typed  # the axis name it opened with
            await drain(pilot)
            assert not axis.has_class("-invalid")

            # a chunk size that stops fitting when the mesh grows
            chunk = app.query_one("#chunk", Input)
            chunk.value = "32"
            await drain(pilot)
            assert not chunk.has_class("-invalid")  # 64 over 2 devices: 32 per device
            app.query_one("#devices", Select).value = 4
            await drain(pilot)
            assert chunk.has_class("-invalid")  # 16 per device now
            assert "16/device: 1 2 4 8 16" in str(app.query_one("#chunk-help").content)
            await press(pilot, "r")
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "Chunk size 32 does not divide the per-device batch 16" in panel.message
            assert app.run_id == 1

    run(scenario())


def test_settings_from_the_command_line_that_do_not_fit_show_the_core_message():
    async def scenario():
        app = make_app(DEMOS / "linear.py", devices=3)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "does not split over 3 devices" in panel.message
            assert "1, 2, 4, 8" in panel.hint
            await press(pilot, "escape", "r")  # the sidebar offers 2 instead: a run now works
            await settle(pilot)
            assert app.analysis is not None and app.analysis.shapes.devices == 2

    run(scenario())


def test_a_file_that_needs_more_devices_than_started_says_how_to_start_them(tmp_path):
    """The app started 8 CPU devices (its --max-devices); a program file laying out 16 at import
    gets one message and the option in the error panel, not numpy's words alone."""
    from test_device_count_in_file import _SIXTEEN

    path = tmp_path / "sixteen.py"
    path.write_text(_SIXTEEN.replace("MESH", 'Mesh(np.array(jax.devices()[:16]).reshape(16), ("d",))'))

    async def scenario():
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and app.is_running
            assert "lays out 16 devices, but shardscope started 8 CPU devices" in panel.message
            assert "--max-devices 16" in panel.hint

    run(scenario())
