"""A tab's own key works as soon as the tab shows, every action is in the palette, and the focus
never leaves the keys typing into an input or a hidden sidebar."""

from __future__ import annotations

import inspect

from app_support import DEMOS, SIZE, drain, eventually, make_app, press, run, settle, write_demo
from textual.system_commands import SystemCommandsProvider
from textual.widgets import Input
from textual.widgets._tabbed_content import ContentTabs

from shardscope.app import ShardscopeApp
from shardscope.app.base.bindings import TAB_BINDINGS
from shardscope.app.widgets.sidebar import Sidebar
from shardscope.app.views.diff import DiffView
from shardscope.app.views.sweep import SweepView


def small_demo(tmp_path):
    """A linear demo with 8 examples: 4 per device, chunk sizes 1, 2, 4, so a sweep is short."""
    return write_demo(tmp_path / "small.py", batch=8)


def test_the_sweep_key_works_right_after_6_wherever_the_focus_is(tmp_path):
    """The Sweep tab's key works right after 6 and from the tab bar; then the palette offers every
    binding and every action has one, and a tab's own action runs from another tab (that was a
    test of its own, on its own app)."""
    app_actions = {name[len("action_"):] for name, _ in inspect.getmembers(ShardscopeApp, inspect.isfunction)
                   if name.startswith("action_") and name in vars(ShardscopeApp)}
    bound = {binding.action.split("(")[0] for binding in ShardscopeApp.BINDINGS}
    assert app_actions <= bound, f"actions of the app with no key (so not in the palette): {app_actions - bound}"
    for view, tab in ((DiffView, "diff"), (SweepView, "sweep")):
        view_actions = {name[len("action_"):] for name in vars(view) if name.startswith("action_")}
        assert view_actions <= {b.action for b in TAB_BINDINGS[tab]}, (view, view_actions)

    async def scenario():
        app = make_app(small_demo(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.focused is not None and app.focused.id == "naive-tree"  # where the first run leaves it
            await press(pilot, "6")
            await eventually(pilot, lambda: bool(app.query(SweepView)), "the Sweep view is mounted")
            assert app.query_one("#tabs").active == "sweep"
            await press(pilot, "s")
            await settle(pilot)
            sweep = app.query_one(SweepView).sweep
            assert sweep is not None and sweep.chunk_sizes == [1, 2, 4]
            # from the tab bar too, and the footer offers the key while the tab shows
            app.query_one(ContentTabs).focus()
            await drain(pilot)
            assert "sweep" in {b.binding.id for b in app.screen.active_bindings.values()}

            # the palette offers every binding and every action has one
            provider = SystemCommandsProvider(app.screen)
            hits = {hit.text: hit async for hit in provider.discover()}
            for binding in ShardscopeApp.BINDINGS:
                title = "Quit" if binding.action == "quit" else binding.description  # Textual offers its own Quit
                assert title in hits, f"the palette does not offer {binding.key} ({title})"
                if binding.action != "quit":
                    assert hits[title].help == binding.tooltip, title
            # a tab's own action runs from another tab: the palette opens the tab and acts there
            await press(pilot, "1")  # back to the Plans tab
            assert app.query_one("#tabs").active == "plans"
            before = app.query_one(SweepView).sweep
            hits["Run sweep"].command()
            await eventually(pilot, lambda: app.query_one("#tabs").active == "sweep", "the Sweep tab opens")
            await settle(pilot)
            assert app.query_one(SweepView).sweep is not None and app.query_one(SweepView).sweep is not before
            hits["Side by side"].command()
            await settle(pilot)
            assert app.query_one("#tabs").active == "diff" and app.query_one(DiffView).side_by_side

    run(scenario())


def test_the_diff_key_works_when_the_tab_was_opened_before_its_view_existed():
    """At 80x24: the Diff tab opened during the first run gets its key once its view exists; then
    closing the help leaves the focus out of the folded sidebar (that was a test of its own, on
    its own app)."""
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=(80, 24)) as pilot:
            await press(pilot, "3")  # during the first run: the tab holds a placeholder
            await settle(pilot)
            assert not isinstance(app.focused, Sidebar), "the folded-away sidebar must not hold the focus"
            await press(pilot, "s")
            assert app.query_one(DiffView).side_by_side
            await press(pilot, "1", "s")  # on another tab the key is not the Diff tab's
            assert app.query_one(DiffView).side_by_side

            # closing the help leaves the focus out of the folded sidebar
            app.set_focus(None)  # as on a tab with nothing to focus
            await press(pilot, "question_mark", "escape")
            focused = app.focused
            assert focused is None or app.query_one(Sidebar) not in focused.ancestors_with_self, focused
            await press(pilot, "f2", "f2", "2")
            assert app.query_one("#tabs").active == "graph"

    run(scenario())


def test_f2_and_the_digits_never_leave_the_focus_in_an_input_or_the_hidden_sidebar():
    """One app on linear.py, steps of one user's path (three tests, each on its own app, before):

    - hiding the sidebar gives the focus to the tab shown;
    - the digits switch tabs from the Sweep tab's button (Textual gave the focus to the budget input);
    - after f2 twice the digits switch tabs even from an input.
    """
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            # hiding the sidebar gives the focus to the tab shown
            app.query_one("#functions").focus()
            await press(pilot, "f2")
            assert not app.sidebar_shown
            assert app.focused is not None and app.focused.id == "naive-tree"
            await press(pilot, "6", "f2", "f2")  # the Sweep tab: its scrolling charts, not its budget input
            assert app.focused is not None and app.query_one("#sweep") in app.focused.ancestors
            assert not isinstance(app.focused, Input)

            # the digits switch tabs from the Sweep tab's button
            await press(pilot, "6")
            await eventually(pilot, lambda: bool(app.query(SweepView)), "the Sweep view is mounted")
            app.query_one("#sweep-run").focus()
            await press(pilot, "2")
            assert app.query_one("#tabs").active == "graph", "Textual gave the focus to the budget input, in the Sweep tab"
            assert app.query_one("#sweep-budget", Input).value == ""

            # after f2 twice the digits switch tabs even from an input (the sidebar shown, as opened)
            await press(pilot, "f2")
            assert app.sidebar_shown
            await press(pilot, "6")
            await eventually(pilot, lambda: bool(app.query(SweepView)), "the Sweep view is mounted")
            budget = app.query_one("#sweep-budget", Input)
            budget.focus()
            await press(pilot, "2", "0")
            assert budget.value == "20"  # typing in the input, as it should
            await press(pilot, "f2", "f2")
            assert app.sidebar_shown
            assert not isinstance(app.focused, Input), f"f2 left the focus in {app.focused}"
            await press(pilot, "2")
            assert app.query_one("#tabs").active == "graph" and budget.value == "20"
            assert app.focused is not None and app.query_one("#graph") in app.focused.ancestors

    run(scenario())
