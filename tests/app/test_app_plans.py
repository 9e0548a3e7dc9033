"""The Plans tab: lazy trees, badges, casts, and n/N walking every tree's collectives."""

from __future__ import annotations

import os
import re

from app_support import DEMOS, LONG_DEEP_DEPTH, SIZE, drain, make_app, press, run, settle

from shardscope.app.views.plans.plan_tree import CONTEXT, PAGE
from shardscope.app.views.plans.plans_view import PlansView


def cursor_key(tree) -> str | None:
    return tree.cursor_node.data.key if tree.cursor_node is not None else None


def test_n_and_N_move_both_trees_to_their_collectives():
    """One app on rnn.py: the first n's line shows its badge, trip counts, casts and varying axes
    (that was a test of its own, on its own app), then n and N walk both trees from tab to tab,
    wrapping either way."""
    async def scenario():
        app = make_app(DEMOS / "rnn.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            plans = app.query_one(PlansView)
            naive, deferred = plans.tree("naive"), plans.tree("deferred")
            naive_ids = [c.equation_id for c in app.analysis.plans["naive"].collectives]
            # the plans' collectives pair by the parameter they reduce, not by position
            deferred_by_value = {c.value: c.equation_id for c in app.analysis.plans["deferred"].collectives}
            naive_values = [c.value for c in app.analysis.plans["naive"].collectives]
            assert naive_values == ["grad(params['Wh'])", "grad(params['b'])", "grad(params['Wx'])"]
            # the sums after the loop carry the same gradients, accumulated per device first
            assert sorted(deferred_by_value) == ["grad(params['Wh'])", "grad(params['Wx'])", "grad(params['b'])"]
            assert len(naive_ids) == 3

            # the labels: badges, trip counts, casts and varying axes
            await press(pilot, "n")  # the naive collective in the time loop: chunks x T runs
            assert cursor_key(naive) == naive_ids[0]
            label = naive.cursor_node.label.plain
            assert label.startswith(" x16/call  psum_invariant_0[s]"), "the badge leads, so a narrow pane never cuts it"
            loops = [n.label.plain for n in _ancestors(naive.cursor_node) if n.data and n.data.equation is not None]
            assert any(text.startswith(" x16/call  1 collective equation in ") and "scan x8" in text for text in loops)
            assert any(text.startswith(" x20/call  3 collective equations in ") and "scan x2" in text for text in loops)
            siblings = [n.label.plain for n in naive.cursor_node.parent.children]
            assert any("{V:s}" in text for text in siblings)
            chunk_loop = naive.cursor_node.parent.parent
            casts = [n.label.plain for n in chunk_loop.children if n.label.plain.startswith("pvary")]
            assert casts and all("cast, moves no data" in text for text in casts)
            await press(pilot, "n")
            assert "x1/call" in deferred.cursor_node.label.plain

            # n and N from the second collective on: n from another tab comes back to Plans, n wraps
            # from the last to the first, N from the first to the last
            await press(pilot, "4")
            for step, position in (("n", 2), ("n", 0), ("N", 2), ("N", 1), ("N", 0), ("n", 1)):
                await press(pilot, step)
                assert app.query_one("#tabs").active == "plans"
                assert cursor_key(naive) == naive_ids[position]
                assert cursor_key(deferred) == deferred_by_value[naive_values[position]]
                header = str(app.query_one("#naive-header").content)
                name = naive_ids[position].rsplit('/', 1)[-1]
                value = re.escape(naive_values[position])
                assert re.search(rf"{value} x\d+/call collective {position + 1} of 3, {name} ", header), header
                for tree in (naive, deferred):
                    node = tree.cursor_node
                    assert all(parent.is_expanded for parent in _ancestors(node))
                    top, height = tree.scroll_offset.y, tree.scrollable_content_region.height
                    assert top <= node.line < top + height, "the cursor line is scrolled into view"

    run(scenario())


def _ancestors(node):
    while node.parent is not None:
        node = node.parent
        yield node


def test_trees_populate_lazily_and_page_long_blocks(monkeypatch):
    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", LONG_DEEP_DEPTH)

    async def scenario():
        app = make_app(DEMOS / "deep.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            naive = app.query_one(PlansView).tree("naive")
            total = app.analysis.plans["naive"].program.equation_count
            assert total > 4 * PAGE
            # opened by itself: the shard_map and the chunk loop, each body showing one page, and the
            # equations around the first and the last collective (where the first n and the first N
            # go), each page of them with a gap either side: far fewer nodes than equations
            around = 2 * CONTEXT + 1 + 2
            assert naive.node_count <= 2 * PAGE + 2 * around + 20 < total, "nodes exist only for what is on show"
            before = naive.node_count
            await press(pilot, "N")  # the last collective: deep inside a long loop body, opened already
            assert cursor_key(naive) == naive.collective_ids[-1]
            assert naive.node_count == before
            await press(pilot, "N")  # the one before: a gap opens around it (its page), not the whole body
            assert cursor_key(naive) == naive.collective_ids[-2]
            assert naive.node_count <= before + around
            body = naive.cursor_node.parent
            gaps = [n for n in body.children if n.data.gap is not None]
            assert gaps and "more equation(s)" in gaps[0].label.plain
            shown = len(body.children)
            naive.select_node(gaps[0])
            await drain(pilot)
            assert len(body.children) > shown, "enter on a gap shows the next page"

    assert os.environ.get("SHARDSCOPE_DEEP_DEPTH") == LONG_DEEP_DEPTH
    run(scenario())


def test_runs_do_not_pile_up_garbage_frozen_out_of_the_collector():
    import gc

    def frozen_garbage() -> int:
        """The garbage the collector could not reach because it was frozen (then freeze what lives again).

        What is not frozen is collected first and not counted: garbage that other threads of the
        test process make meanwhile is no run's doing.
        """
        gc.collect()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        return found

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            frozen_garbage()
            await press(pilot, "r")
            await settle(pilot)
            one_run = frozen_garbage()  # what one run leaves: the analysis it replaced, and more
            for _ in range(6):
                await press(pilot, "r")
                await settle(pilot)
            six_runs = frozen_garbage()
            assert one_run > 1000
            # each run starts by collecting what the runs before left, so what stays frozen does not
            # grow with the runs: without that collection six runs left 6.1 times one run's (37,967
            # against 6,231); with it, after four runs, 1.0 to 2.1 times (the most in a full-suite
            # run, where the process holds much more)
            assert six_runs < 3 * one_run, (one_run, six_runs)

    run(scenario())


def test_the_focus_stays_where_the_user_put_it_across_tabs_and_runs_and_a_new_result_redraws_the_cursors_line():
    """One app on linear.py, steps of one user's path (three tests, each on its own app, before):

    - the Plans tab takes the focus, but not from an input;
    - a re-run leaves the focus in the sidebar, where the user set something;
    - after ``n``, a run at another mesh and chunk size redraws the details and the header of the
      collective the cursor is on: the details said ``x2/call`` of the old run until the cursor
      moved.
    """
    from textual.widgets import Input, OptionList, Select

    from app_support import eventually

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            plans = app.query_one(PlansView)

            # the Plans tab takes the focus but not from an input
            naive = plans.tree("naive")
            assert app.focused is naive
            chunk = app.query_one("#chunk", Input)
            chunk.focus()
            await drain(pilot)  # focus() lands on a later turn: escape must find the input focused
            assert app.focused is chunk
            await press(pilot, "escape", "2", "1")  # leave the input, then back to Plans
            await drain(pilot)
            assert app.focused is naive
            chunk.focus()
            await drain(pilot)
            app.action_show_tab("graph")
            app.action_show_tab("plans")
            await drain(pilot)
            assert app.focused is chunk, "the input keeps the focus while the user types"
            await press(pilot, "escape", "n", "down")
            assert app.focused is naive and naive.cursor_node.data.key.endswith("add_0")  # the line after the psum

            # a re-run leaves the focus in the sidebar
            for widget in (app.query_one("#devices", Select), app.query_one("#functions", OptionList)):
                widget.focus()
                await drain(pilot)
                await press(pilot, "r")  # the user set something in the sidebar and runs it
                await settle(pilot)
                assert app.focused is widget, f"the run's results took the focus from {widget.id}"

            # a new result redraws what the cursor shows
            await press(pilot, "n")
            batch = 64  # demos/linear.py: x is (64, 5)
            before = batch // 2 // 16  # 2 devices, chunk 16: 2 chunks per device, one psum each
            assert f" x{before}/call " in plans.details("naive").content.plain
            app.query_one("#devices", Select).value = 4
            app.query_one("#chunk", Input).value = "2"
            await eventually(pilot, lambda: app.stale, "the new settings marked the results stale")
            await press(pilot, "r")
            await settle(pilot)
            after = batch // 4 // 2  # 16 examples per device in chunks of 2
            assert app.analysis.shapes.devices == 4
            for name in ("naive", "deferred"):
                tree = plans.tree(name)
                details = plans.details(name).content.plain
                assert details == tree.cursor_details.plain, "the details show the node under the cursor"
                assert cursor_key(tree) in tree.collective_ids, "the cursor stayed on its collective"
            assert f" x{after}/call " in plans.details("naive").content.plain
            assert f" x{before}/call " not in plans.details("naive").content.plain
            assert f"x{after}/call collective 1 of 1" in app.query_one("#naive-header").content.plain

    run(scenario())
