"""At 80x24 what matters stays on screen: the value a collective carries, the whole line under
the cursor, the comparison's sentence, and the footer's keys for the sidebar, help and quitting."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from app_support import DEMOS, drain, make_app, press, run, screen_text, settle

from shardscope.app.views.plans.plans_view import PlansView
from shardscope.app.base.textual_adapter import FooterKey

NARROW = (80, 24)


def widget_rows(widget) -> list[str]:
    """What ``widget`` shows, row by row, as plain text."""
    return ["".join(segment.text for segment in widget.render_line(y)) for y in range(widget.size.height)]


def plain(rows: list[str]) -> str:
    """Rows joined, runs of spaces made one: what a reader sees, whatever wraps where."""
    return " ".join(" ".join(rows).split())


@dataclass(frozen=True)
class Header:
    """One shown plan's header line and details under its tree after ``n``, and the value its
    collective carries (read from the analysis)."""

    value: str
    third: str  # the header's third line
    details: str  # the details under the tree, as one line


@dataclass(frozen=True)
class Narrow:
    """What one app on a demo at 80x24 showed: after its first run and one ``n``, then the footer
    on the Plans, Diff and Sweep tabs. The tests of this module that read it share one app run
    per demo (``narrow``): the first ``n`` then the tabs is one user's path."""

    shown: tuple[str, ...]  # the plans shown after n
    headers: dict[str, Header]  # the shown plans that have a collective in the first step
    rows: str  # the screen after n, as one line
    footers: dict[str, str]  # tab key: the footer's row once that tab shows


async def _narrow_app(demo: str) -> Narrow:
    app = make_app(DEMOS / demo)
    async with app.run_test(size=NARROW) as pilot:
        await settle(pilot)
        await press(pilot, "n")
        view = app.query_one(PlansView)
        step = view.pairs[0]
        headers = {}
        for name in view.shown:
            if name not in step:
                continue
            collective = app.analysis.plans[name].collectives[step[name]]
            header = view.query_one(f"#{name}-header")
            details = view.details(name)
            headers[name] = Header(
                collective.value, "".join(segment.text for segment in header.render_line(2)),
                plain(["".join(s.text for s in details.render_line(y)) for y in range(details.size.height)]))
        shown, rows = tuple(view.shown), plain(screen_text(app))
        footers = {}
        for key in ("1", "3", "6"):  # the Diff and Sweep tabs add their own key (s) on the left
            await press(pilot, key)
            await settle(pilot)
            footers[key] = screen_text(app)[-1]
    return Narrow(shown, headers, rows, footers)


@pytest.fixture(scope="module")
def narrow():
    """``narrow(demo)``: what the app on ``demo`` at 80x24 showed (one app run per demo)."""
    seen: dict[str, Narrow] = {}

    def get(demo: str) -> Narrow:
        if demo not in seen:
            seen[demo] = run(_narrow_app(demo))
        return seen[demo]

    return get


@pytest.mark.parametrize("demo", ["rnn.py", "mlp.py", "train_step.py"])  # linear.py's: in the plan marks' test
def test_at_80x24_the_footer_keeps_sidebar_help_and_quit(narrow, demo):
    for key, footer in narrow(demo).footers.items():
        for shown in ("f2 Sidebar", "? Help", "q Quit", "^p palette"):
            assert shown in footer, (key, footer)


@pytest.mark.parametrize("demo", ["rnn.py", "mlp.py", "train_step.py"])
def test_at_80x24_n_shows_the_value_in_every_header_and_under_every_tree(narrow, demo):
    seen = narrow(demo)
    assert len(seen.shown) == 2  # three plans (mlp's) leave no room at 80 columns: the two compared
    assert seen.headers, "no shown plan has a collective in the first step"
    for header in seen.headers.values():
        assert header.value in header.third, header.third
        assert header.details.startswith(header.value), header.details
    assert all(header.value in seen.rows for header in seen.headers.values())


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


