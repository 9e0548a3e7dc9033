"""How a plan tree draws its lines: kept by node across key presses, yet exactly what a fresh draw gives.

The tree keeps each finished line (as the compositor takes it) by what it shows (its node and the
node's state), so a key press that opens nodes or scrolls redraws only the lines that changed.
These tests hold it to the lines a fresh draw gives, with the node's mouse meta, and to clicks and
hover landing on the line under the mouse (a kept line carries no row number: the row comes from
the mouse's position).
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import ControlType
from textual.events import MouseScrollDown
from textual.geometry import Region

from app_support import DEMOS, LONG_DEEP_DEPTH, SIZE, drain, eventually, make_app, press, run, settle
from shardscope.app.views.plans.plans_view import PlansView


def _rows(tree) -> list[list]:
    """Every visible row of ``tree`` as the compositor takes it: segments (text, style with meta, control)."""
    return [list(strip) for strip in tree.render_lines(Region(0, 0, tree.size.width, tree.size.height))]


def _check_rows_match_their_lines(tree, rows) -> None:
    top = tree.scroll_offset.y
    for y, segments in enumerate(rows):
        node = tree.get_node_at_line(top + y)
        metas = [segment.style.meta for segment in segments if segment.style is not None and segment.style.meta]
        assert not any("line" in meta for meta in metas), f"row {y}: a kept line carries no row number"
        if node is None:
            continue  # a blank row below the last line
        assert any(meta.get("node") == node.id for meta in metas), f"row {y} is drawn for its own node"


def _count_lines_finished(tree) -> list[int]:
    """From now on, count the lines that Textual's styles cache finishes for ``tree`` (the list's one item)."""
    finished = [0]
    finish = tree._styles_cache.render_line

    def counted(*args):
        finished[0] += 1
        return finish(*args)

    tree._styles_cache.render_line = counted
    return finished


def _count_refreshes(widget) -> list[int]:
    """From now on, count ``widget``'s refreshes (the list's one item)."""
    refreshes = [0]
    refresh = widget.refresh

    def counted(*args, **kwargs):
        refreshes[0] += 1
        return refresh(*args, **kwargs)

    widget.refresh = counted
    return refreshes


class _Terminal:
    """What the terminal shows: every screen update the app sends it, applied to a grid of cells."""

    def __init__(self, app) -> None:
        width, height = app.size
        self.cells = [[" "] * width for _ in range(height)]
        display = app._display

        def shown(screen, update):
            if update is not None and not app._batch_count:  # what ``App._display`` writes
                self._apply(update, app.console)
            return display(screen, update)

        app._display = shown

    def _apply(self, update, console) -> None:
        x = y = 0
        for segment in update.__rich_console__(console, console.options):
            for control in segment.control or ():
                if control[0] == ControlType.CURSOR_MOVE_TO:
                    x, y = control[1], control[2]
            if segment.control or segment.text == "\n":
                continue
            for char in segment.text:
                if 0 <= y < len(self.cells) and 0 <= x < len(self.cells[y]):
                    self.cells[y][x] = char
                x += cell_len(char)

    def rows(self, region: Region) -> list[str]:
        """The text the terminal shows in ``region`` of the screen, row by row."""
        return ["".join(self.cells[y][region.x:region.right]) for y in range(region.y, region.bottom)]


async def _check_the_terminal_shows_the_tree(pilot, terminal, tree, when: str) -> None:
    """Wait for the screen updates, then the terminal must show the tree's visible lines (no stale row)."""
    def lines():
        return [strip.text for strip in tree.render_lines(Region(0, 0, tree.size.width, tree.size.height))]

    def shown() -> bool:
        return terminal.rows(tree.region) == lines()

    try:
        await eventually(pilot, shown, when, seconds=5)
    except AssertionError:
        stale = [y for y, (row, line) in enumerate(zip(terminal.rows(tree.region), lines())) if row != line]
        raise AssertionError(f"{when}: the terminal shows stale rows {stale} of {tree.size.height}") from None


def _open_the_page_above(tree) -> None:
    """Select the gap node above the cursor in its block: a page opens there and the lines below move down."""
    body = tree.cursor_node.parent
    tree.select_node([n for n in body.children if n.data.gap is not None and n.line < tree.cursor_line][-1])


