"""The screen adapts to the terminal: nothing that matters is cut, what is cut says so with "…"."""

from __future__ import annotations

import re

from app_support import DEMOS, drain, make_app, press, run, settle

from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.app.widgets.status import StatusLine

BADGE = re.compile(r"^ (x[\d,?]+/call) ")


def screen_rows(widget) -> list[str]:
    """What ``widget`` shows, row by row, as plain text."""
    return ["".join(segment.text for segment in widget.render_line(y)) for y in range(widget.size.height)]


def test_at_80x24_the_sidebar_folds_and_every_badge_on_screen_is_whole():
    async def scenario():
        app = make_app(DEMOS / "rnn.py")
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            assert not app.sidebar_shown
            plans = app.query_one(PlansView)
            status = app.query_one(StatusLine)
            assert status.size.height in (2, 3), "the status line breaks rather than losing its end"
            # compiled: naive = Wh's all-reduce in 2 chunks x 8 steps (16) + Wx's and b's, combined
            # into one instruction, once per chunk (2); deferred = the three combined at the end (1)
            assert "done: compiled runs/call: naive 18, deferred 1" in "".join(screen_rows(status))
            badges = 0
            for name in plans.names:
                tree = plans.tree(name)
                assert tree.size.width >= 80 // len(plans.names) - 3
                for y, row in enumerate(screen_rows(tree)):
                    node = tree.get_node_at_line(tree.scroll_offset.y + y)
                    if node is None:
                        continue
                    label = node.label.plain
                    badge = BADGE.match(label)
                    if badge:
                        badges += 1
                        assert badge.group(1) in row, (row, label)
                    if label.rstrip() not in row:  # cut: it must say so
                        assert row.rstrip().endswith("…"), row
            assert badges >= len(plans.names), "every tree shows at least one badge, whole"
            await press(pilot, "n")  # details on demand: the cut label, whole, under the tree
            for name in ("naive", "deferred"):  # the two plans of rnn.py whose first collective is cut
                tree = plans.tree(name)
                assert tree.cursor_node.label.plain in str(plans.details(name).content)
                assert tree.cursor_node.label.cell_len > tree.size.width, "a label that the tree had to cut"

    run(scenario())


def test_f2_shows_and_hides_the_sidebar_and_the_choice_sticks():
    """At 80 columns the Timings tab's labels never wrap (that was a test of its own, on its own
    app); then f2 shows and hides the sidebar, and the user's choice sticks as the terminal grows."""
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            # the Timings tab's labels never wrap at 80 columns
            await press(pilot, "4")
            await drain(pilot)
            text = "\n".join(screen_rows(app.query_one("#timings-body")))
            assert re.search(r"│ ?compiled runs per call\s+│\s+2\s+│\s+1\s+│", text)  # the 2 chunks' all-reduces
            assert re.search(r"│ ?jaxpr runs per call\s+│\s+2\s+│\s+1\s+│", text)
            assert re.search(r"│ ?bytes moved \(per device\)\s+│\s+40 B\s+│\s+20 B\s+│", text)
            assert re.search(r"│ ?collective equations in loops\s*│\s+1 of 1\s+│\s+0 of 1\s+│\s+0 of 1\s+│", text), text

            # f2 shows and hides the sidebar, and the choice sticks
            assert not app.sidebar_shown
            await press(pilot, "f2")
            assert app.sidebar_shown and app.query_one("#sidebar").outer_size.width == 24
            await pilot.resize_terminal(140, 40)
            await drain(pilot)
            assert app.sidebar_shown and app.query_one("#sidebar").outer_size.width == 30
            await press(pilot, "f2")
            assert not app.sidebar_shown
            await pilot.resize_terminal(160, 40)
            await drain(pilot)
            assert not app.sidebar_shown, "the user hid it: a wider terminal does not bring it back"

    run(scenario())


def test_at_40x12_the_error_panel_gets_the_width():
    async def scenario(tmp):
        app = make_app(tmp / "nowhere.py")
        async with app.run_test(size=(40, 12)) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and panel.size.width >= 34
            assert "No such file" in panel.message

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        run(scenario(Path(tmp)))