def test_at_80x24_the_plan_marks_the_footer_keys_the_verdicts_and_the_sidebar_labels_are_whole(tmp_path):
    """One app on linear.py at 80x24, steps of one user's path (three tests, each on its own app,
    before):

    - After ``b`` only the status line said which plans the Diff, Graph and Timings tabs compare:
      the Plans tab's headers mark them ``B`` and ``C``, as the sidebar marks a program file's.
    - The Diff tab's own key pushed the Compare group under the pinned keys (``b`` alone showed),
      and then ``e`` was left out everywhere. Under 100 columns the keys take fewer words (``e
      Export``, ``s Layout``, ``n N Coll.``): ``e`` shows in every tab, the others whole; n/N beside
      a tab's own key and the Graph tab's ``f`` are left out, each still bound.
    - The compiled collectives table keeps its verdict column whole at 80 columns (it read
      ``deferrab``): who wrote each one and the jaxpr's primitives make way (both are in its
      details). The sidebar's labels wrap in its 24 columns instead of losing their end.

    The same app also walks test_app_layout.py's path (test_f2_shows_and_hides_the_sidebar_and_the_choice_sticks,
    on its own linear.py app at 80x24 before): at 80 columns the Timings tab's labels never wrap,
    and f2 shows and hides the sidebar and the user's choice sticks as the terminal grows. The
    footer keys of linear.py at 80x24 (test_at_80x24_the_footer_keeps_sidebar_help_and_quit[linear.py],
    before) are the footer checks here, in every tab.
    """
    from textual.widgets import Label

    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path)
        async with app.run_test(size=NARROW) as pilot:
            await settle(pilot)
            assert not app.sidebar_shown
            # the Timings tab's labels never wrap at 80 columns (the default comparison: naive, deferred)
            await press(pilot, "4")
            await drain(pilot)
            text = "\n".join(widget_rows(app.query_one("#timings-body")))
            assert re.search(r"│ ?compiled runs per call\s+│\s+2\s+│\s+1\s+│", text)  # the 2 chunks' all-reduces
            assert re.search(r"│ ?jaxpr runs per call\s+│\s+2\s+│\s+1\s+│", text)
            assert re.search(r"│ ?bytes moved \(per device\)\s+│\s+40 B\s+│\s+20 B\s+│", text)
            assert re.search(r"│ ?collective equations in loops\s*│\s+1 of 1\s+│\s+0 of 1\s+│\s+0 of 1\s+│", text), text
            await press(pilot, "1")
            await settle(pilot)

            # the plan headers mark the plans compared and follow b and c
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

            # the footer keys it shows are whole in every tab
            for key, shown in (("1", ("n N Coll.",)), ("2", ("n N Coll.",)), ("3", ("s Layout",)), ("4", ("n N Coll.",)),
                               ("5", ("n N Coll.",)), ("6", ("s Run sweep",))):
                await press(pilot, key)
                await settle(pilot)
                footer = screen_text(app)[-1]
                for words in (*shown, "r Run", "e Export", "b c Compare", "f2 Sidebar", "? Help", "q Quit", "^p palette"):
                    assert words in footer, (key, footer)
            await press(pilot, "2", "f")  # left out of the footer, still bound
            await settle(pilot)
            assert app.query_one("#graph-view").unfolded
            await press(pilot, "e")
            assert app.last_export is not None and app.last_export.parent == tmp_path

            # the compiled tab's verdicts and the sidebar's labels are whole
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

            # f2 showed the sidebar; it hides it again, and the user's choice sticks
            assert app.sidebar_shown and sidebar.outer_size.width == 24
            await pilot.resize_terminal(140, 40)
            await drain(pilot)
            assert app.sidebar_shown and app.query_one("#sidebar").outer_size.width == 30
            await press(pilot, "f2")
            assert not app.sidebar_shown
            await pilot.resize_terminal(160, 40)
            await drain(pilot)
            assert not app.sidebar_shown, "the user hid it: a wider terminal does not bring it back"

            # the footer's keys are compact (Textual's class) under 100 columns only, but for the
            # palette's, which Textual's footer always draws compact: keys it composed at 80 columns
            # and resized, and keys it composed at 160 (the Plans tab's)
            def compact_keys() -> dict[str, bool]:
                return {str(key.render()).strip(): key.has_class("-compact") for key in app.query(FooterKey)}

            assert compact_keys() and all(c == ("palette" in k) for k, c in compact_keys().items()), compact_keys()
            await press(pilot, "1")
            await settle(pilot)
            assert compact_keys() and all(c == ("palette" in k) for k, c in compact_keys().items()), compact_keys()
            await pilot.resize_terminal(80, 24)
            await press(pilot, "2")
            await settle(pilot)
            assert compact_keys() and all(compact_keys().values()), compact_keys()

    run(scenario())