def test_the_first_N_finds_its_lines_drawn_ahead_and_lines_kept_across_n_and_N_are_the_lines_a_fresh_draw_gives(
        monkeypatch):
    """The first N finds its lines drawn ahead (``_check_the_first_key_finds_its_lines_drawn_ahead``);
    then a page opened above, n and N: a click on a line drawn at first and moved down since
    selects it, hover lands on the line under the mouse, and a click on a line's guides selects it
    (test_a_click_on_a_tree_line_moves_the_cursor_there_after_lines_moved, on its own app on deep.py
    before, walked the same first four steps); the walk goes on, and every kept line is the line a
    fresh draw gives. (The first N's checks and the walk after it were two tests, each on its own
    app on deep.py, both starting with N.)"""
    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", LONG_DEEP_DEPTH)

    async def scenario():
        app = make_app(DEMOS / "deep.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            view = app.query_one(PlansView)
            naive = view.tree("naive")
            for step, key in enumerate(("N", "open the gap above", "n", "N", "down", "down", "n", "N")):
                if step == 0:  # the first N, its lines drawn ahead
                    await _check_the_first_key_finds_its_lines_drawn_ahead(pilot, view, key)
                elif key == "open the gap above":  # a page opens above the lines just drawn: they move down
                    _open_the_page_above(naive)
                else:
                    await press(pilot, key)  # N: back to the lines drawn before, now further down
                await drain(pilot)
                _check_rows_match_their_lines(naive, _rows(naive))
                if step == 3:  # the lines drawn at first, now moved down by the page opened above them
                    await _click_a_line_that_moved(pilot, app, naive)
                    _check_rows_match_their_lines(naive, _rows(naive))
            kept = _rows(naive)
            naive.forget_drawn_lines()  # the next draw starts afresh
            assert _rows(naive) == kept, "a kept line differs from a fresh draw"

    run(scenario())


async def _click_a_line_that_moved(pilot, app, naive) -> None:
    """Click the line above the cursor (drawn at first, then moved), hover the one above it, then
    click that one's guides: each selects or hovers the line under the mouse."""
    top = naive.scroll_offset.y
    row = naive.cursor_line - 1 - top  # the line above the collective: drawn at first, then moved
    target = naive.get_node_at_line(top + row)
    assert target is not None and target is not naive.cursor_node
    await pilot.click(naive, offset=(naive.scrollable_content_region.width - 2, row))  # on the label's end
    await drain(pilot)
    assert naive.cursor_node is target, "the click selects the line under the mouse"
    details = str(app.query_one(PlansView).details("naive").content)
    assert details == target.label.plain, "the details line shows the clicked node's full label"
    above = naive.get_node_at_line(top + row - 1)
    await pilot.hover(naive, offset=(naive.scrollable_content_region.width - 2, row - 1))
    await drain(pilot)
    assert naive.hover_line == top + row - 1, "hover lands on the line under the mouse"
    await pilot.click(naive, offset=(0, row - 1))  # on the guides left of the label
    await drain(pilot)
    assert naive.cursor_node is above, "a click on a line's guides selects that line too"


async def _check_the_first_key_finds_its_lines_drawn_ahead(pilot, view, key: str) -> None:
    """Press the first ``n`` or ``N`` (its lines drawn ahead): in each of the three trees only the
    cursor's own line is drawn for it, nothing opens, the scrollbar is not refreshed, and every
    line shown is the line a fresh draw gives."""
    await eventually(pilot, lambda: view.first_moves_drawn, "the lines of the first n and N drawn ahead")
    step = view.pairs[0 if key == "n" else -1]
    trees = {name: view.tree(name) for name in step}
    assert len(trees) == 3
    for name, tree in trees.items():  # the path is open, the cursor not there yet, nor the view
        node = tree.node_for(tree.collective_ids[step[name]])
        assert node.line >= 0 and tree.cursor_node is not node
        assert node.line >= tree.scroll_offset.y + tree.scrollable_content_region.height, f"{key} scrolls"
    nodes = {name: tree.node_count for name, tree in trees.items()}
    drawn = {name: tree.lines_drawn for name, tree in trees.items()}
    finished = {name: _count_lines_finished(tree) for name, tree in trees.items()}
    scrollbar_refreshes = {name: _count_refreshes(tree.vertical_scrollbar) for name, tree in trees.items()}
    await press(pilot, key)
    for name, tree in trees.items():
        assert tree.cursor_node.data.key == tree.collective_ids[step[name]]
        assert tree.node_count == nodes[name], f"the first {key} opened nothing: the path was open"
        # a screenful scrolled into view, and only the cursor's own line was drawn for it,
        # and only that line went through Textual's styles cache (background, filters)
        assert tree.lines_drawn - drawn[name] == 1, name
        assert finished[name] == [1], name
        # the scrollbar has no width: refreshing it rebuilt the compositor's map of the whole screen
        assert tree.scroll_offset.y > 0 and scrollbar_refreshes[name] == [0], name
        rows = _rows(tree)
        _check_rows_match_their_lines(tree, rows)
        tree.forget_drawn_lines()  # the next draw starts afresh
        assert _rows(tree) == rows, f"{name}: a line drawn ahead differs from a fresh draw"


def test_plans_shown_after_another_tab_draw_the_first_n_ahead_too(monkeypatch):
    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", LONG_DEEP_DEPTH)

    async def scenario():
        app = make_app(DEMOS / "deep.py")
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "2")  # the Graph tab while the first run traces: the plans show later
            await settle(pilot)
            await press(pilot, "1")
            view = app.query_one(PlansView)
            await eventually(pilot, lambda: view.first_moves_drawn, "the lines of the first n and N drawn ahead")
            trees = [view.tree(name) for name in view.names]
            drawn = [tree.lines_drawn for tree in trees]
            await press(pilot, "n")
            assert [tree.lines_drawn - before for tree, before in zip(trees, drawn)] == [1, 1, 1]

    run(scenario())


