"""The keyboard reaches every field, and the screen says which keys work where the focus is.

At 80x24 the sidebar folds away, and Tab went round the tab's widgets only: the Target field
could not be reached by keyboard, and letters typed meanwhile ran the app's keys (``e`` exported
a diff). Inside a field, "press r" could not work: ``r`` types there. Real Textual, real JAX.
"""

from __future__ import annotations

from app_support import DEMOS, eventually, make_app, press, run, screen_text, settle
from textual.widgets import Input

from shardscope.app.widgets.sidebar import Sidebar

NARROW = (80, 24)


def test_at_80x24_tab_reaches_the_target_field_of_the_folded_sidebar(tmp_path):
    """Tab reaches the target field and leaves it; then shift+tab from the tab bar goes to it and
    escape leaves it (that was a test of its own, on its own app)."""
    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path)
        async with app.run_test(size=NARROW) as pilot:
            await settle(pilot)
            assert not app.sidebar_shown
            target = app.query_one("#target", Input)
            for _ in range(30):  # the tab's widgets, then the sidebar's fields, in order
                await press(pilot, "tab")
                if app.focused is target:
                    break
            assert app.focused is target, app.focused
            assert app.sidebar_shown  # open while the focus is in it
            await pilot.press(*"tpu:v5e:2x2")  # letters type there: e does not export, c does not compare
            await settle(pilot)
            assert target.value == "tpu:v5e:2x2"
            assert app.last_export is None and not list(tmp_path.iterdir())
            await press(pilot, "tab")  # out of the sidebar: it folds again
            assert app.focused is not None and app.query_one(Sidebar) not in app.focused.ancestors
            assert not app.sidebar_shown

            # shift+tab from the tab bar goes to the target field, and escape leaves it
            first = app.screen.focus_chain[0]  # the tab bar
            app.set_focus(first)
            await press(pilot, "shift+tab")
            await eventually(pilot, lambda: app.focused is app.query_one("#target"), "shift+tab went to the target")
            assert app.sidebar_shown
            await press(pilot, "escape")
            assert app.focused is None and not app.sidebar_shown

    run(scenario())


def test_in_a_field_the_footer_and_the_stale_banner_name_the_keys_that_work_there():
    """A chunk size typed (not committed) marks the results stale, and the footer and the banner
    name the keys that work in the field, then out of it; typed back to what is on screen, the
    mark goes (that was test_app_stale.py's test of its own, on its own app)."""
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=(140, 45)) as pilot:
            await settle(pilot)
            chunk = app.query_one("#chunk", Input)
            chunk.focus()
            await press(pilot, "8")
            await eventually(pilot, lambda: app.stale, "typing 8 marked the results stale")
            footer = screen_text(app)[-1]
            for shown in ("Run", "tab Next field", "esc Leave field", "^c Quit", "f2 Sidebar"):
                assert shown in footer, footer
            assert "r Run" not in footer and "q Quit" not in footer  # they type here
            assert "Press Enter to run it." in str(app.query_one("#stale").content)
            assert "(Enter: run)" in app.query_one("#status").plain
            await press(pilot, "escape")  # out of the field: r runs again, and the screen says so
            await eventually(pilot, lambda: "Press r to run it." in str(app.query_one("#stale").content),
                             "the banner says r once the field is left")
            footer = screen_text(app)[-1]
            assert "r Run" in footer and "q Quit" in footer and "^c" not in footer

            # an uncommitted edit counts: typed back to what auto resolved to, not stale
            assert "the sidebar asks for chunk 8" in str(app.query_one("#stale").content)
            chunk.focus()
            await eventually(pilot, lambda: app.focused is chunk, "the chunk field has the focus again")
            await press(pilot, "backspace", "1", "6")  # 16 is what auto resolved to: not stale
            await eventually(pilot, lambda: chunk.value == "16" and not app.stale, "typing 16 cleared the mark")
            await settle(pilot)  # the edits in between ("", "1") have all been handled: still not stale
            assert not app.stale

    run(scenario())


def test_enter_in_a_field_runs_even_with_run_on_change_off():
    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=(140, 45)) as pilot:
            await settle(pilot)
            assert not app.query_one("#sidebar").autorun
            app.query_one("#chunk", Input).focus()
            await press(pilot, "4", "enter")
            await settle(pilot)
            # 64 examples over 2 devices: 32 each, in chunks of 4
            assert app.run_id == 2 and app.analysis.shapes.chunk_size == 4

    run(scenario())
