"""The screen adapts to the terminal: nothing that matters is cut, what is cut says so with "…".

(f2 and the Timings tab at 80 columns: test_app_narrow.py, in the linear.py app at 80x24 there.)"""

from __future__ import annotations

import re

from app_support import DEMOS, make_app, press, run, settle

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
