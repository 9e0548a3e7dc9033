"""At 80x24 what matters stays on screen: the value a collective carries, the whole line under
the cursor, the comparison's sentence, and the footer's keys for the sidebar, help and quitting."""

from __future__ import annotations

import pytest
from app_support import DEMOS, make_app, press, run, screen_text, settle

from shardscope.app.views.plans.plans_view import PlansView

NARROW = (80, 24)


def plain(rows: list[str]) -> str:
    """Rows joined, runs of spaces made one: what a reader sees, whatever wraps where."""
    return " ".join(" ".join(rows).split())


@pytest.mark.parametrize("demo", ["linear.py", "rnn.py", "mlp.py", "train_step.py"])
def test_at_80x24_the_footer_keeps_sidebar_help_and_quit(demo):
    async def scenario():
        app = make_app(DEMOS / demo)
        async with app.run_test(size=NARROW) as pilot:
            await settle(pilot)
            for key in ("1", "3", "6"):  # the Diff and Sweep tabs add their own key (s) on the left
                await press(pilot, key)
                await settle(pilot)
                footer = screen_text(app)[-1]
                for shown in ("f2 Sidebar", "? Help", "q Quit", "^p palette"):
                    assert shown in footer, (key, footer)

    run(scenario())


@pytest.mark.parametrize("demo", ["rnn.py", "mlp.py", "train_step.py"])
def test_at_80x24_n_shows_the_value_in_every_header_and_under_every_tree(demo):
    async def scenario():
        app = make_app(DEMOS / demo)
        async with app.run_test(size=NARROW) as pilot:
            await settle(pilot)
            await press(pilot, "n")
            view = app.query_one(PlansView)
            step = view.pairs[0]
            for name in view.names:
                if name not in step:
                    continue
                collective = app.analysis.plans[name].collectives[step[name]]
                header = view.query_one(f"#{name}-header")
                third = "".join(segment.text for segment in header.render_line(2))
                assert collective.value in third, third
                details = view.details(name)
                shown = plain(["".join(s.text for s in details.render_line(y)) for y in range(details.size.height)])
                assert shown.startswith(collective.value), shown
            rows = screen_text(app)
            assert all(c.value in plain(rows) for c in (app.analysis.plans[n].collectives[step[n]] for n in view.names if n in step))

    run(scenario())


def test_the_line_under_the_cursor_is_whole_at_160_columns():
    """The details under a tree wrap; they were the tree's own one-line label, cut with "…"."""

    async def scenario():
        app = make_app(DEMOS / "rnn.py")
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(pilot)
            await press(pilot, "n")
            view = app.query_one(PlansView)
            for name in view.names:
                tree, details = view.tree(name), view.details(name)
                label = tree.cursor_node.label.plain
                shown = plain(["".join(s.text for s in details.render_line(y)) for y in range(details.size.height)])
                assert "…" not in shown, shown
                assert plain([label]) in shown, (label, shown)

    run(scenario())


def test_at_80x24_the_status_line_keeps_the_whole_comparison():
    async def scenario():
        app = make_app(DEMOS / "rnn.py", repeats=5)
        async with app.run_test(size=NARROW) as pilot:
            await settle(pilot)
            sentence = app.comparison.speedup_text()
            assert sentence in plain(screen_text(app)[:3]), screen_text(app)[:3]

    run(scenario())
