"""The footer and the status line redraw without laying the screen out again when nothing they
show changed size: Textual's footer recomposes (some twenty widgets mounted, the screen laid out)
on every change of focus, and a ``Static``'s update lays the screen out. Each test also checks
that what is shown still follows what changed."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Static

from app_support import drain, run
from shardscope.app.base.textual_adapter import FooterKey
from shardscope.app.widgets.footer import KeysFooter
from shardscope.app.widgets.status import StatusLine
from shardscope.config.settings import Settings


class _Plain(Input):
    """An input that adds no key to the footer (its bindings are not shown)."""


class _Marked(Input):
    BINDINGS = [Binding("ctrl+k", "mark", "Mark")]

    def action_mark(self) -> None:
        pass


class _ThreeInputs(App):
    BINDINGS = [Binding("f5", "toggle_ring", "Ring"), Binding("f1", "bell", "Help")]
    ring_enabled = True

    def compose(self) -> ComposeResult:
        yield _Plain(id="one")
        yield _Plain(id="two")
        yield _Marked(id="marked")
        yield KeysFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_ring" and not self.ring_enabled:
            return None  # shown, dimmed
        return True

    def action_toggle_ring(self) -> None:
        pass


def _keys(app: App) -> dict[str, bool]:
    """The footer's keys on screen: description -> disabled."""
    return {key.description: key.has_class("-disabled") for key in app.query(FooterKey)
            if not key.has_class("-command-palette")}


def test_a_change_of_focus_that_changes_no_key_shown_keeps_the_footers_keys():
    async def scenario():
        app = _ThreeInputs()
        async with app.run_test(size=(80, 10)) as pilot:
            await drain(pilot)
            await pilot.pause()
            assert app.focused.id == "one"
            before = list(app.query(FooterKey))
            assert set(_keys(app)) == {"Ring", "Help"}

            app.query_one("#two").focus()  # the same keys: nothing recomposed
            await drain(pilot)
            await pilot.pause()
            assert list(app.query(FooterKey)) == before

            app.query_one("#marked").focus()  # a key of its own: shown
            await drain(pilot)
            await pilot.pause()
            assert set(_keys(app)) == {"Ring", "Help", "Mark"}

            app.query_one("#one").focus()  # and gone again
            await drain(pilot)
            await pilot.pause()
            assert set(_keys(app)) == {"Ring", "Help"}

            app.ring_enabled = False  # a key disabled (check_action) is redrawn dim
            app.refresh_bindings()
            await drain(pilot)
            await pilot.pause()
            assert _keys(app) == {"Ring": True, "Help": False}

    run(scenario())


class _StatusAbove(App):
    def compose(self) -> ComposeResult:
        yield StatusLine(Settings(path=__import__("pathlib").Path("linear.py")))
        yield Static("below", id="below")


def test_the_status_line_takes_the_lines_its_text_needs_as_it_changes():
    """A message that breaks over three lines at this width lays the screen out again: the widget
    below moves down, then back up for one that fits on one line."""
    async def scenario():
        app = _StatusAbove()
        async with app.run_test(size=(100, 10)) as pilot:
            await drain(pilot)
            await pilot.pause()
            status = app.query_one(StatusLine)
            below = app.query_one("#below")
            assert status.size.height == 1 and below.region.y == 1

            status.show_done(Text("done " + "word " * 40))
            await drain(pilot)
            await pilot.pause()
            assert status.size.height == 3 and below.region.y == 3

            status.show_done(Text("done: short"))
            await drain(pilot)
            await pilot.pause()
            assert status.size.height == 1 and below.region.y == 1
            assert status.plain.endswith("done: short")

    run(scenario())
