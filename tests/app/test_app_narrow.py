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


def test_at_80x24_the_compiled_tabs_verdicts_and_the_sidebars_labels_are_whole():
    """The compiled collectives table keeps its verdict column whole at 80 columns (it read
    ``deferrab``): who wrote each one and the jaxpr's primitives make way (both are in its
    details). The sidebar's labels wrap in its 24 columns instead of losing their end."""
    from textual.widgets import Label

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=NARROW) as pilot:
            await settle(pilot)
            await press(pilot, "5")
            await settle(pilot)
            rows = screen_text(app)
            # linear.py's naive plan: W's gradient summed in each of the 2 chunks, 20 B a run
            row = next(row for row in rows if "all-reduce[s]" in row and "grad(params)" in row)
            assert row.split()[-1] == "deferrable", row
            await press(pilot, "f2")
            sidebar = app.query_one("#sidebar")
            room = sidebar.scrollable_content_region.width
            for label in app.query(".sidebar-title").results(Label):
                if not label.display:
                    continue
                assert label.size.width <= room, (str(label.content), label.size.width, room)  # not clipped
                shown = plain(["".join(s.text for s in label.render_line(y)) for y in range(label.size.height)])
                assert shown == str(label.content), (shown, str(label.content))

    run(scenario())


def test_the_plan_headers_mark_the_plans_compared_and_follow_b_and_c():
    """After ``b`` only the status line said which plans the Diff, Graph and Timings tabs compare:
    the Plans tab's headers mark them ``B`` and ``C``, as the sidebar marks a program file's."""

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=NARROW) as pilot:
            await settle(pilot)
            view = app.query_one(PlansView)

            def marks() -> dict[str, str]:
                first = {name: "".join(s.text for s in view.query_one(f"#{name}-header").render_line(0)).split()[0]
                         for name in view.names}
                return {name: word for name, word in first.items() if word in ("B", "C")}

            assert marks() == {"naive": "B", "deferred": "C"}  # the default comparison
            await press(pilot, "b")
            await settle(pilot)
            assert (app.comparison.baseline, app.comparison.candidate) == ("reduced", "deferred")
            assert marks() == {"reduced": "B", "deferred": "C"}
            await press(pilot, "c")
            await settle(pilot)
            assert marks() == {"reduced": "B", "naive": "C"}

    run(scenario())


def test_at_80x24_the_footer_keys_it_shows_are_whole_in_every_tab(tmp_path):
    """The Diff tab's own key pushed the Compare group under the pinned keys (``b`` alone showed):
    under 100 columns the footer leaves out the keys it has no room for (export; n/N beside a
    tab's own key), each still bound, and shows the others whole."""

    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path)
        async with app.run_test(size=NARROW) as pilot:
            await settle(pilot)
            for key, shown in (("1", ("r Run", "b c Compare", "n N Collective")), ("3", ("s Side by side", "r Run", "b c Compare")),
                               ("6", ("s Run sweep", "r Run", "b c Compare"))):
                await press(pilot, key)
                await settle(pilot)
                footer = screen_text(app)[-1]
                for words in (*shown, "f2 Sidebar", "? Help", "q Quit", "^p palette"):
                    assert words in footer, (key, footer)
            await press(pilot, "e")  # left out of the footer, still bound
            assert app.last_export is not None and app.last_export.parent == tmp_path

    run(scenario())
