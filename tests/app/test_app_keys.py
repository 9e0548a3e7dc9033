"""Every key does what the footer says, whatever has the focus, except inside an input."""

from __future__ import annotations

from app_support import DEMOS, SIZE, drain, make_app, press, run, settle
from textual.widgets import Input, Select

from shardscope.app.widgets.help_screen import HelpScreen
from shardscope.app.views.plans.plans_view import PlansView


def test_q_quits_with_status_zero():
    """Right after the app opens, ? opens the help, which says how to close it and takes the focus,
    and q closes it (test_app_tab_keys.py::test_the_help_says_how_to_close_it, on its own app
    before); ? opens it again and escape closes it (? toggles it too: that was a test of its own,
    on its own app); then q quits with status zero."""
    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            # the help says how to close it, takes the focus, and q closes it
            await press(pilot, "question_mark")
            assert isinstance(app.screen, HelpScreen)
            scroll = app.screen.query_one("VerticalScroll")
            assert scroll.border_subtitle == "Escape, ? or q: close"
            first_lines = app.screen.query_one("HelpText").source.splitlines()[:3]
            assert "**Escape, ? or q closes this help**" in "\n".join(first_lines)
            assert app.screen.focused is scroll, "the help takes the focus, so the arrow keys scroll it"
            await press(pilot, "q")
            assert not isinstance(app.screen, HelpScreen) and app.is_running

            # question mark opens the help and escape closes it
            await press(pilot, "question_mark")
            assert isinstance(app.screen, HelpScreen)
            await press(pilot, "escape")
            assert not isinstance(app.screen, HelpScreen)
            await press(pilot, "question_mark", "question_mark")  # ? toggles it too
            assert not isinstance(app.screen, HelpScreen)

            # q quits with status zero
            await settle(pilot)
            assert app.return_code is None  # running: no exit status yet
            await press(pilot, "q")
            await drain(pilot)
            assert app.return_code == 0
        assert app.return_code == 0

    run(scenario())


def test_keys_work_whatever_has_the_focus():
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.query_one(PlansView).tree("deferred").focus()
            await press(pilot, "2")
            assert app.query_one("#tabs").active == "graph"
            app.query_one("#devices", Select).focus()
            await press(pilot, "n")
            assert app.query_one("#tabs").active == "plans"
            assert app.query_one(PlansView).collective_index == 0
            before = app.analysis
            await press(pilot, "r")
            await settle(pilot)
            assert app.run_id == 2 and app.analysis is not before

    run(scenario())


def test_typing_in_an_input_keeps_the_keys_and_escape_leaves_it():
    """Typing in an input keeps the keys (r and q type there) and escape leaves it; then, with run
    on change switched on, enter commits the field and runs (that was a test of its own, on its
    own app)."""
    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            chunk = app.query_one("#chunk", Input)
            chunk.focus()
            await press(pilot, "8", "r", "q", "backspace", "backspace")
            assert chunk.value == "8"
            assert app.run_id == 1 and app.query_one("#tabs").active == "plans" and app.return_code is None
            await press(pilot, "escape")
            assert app.focused is None
            await press(pilot, "r")
            await settle(pilot)
            assert app.run_id == 2
            assert app.analysis.shapes.chunk_size == 8

            # enter commits and runs when auto run is on
            await pilot.click("#autorun")
            assert app.query_one("#sidebar").autorun
            app.query_one("#chunk", Input).focus()
            await press(pilot, "backspace", "4", "enter")  # the 8 typed above goes first
            await settle(pilot)
            assert app.run_id == 3 and app.analysis.shapes.chunk_size == 4
            assert "chunk 4 (8 chunks/device)" in app.query_one("#status").plain

    run(scenario())


def test_device_choices_divide_the_batch_and_stay_under_max_devices():
    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        app.max_devices = 6
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            select = app.query_one("#devices", Select)
            assert app.query_one("#sidebar").device_choices == [1, 2, 4]  # divisors of N=64 up to 6
            select.value = 4
            await drain(pilot)
            await press(pilot, "r")
            await settle(pilot)
            assert app.analysis.shapes.devices == 4 and "mesh s=4" in app.query_one("#status").plain

    run(scenario())


def test_before_results_the_digits_and_tab_move_the_palette_runs_and_export_and_steps_wait_for_results():
    """One user's path on an app opened without running: the number keys switch tabs, tab moves
    the focus, export and the collective steps are greyed out; the palette offers every action
    and runs; then export and the steps are offered. (It was four tests, each opening the app:
    the number keys, tab, the palette and the greyed-out actions.)"""
    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            # export and the collective steps are greyed out before results
            for action in ("export", "next_collective", "previous_collective"):
                assert app.check_action(action, ()) is None
            assert app.check_action("run", ()) is True

            # the number keys switch tabs
            tabs = app.query_one("#tabs")
            for key, tab in zip("54321", ("hlo", "timings", "diff", "graph", "plans")):
                await press(pilot, key)
                assert tabs.active == tab

            # tab moves the focus
            seen = []
            for _ in range(6):
                await press(pilot, "tab")
                seen.append(app.focused)
            assert len({id(w) for w in seen}) >= 5
            assert any(isinstance(w, Input) for w in seen)

            # the command palette offers every action, and they run
            commands = {c.title: c for c in app.get_system_commands(app.screen)}
            for title in ("Run", "Export diff", "Next coll.", "Prev coll.", "Plans", "Graph", "Diff", "Timings", "Compiled", "Help", "Focus", "Quit"):
                assert title in commands, title
            commands["Timings"].callback()
            await drain(pilot)
            assert app.query_one("#tabs").active == "timings"
            commands["Run"].callback()
            await settle(pilot)
            assert app.run_id == 2 and app.analysis is not None

            # with results, export and the collective steps are offered
            for action in ("export", "next_collective", "previous_collective"):
                assert app.check_action(action, ()) is True

    run(scenario())


def test_picking_another_function_runs_it_when_auto_run_is_on(tmp_path):
    from app_support import write_demo
    from textual.widgets import OptionList

    async def scenario():
        path = write_demo(tmp_path / "two.py", extra='''

        @shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32), x=jax.ShapeDtypeStruct((24, 5), jnp.float32))
        def small(W, x):
            """A smaller batch: 24 examples."""
            return jnp.tanh(x @ W)
        ''')
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis.function == "linear"
            await pilot.click("#autorun")
            options = app.query_one("#functions", OptionList)
            options.focus()
            await press(pilot, "down", "enter")
            await settle(pilot)
            assert app.analysis.function == "small" and app.analysis.shapes.batch == 24
            assert "two.py::small" in app.query_one("#status").plain
            assert "12/device: 1 2 3 4 6 12" in str(app.query_one("#chunk-help").render())
            assert app.query_one("#sidebar").device_choices == [1, 2, 3, 4, 6, 8]  # divisors of N=24 up to 8

    run(scenario())
