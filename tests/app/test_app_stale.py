"""The screen always says which settings its results belong to, and when the sidebar asks for others."""

from __future__ import annotations

from app_support import DEMOS, SIZE, eventually, make_app, press, run, settle, write_demo
from textual.widgets import Input, OptionList, Select

from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.status import StatusLine

BROKEN = '''

@shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32), x=jax.ShapeDtypeStruct((64, 5), jnp.float32))
def broken(W, x):
    """Fails to trace: the shapes do not match."""
    return x @ jnp.ones((3,))
'''


def test_picking_another_mesh_marks_the_results_stale_until_they_are_run():
    """After picking 4 devices (run on change off) the Mesh(s=2) results say they are stale."""

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            status = app.query_one(StatusLine)
            assert not app.stale and status.state == ""
            app.query_one("#devices", Select).value = 4
            await eventually(pilot, lambda: app.stale, "picking 4 devices marked the results stale")
            assert status.state == "stale"
            banner = str(app.query_one("#stale").content)
            assert "results below are for linear.py::linear  mesh s=2  chunk 16" in banner
            assert "the sidebar asks for mesh s=4, chunk 8" in banner  # auto chunk at 4 devices: 8
            assert status.plain.startswith("linear.py::linear  mesh s=2  chunk 16 (2 chunks/device)")
            assert "stale: the sidebar asks for mesh s=4, chunk 8 (r: run)" in status.plain
            app.query_one("#devices", Select).value = 2  # back to what is on screen: not stale
            await eventually(pilot, lambda: not app.stale, "picking 2 devices again cleared the mark")
            assert status.state == "" and "done: compiled runs/call: naive 2, deferred 1" in status.plain
            app.query_one("#devices", Select).value = 4
            await press(pilot, "r")
            await settle(pilot)
            assert not app.stale and app.analysis.shapes.devices == 4
            assert status.plain.startswith("linear.py::linear  mesh s=4  chunk 8 (2 chunks/device)")

    run(scenario())


def test_a_failed_run_names_the_settings_that_failed_not_the_ones_on_screen(tmp_path):
    """The status line shows the results' settings first, then the failed settings with "failed"."""

    async def scenario():
        path = write_demo(tmp_path / "model.py", extra=BROKEN)
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis.function == "linear"
            options = app.query_one("#functions", OptionList)
            options.focus()
            await press(pilot, "down", "enter")  # pick "broken"; run on change is off
            await eventually(pilot, lambda: app.stale, "picking another function marked the results stale")
            assert "function broken" in str(app.query_one("#stale").content)
            await press(pilot, "r")
            await settle(pilot)
            status = app.query_one(StatusLine)
            assert app.query_one(ErrorPanel).shown and status.state == "failed"
            shown, state = status.plain.split("  |  ")
            assert shown == "model.py::linear  mesh s=2  chunk 16 (2 chunks/device)"  # still on screen
            assert state == "model.py::broken  mesh s=2  chunk auto failed: see the error panel"
            assert app.analysis.function == "linear" and app.stale  # old results, still marked

    run(scenario())


def test_settings_refused_before_a_run_do_not_blame_the_results_on_screen():
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.query_one("#chunk", Input).value = "7"
            await eventually(pilot, lambda: app.stale, "typing chunk 7 marked the results stale")
            await press(pilot, "r")
            await settle(pilot)
            shown, state = app.query_one(StatusLine).plain.split("  |  ")
            assert shown.startswith("linear.py::linear  mesh s=2  chunk 16")
            assert state == "the sidebar's settings were refused: see the error panel"
            assert app.stale and "chunk 7" in str(app.query_one("#stale").content)

    run(scenario())
