"""The Sweep tab says when the sweep it shows was made for other settings than the results, and
shows nothing but a sentence on a program file (nothing to sweep)."""

from __future__ import annotations

from app_support import DEMOS, SIZE, eventually, make_app, press, run, settle, screen_text
from textual.widgets import Input, Select, Static
from view_support import shown

from shardscope.app.views.sweep import SweepView


def test_a_sweep_for_another_mesh_is_marked_stale():
    async def scenario():
        app = make_app(DEMOS / "linear.py", repeats=1)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "6")
            view = app.query_one(SweepView)
            assert not view.has_class("-stale")
            await press(pilot, "s")
            await eventually(pilot, lambda: view.sweep is not None and not view.running, "the sweep finished", 300)
            assert view.sweep.devices == 2 and not view.has_class("-stale")
            app.query_one("#devices", Select).value = 4
            app.query_one("#chunk", Input).value = "2"
            await eventually(pilot, lambda: app.stale, "the new settings marked the results stale")
            await press(pilot, "r")
            await settle(pilot)
            assert app.analysis.settings.mesh.text() == "s=4"
            assert view.has_class("-stale") and view.sweep.devices == 2  # kept, and said to be another mesh's
            banner = " ".join(shown(view.query_one("#sweep-stale", Static)).split())
            assert banner == ("Stale: this sweep is for linear.py::linear mesh s=2; the results are now for "
                              "linear.py::linear mesh s=4. Press s to sweep them.")
            assert any("Stale: this sweep is for" in row for row in screen_text(app))
            app.query_one("#devices", Select).value = 2
            app.query_one("#chunk", Input).value = "4"  # another chunk size: the sweep tried every one
            await eventually(pilot, lambda: app.stale, "the new settings marked the results stale")
            await press(pilot, "r")
            await settle(pilot)
            assert not view.has_class("-stale")

    run(scenario())


def test_a_program_file_shows_no_sweep_controls_or_charts():
    async def scenario():
        app = make_app(DEMOS / "train_step.py", repeats=1)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "6")
            view = app.query_one(SweepView)
            assert view.has_class("-no-chunks")
            for hidden in ("#sweep-controls", "#sweep-charts", "#sweep-table"):
                assert not view.query_one(hidden).display, hidden
            text = "\n".join(screen_text(app))
            assert "a program file's programs are not chunked by shardscope" in " ".join(text.split())
            assert "Memory budget per device" not in text and "Run sweep" not in text
            await press(pilot, "s")
            assert view.sweep is None and not view.running

    run(scenario())