def test_at_120x40_with_the_sidebar_the_compared_plans_show_whole_names():
    """Three plans beside the sidebar left each tree under 30 columns: every collective's name was
    cut (``x2/call  psum_invarian…``). Under 36 columns a plan, the two compared show, the third is
    named; at 200 columns all three show."""

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            assert app.sidebar_shown
            plans = app.query_one(PlansView)
            assert plans.shown == ("naive", "deferred") and not app.query_one("#reduced-column").display
            await press(pilot, "n")
            rows = screen_text(app)
            assert any("x2/call  psum_invariant_0[s]  f32[5]" in row for row in rows)
            assert any("x1/call  psum_invariant_0[s]  f32[5]" in row for row in rows)
            assert any("reduced: no room at this width (b / c compare it; f2 hides the sidebar)" in row for row in rows)
            await press(pilot, "c")  # reduced becomes the candidate: its column shows, deferred's goes
            await settle(pilot)
            assert plans.shown == ("naive", "reduced") and app.query_one("#reduced-column").display
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=(200, 60)) as pilot:
            await settle(pilot)
            assert app.query_one(PlansView).shown == ("naive", "deferred", "reduced")
            assert not any("no room at this width" in row for row in screen_text(app))

    run(scenario())


async def _compiled_tab_beside_the_sidebar(app, pilot):
    """The Compiled tab (5) with the sidebar opened (f2) once the app settled: its body."""
    from shardscope.app.views import HloView

    await settle(pilot)
    await press(pilot, "5")
    await settle(pilot)
    await press(pilot, "f2")
    await settle(pilot)
    return app.query_one(HloView).body


def test_at_80x24_with_the_sidebar_the_compiled_table_keeps_its_columns_and_scrolls_sideways():
    """At 80 columns with the sidebar open the Compiled tab has about 54 columns for a table of
    70: rich squeezed it to fit, cutting every column (``runs/cal``, ``deferrabl``, the value
    column gone). The table keeps every column whole, and the tab scrolls sideways to it from the
    keyboard (a dim ``…`` marks where the row goes on). linear.py's naive plan: W's gradient, 5
    float32 = 20 B, summed in each of the 2 chunks (64 examples over 2 devices, 16 a chunk): 2
    runs, 40 B per call."""
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=NARROW) as pilot:
            body = await _compiled_tab_beside_the_sidebar(app, pilot)
            assert app.sidebar_shown and body.size.width < 60
            laid_out = body.plain.splitlines()
            header = next(line for line in laid_out if "collective" in line and "verdict" in line)
            assert header.split() == ["#", "collective", "value", "loops", "runs/call", "B/call", "verdict"]
            row = next(line for line in laid_out if "all-reduce[s]" in line)
            assert row.split() == ["1", "all-reduce[s]", "grad(params)", "2", "2", "40", "deferrable"]

            shown = widget_rows(body)
            y = next(k for k, line in enumerate(shown) if "all-reduce[s]" in line)
            assert shown[y].rstrip().endswith("…") and "deferrable" not in shown[y]
            assert app.focused is body  # the arrows reach it
            await press(pilot, *["right"] * body.max_scroll_x)
            assert widget_rows(body)[y].split()[-4:] == ["2", "2", "40", "deferrable"]

    run(scenario())


def test_at_80x24_with_the_sidebar_a_combined_value_wraps_between_names_never_inside_one():
    """train_step.py's step sums W1's and W2's gradients in one all-reduce, whose value lists
    both (``grad(params['W1']), grad(params['W2'])``, 19 and 18 characters). At 80 columns with
    the sidebar open the value column wraps: each name stays whole on its line, where a column
    of 12 cut it into ``grad(params['W1'`` and a line of ``]),``."""
    async def scenario():
        app = make_app(DEMOS / "train_step.py")
        async with app.run_test(size=NARROW) as pilot:
            body = await _compiled_tab_beside_the_sidebar(app, pilot)
            assert app.sidebar_shown
            laid_out = body.plain.splitlines()
            first = next(k for k, line in enumerate(laid_out) if "all-reduce[" in line)
            cells = laid_out[first].split()
            assert cells[2] == "grad(params['W1']),", laid_out[first]
            assert laid_out[first + 1].split() == ["grad(params['W2'])"], laid_out[first + 1]

    run(scenario())