def test_the_first_n_finds_its_lines_drawn_ahead_and_the_terminal_shows_the_tree_lines_after_every_scroll(
        monkeypatch):
    """The first n finds its lines drawn ahead (``_check_the_first_key_finds_its_lines_drawn_ahead``);
    then what the terminal shows is the trees' lines after it, after two more n, an N and the mouse
    wheel. (Two tests before, each on its own app on deep.py: the terminal's walk began with the
    first n.)"""
    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", LONG_DEEP_DEPTH)

    async def scenario():
        app = make_app(DEMOS / "deep.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            view = app.query_one(PlansView)
            trees = [view.tree(name) for name in view.names]
            tops = [tree.scroll_offset.y for tree in trees]
            await _check_the_first_key_finds_its_lines_drawn_ahead(pilot, view, "n")
            assert [tree.scroll_offset.y for tree in trees] != tops, "n scrolls"
            terminal = _Terminal(app)  # from here on: what each screen update writes
            app.screen.refresh()  # one full update: the terminal starts out whole
            for tree in trees:
                await _check_the_terminal_shows_the_tree(pilot, terminal, tree, "after the first n")
            for key in ("n", "n", "N"):  # each n scrolls the trees (which scroll without a scrollbar)
                tops = [tree.scroll_offset.y for tree in trees]
                await press(pilot, key)
                assert key == "N" or [tree.scroll_offset.y for tree in trees] != tops, f"{key} scrolls"
                for tree in trees:
                    await _check_the_terminal_shows_the_tree(pilot, terminal, tree, f"after {key}")
            naive = trees[0]
            for turn in range(3):  # the mouse wheel over a tree
                top = naive.scroll_offset.y
                await pilot._post_mouse_events([MouseScrollDown], naive, offset=(5, 5))
                await drain(pilot)
                assert naive.scroll_offset.y > top, "the wheel scrolls the tree"
                await _check_the_terminal_shows_the_tree(pilot, terminal, naive, f"after wheel turn {turn + 1}")

    run(scenario())


def test_a_tree_with_padding_drawn_by_textual_toggles_a_node_once_per_click_on_its_arrow():
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            tree = app.query_one(PlansView).tree("naive")
            tree.styles.padding = (0, 1)  # a box: Textual draws and finishes its lines, row numbers and all
            await drain(pilot)
            assert any("line" in segment.style.meta for segment in _rows(tree)[0] if segment.style is not None)
            node = tree.get_node_at_line(0)
            assert node.allow_expand and node.is_expanded
            await pilot.click(tree, offset=(1, 0))  # on the expand arrow, right of the left padding
            await drain(pilot)
            assert not node.is_expanded, "a click on the arrow collapses the node (once, not back again)"
            await pilot.click(tree, offset=(1, 0))
            await drain(pilot)
            assert node.is_expanded, "a second click on the arrow expands it again"
            leaf = tree.get_node_at_line(2)
            assert not leaf.allow_expand
            await pilot.click(tree, offset=(8, 2))
            await drain(pilot)
            assert tree.cursor_node is leaf, "a click on a label moves the cursor there"
            await pilot.hover(tree, offset=(8, 3))
            await drain(pilot)
            assert tree.hover_line == 3, "hover lands on the line under the mouse"

    run(scenario())


def test_a_theme_switch_recolours_the_labels_of_nodes_already_shown():
    """Labels carry their colours from when their node was added: a new theme makes them again."""

    def name_styles(tree) -> set:
        """The styles of the collectives' names in the labels shown (the span over the name)."""
        found = set()
        for key in tree.collective_ids:
            node = tree.node_for(key)
            if node is not None:
                name = key.rsplit("/", 1)[-1]
                start = node.label.plain.index(name)
                found |= {str(span.style) for span in node.label.spans if span.start == start}
        return found

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            naive = app.query_one(PlansView).tree("naive")
            before = name_styles(naive)
            in_loop = str(naive.get_component_rich_style("plan-tree--collective-in-loop", partial=True))
            assert before == {in_loop}, "the naive plan's collectives sit in its chunk loop"
            app.theme = "textual-light" if app.theme != "textual-light" else "nord"
            await drain(pilot)
            recoloured = str(naive.get_component_rich_style("plan-tree--collective-in-loop", partial=True))
            assert recoloured != in_loop, "the new theme colours collectives in loops differently"
            assert name_styles(naive) == {recoloured}, "the labels shown take the new theme's colours"
            # and so are the lines on screen (the cursor's line takes the cursor's colours)
            top, colour = naive.scroll_offset.y, naive.get_component_rich_style("plan-tree--collective-in-loop").color
            shown = [row for y, row in enumerate(_rows(naive))
                     if (node := naive.get_node_at_line(top + y)) is not None and node.data.key in naive.collective_ids
                     and top + y != naive.cursor_line]
            assert shown and all(colour in {segment.style.color for segment in row if segment.style} for row in shown)

    run(scenario())


def _cells(strips) -> list[list[tuple]]:
    """Each row as its cells: the character and its style, mouse meta left out (the node ids differ)."""
    return [[(char, None if segment.style is None else segment.style.clear_meta_and_links())
             for segment in strip for char in segment.text] for strip in strips]


def _mirror(node, into) -> None:
    """Add ``node``'s children (labels, arrows, open or closed) under ``into``, and theirs."""
    for child in node.children:
        copy = into.add(child.label.copy(), allow_expand=child.allow_expand, expand=child.is_expanded)
        _mirror(child, copy)


def test_a_plan_tree_draws_its_lines_as_textual_s_tree_does(analysis_of):
    """The plan tree draws its own lines (for a cursor it names, with public API): cell for cell,
    colour for colour, what Textual's ``Tree`` draws for the same nodes, cursor, mouse and focus."""
    from textual.app import App
    from textual.containers import Horizontal
    from textual.widgets import Tree

    from shardscope.app.views.plans.plan_tree import PlanTree

    plan = analysis_of("rnn.py").plans["naive"]

    class Pair(App):
        AUTO_FOCUS = None  # neither tree has the focus at first
        CSS = """
        Horizontal > * { width: 1fr; }
        #mirror { background: $surface; overflow-x: hidden; scrollbar-size-vertical: 0; }
        Tree > .tree--highlight { text-style: underline; }
        Tree > .tree--guides-hover { color: red; }
        """  # the label under the mouse and the guides below it differ from the others (not by default)

        def compose(self):
            with Horizontal():
                yield PlanTree("naive", id="plan")
                yield Tree("mirror", id="mirror")

    def rows(tree):
        return _cells(tree.render_lines(Region(0, 0, tree.size.width, tree.size.height)))

    async def scenario():
        app = Pair()
        # 30 rows: the rnn naive plan opened to its last collective is 38 lines on jax 0.12 (more on 0.10.2)
        async with app.run_test(size=(400, 30)) as pilot:
            tree, mirror = app.query_one(PlanTree), app.query_one("#mirror", Tree)
            tree.show_plan(plan)
            tree.open_path(tree.collective_ids[-1])
            mirror.show_root, mirror.guide_depth = False, tree.guide_depth
            _mirror(tree.root, mirror.root)
            await drain(pilot)
            assert tree.last_line == mirror.last_line > tree.size.height, "the same lines, more than a screenful"
            loop = next(y for y in range(tree.last_line) if tree.get_node_at_line(y).children
                        and tree.get_node_at_line(y).parent is not tree.root)  # an open node inside another
            above = tree.get_node_at_line(loop).parent.line  # the mouse over the node around the cursor's
            for each in (tree, mirror):
                each.move_cursor(each.get_node_at_line(loop))
                each.hover_line = above
            await drain(pilot)
            assert tree.scroll_offset == mirror.scroll_offset and app.focused is None
            assert not any("…" in strip.text for strip in tree.render_lines(Region(0, 0, tree.size.width, tree.size.height)))
            unfocused = rows(tree)
            assert unfocused == rows(mirror), "unfocused: the cursor's line, the hovered line and the guides"
            for focused in (tree, mirror):
                focused.focus()
                await drain(pilot)
                assert focused.has_focus
                drawn = rows(focused)
                if focused is tree:
                    ours = drawn
            assert ours == drawn, "focused: the guides below the cursor take the selected colour"
            assert ours != unfocused, "the focus changes what is drawn (else this test shows nothing)"

    run(scenario())
