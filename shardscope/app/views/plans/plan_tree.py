"""One plan's program as a lazily populated ``Tree``: one node per equation, loops expandable.

A node's children are only added when it is first expanded, and a block of many equations gets
them a page at a time: the rest sits in a "... more equations" gap node that opens on Enter.
So a program of tens of thousands of equations costs a few hundred nodes. :meth:`PlanTree.reveal`
expands the path to any equation, opening only the part of a gap around it, and moves the
cursor there; :meth:`PlanTree.open_path` opens it without moving the cursor, and
:meth:`PlanTree.draw_ahead` draws, while the app is idle, the lines such a move will show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from textual import events, on
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.reactive import Reactive
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from rich.style import Style
from rich.text import Text

from shardscope.app.base.textual_adapter import finish_line, line_finish
from shardscope.app.views.plans.plan_index import Entry, PlanIndex, block_key, index_plan
from shardscope.app.views.plans.plan_labels import Inside, LabelStyles, block_label, equation_label, gap_label
from shardscope.app.views.plans.tree_lines import Drawing, draw_line, guide_styles, line_key

if TYPE_CHECKING:
    from shardscope.engine.jaxpr.model import Block
    from shardscope.pipeline.analysis import PlanResult

PAGE = 64
"""Equations a block shows at a time (more than a screenful); the rest wait in a gap node."""

CONTEXT = 20
"""Equations shown either side of one that n/N reveals inside a gap."""

OPEN_DEPTH = 3
"""How many levels of nodes with collectives inside a new plan opens by itself."""


class PlanTree(Tree[Entry]):
    """The equations of one plan; collectives, casts, loops and varying values stand out.

    Key presses at tens of thousands of equations must paint within 50 ms. The tree keeps its
    finished lines by node (:meth:`render_lines`), drawn with public API (``tree_lines``); two
    privates of Textual remain, both in :mod:`shardscope.app.base.textual_adapter`: the override of
    ``Tree._invalidate`` (open nodes without a layout of the screen) and the styles cache that
    finishes a line (:func:`~shardscope.app.base.textual_adapter.finish_line`).

    The tree draws no scrollbar (it still scrolls, by keys and wheel): a scrollbar is redrawn
    whole whenever its tree scrolls, and at 50,010 equations the three trees' scrollbars were
    about 40% of the first ``n`` (85.5 and 103.6 -> 43.3 and 50.2 ms without them, alternated
    runs). The gap lines say how many equations are not shown, and each pane keeps two more
    columns for its labels.
    """

    COMPONENT_CLASSES = {
        "plan-tree--type",
        "plan-tree--varying",
        "plan-tree--collective-in-loop",
        "plan-tree--collective-once",
        "plan-tree--badge-in-loop",
        "plan-tree--badge-once",
        "plan-tree--cast",
        "plan-tree--loop",
    }

    DEFAULT_CSS = """
    PlanTree { height: 1fr; background: $surface; overflow-x: hidden; scrollbar-size-vertical: 0; }
    PlanTree > .plan-tree--type { color: $text-muted; }
    PlanTree > .plan-tree--varying { color: $text-warning; }
    PlanTree > .plan-tree--collective-in-loop { color: $text-error; text-style: bold; }
    PlanTree > .plan-tree--collective-once { color: $text-success; text-style: bold; }
    PlanTree > .plan-tree--badge-in-loop { color: $text; background: $error; text-style: bold; }
    PlanTree > .plan-tree--badge-once { color: $text; background: $success-darken-2; text-style: bold; }
    PlanTree > .plan-tree--cast { color: $text-success; text-style: italic; }
    PlanTree > .plan-tree--loop { color: $text-primary; text-style: bold; }
    """

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)
    """The lines the tree holds. ``Widget``'s own asks for a layout of the whole screen when it
    changes, which is most of what a key press that opens a node costs (``n`` opens several);
    the tree's outer size never depends on it, so here it only updates the scroll range
    (:meth:`watch_virtual_size`) and lets the tree scroll whenever its lines outgrow the view
    (:attr:`allow_vertical_scroll`)."""

    def __init__(self, plan_name: str, *, cursor_moved: Callable[["PlanTree"], None] | None = None,
                 **kwargs: Any) -> None:  # Textual's widget keywords, passed on
        self._view_width_kept: int | None = None  # the view's width, until the tree is resized or restyled
        self._invalidating = False  # inside ``_invalidate``: its refresh lays nothing out
        super().__init__(plan_name, **kwargs)  # which measures the root's label and refreshes
        self.plan_name = plan_name
        self.cursor_moved = cursor_moved
        """Called as soon as the cursor moves (before ``NodeHighlighted`` arrives): what shows the
        cursor's details repaints in the same frame as the tree, not one frame later."""
        self.show_root = False
        self.auto_expand = True
        self.guide_depth = 3
        self.index = PlanIndex({}, {}, {}, (), {})
        self._node_by_key: dict[str, TreeNode[Entry]] = {}
        self._styles: LabelStyles | None = None
        self._node_lines: LRUCache[tuple, Strip] = LRUCache(1024)  # finished lines, by what they show
        self._node_lines_generation = 0  # bumped when node ids restart, labels or the styles change
        self._component_styles_kept: dict[tuple, Any] = {}  # until the styles change
        self.lines_drawn = 0
        """How many lines were drawn anew so far (not found kept by :meth:`render_lines`)."""

    def watch_virtual_size(self, size: Size) -> None:
        """Keep the scroll offset inside the new content size and repaint, without a layout of the screen."""
        self.scroll_x, self.scroll_y = self.validate_scroll_x(self.scroll_x), self.validate_scroll_y(self.scroll_y)
        self.refresh()

    @property
    def allow_vertical_scroll(self) -> bool:
        """Whenever the lines outgrow the view, as soon as they do.

        ``Widget``'s asks whether the vertical scrollbar shows, which Textual decides at a layout
        of the screen; opening nodes does without one (:attr:`virtual_size`), and the tree draws
        no scrollbar anyway.
        """
        return self.max_scroll_y > 0 and not (self.is_disabled or self.loading)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        """``ScrollView.watch_scroll_y``, without moving the scrollbar this tree does not draw.

        The scrollbar has no width (``scrollbar-size-vertical: 0``), so it is not on screen; a
        refresh of a widget that is not on screen makes the compositor rebuild its whole map of
        the screen, which on every scroll (``n``) was about 3 ms at 160x48. Textual skips such a
        scrollbar in the same way when it updates the scroll range. The rest is the repaint of
        the whole view that ``ScrollView`` does: its lines moved (``Widget._refresh_scroll``
        would only re-place widgets, which a tree has none of, and leave stale rows on screen).
        """
        if self.styles.scrollbar_size_vertical:
            super().watch_scroll_y(old_value, new_value)
        elif round(old_value) != round(new_value):
            self.refresh(self.size.region)

    def watch_cursor_line(self, previous_line: int, line: int) -> None:
        """``Tree.watch_cursor_line``, then :attr:`cursor_moved` at once."""
        super().watch_cursor_line(previous_line, line)
        if previous_line != line and self.cursor_moved is not None:
            self.cursor_moved(self)

    def _invalidate(self) -> None:
        """``Tree._invalidate`` (nodes were added, opened or closed) without its layout of the whole
        screen (see :attr:`virtual_size`). Overrides a private of Textual (``textual_adapter``)."""
        self._invalidating = True
        try:
            super()._invalidate()
        finally:
            self._invalidating = False

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> "PlanTree":
        """``Widget.refresh``; the layout that ``Tree._invalidate`` asks for is left out."""
        return super().refresh(*regions, repaint=repaint, layout=layout and not self._invalidating,
                               recompose=recompose)

    def show_plan(self, plan: PlanResult) -> None:
        """Replace the tree with ``plan``'s program; only the top-level equations get nodes."""
        self.index = index_plan(plan)
        self._styles = None  # the theme may have changed since the last plan
        self.clear()
        self._node_by_key = {}
        self.root.data = Entry("root", block=plan.program.root)
        self._populate(self.root)
        self.root.expand()
        self._expand_towards_collectives(self.root, OPEN_DEPTH)

    def _expand_towards_collectives(self, node: TreeNode[Entry], depth: int) -> None:
        """Open the nodes with collectives inside, ``depth`` levels down: where to look first."""
        if depth <= 0:
            return
        for child in list(node.children):
            if _entry_of(child).gap is None and self._inside(_entry_of(child).key).count:
                self._populate(child)
                child.expand()
                self._expand_towards_collectives(child, depth - 1)

    @property
    def collective_ids(self) -> tuple[str, ...]:
        """The collective equations, in program order."""
        return self.index.order

    def node_for(self, key: str) -> TreeNode[Entry] | None:
        """The node of an equation id (or a sub-block's key), if it has one yet."""
        return self._node_by_key.get(key)

    @property
    def node_count(self) -> int:
        """How many nodes exist so far (lazy population keeps this small)."""
        return len(self._node_by_key)

    def open_path(self, equation_id: str) -> TreeNode[Entry]:
        """Expand every node above ``equation_id`` (opening only the part of a gap around it); its node."""
        node = self.root
        for key in (*self.index.paths[equation_id], equation_id):
            self._populate(node)
            if not node.is_expanded:
                node.expand()
            node = self._node_by_key.get(key) or self._open_gap_around(node, key)
        return node

    def reveal(self, equation_id: str) -> TreeNode[Entry]:
        """Expand every node above ``equation_id``, move the cursor to it and scroll to it."""
        node = self.open_path(equation_id)
        self.get_node_at_line(0)  # rebuilds the tree lines, so node.line is current
        self.move_cursor(node)  # which scrolls to it too
        return node

    def draw_ahead(self, equation_id: str) -> int:
        """Draw now the lines that moving the cursor to ``equation_id`` brings into view; how many.

        The first ``n`` scrolls every tree far from its top, onto a screenful of lines never
        drawn (about 0.3 ms each: most of that key press at tens of thousands of equations).
        Drawn here, while the app is idle, they are kept by node (:meth:`_finished_line`) and the
        key press finds them. They are drawn as they will look with the cursor on the equation
        (``Tree`` marks the cursor's node selected, which colours the guides of the lines below
        it: a :class:`~shardscope.app.views.plans.tree_lines.Drawing` names it); the cursor's own
        line is left to the key press. A line kept here is used only if everything it depends on
        is as it was (its :func:`~shardscope.app.views.plans.tree_lines.line_key`), so drawing
        ahead can waste work but never show a wrong line.
        """
        node = self.node_for(equation_id)
        if node is None or not self.is_on_screen or not self.size.area:
            return 0
        self.get_node_at_line(0)  # rebuilds the tree lines if nodes were added, so node.line is current
        line = node.line
        if line < 0 or node is self.cursor_node:
            return 0
        drawing = self._drawing(cursor=node)
        if drawing is None:  # a box Textual styles itself (see render_lines)
            return 0
        height = self.scrollable_content_region.height
        x1 = self.scroll_offset.x
        drawn = 0
        for y in range(max(0, line - height), min(self.last_line + 1, line + height)):
            if y not in (line, self.cursor_line):
                self._finished_line(y, x1, x1 + self.size.width, drawing)
                drawn += 1
        return drawn

    @on(Tree.NodeExpanded)
    def _populate_on_expand(self, event: Tree.NodeExpanded[Entry]) -> None:
        if event.node.tree is self:
            self._populate(event.node)

    @on(Tree.NodeSelected)
    def _open_gap_on_select(self, event: Tree.NodeSelected[Entry]) -> None:
        entry = event.node.data
        if event.node.tree is self and entry is not None and entry.gap is not None:
            self._open_gap(event.node, None)

    def _populate(self, node: TreeNode[Entry]) -> None:
        """Add ``node``'s children the first time it is needed (the first page of a long block)."""
        entry = node.data
        if entry is None or entry.populated:
            return
        entry.populated = True
        blocks = entry.child_blocks()
        if len(blocks) == 1:
            count = len(blocks[0].equations)
            self._add_equations(node, blocks[0], 0, min(count, PAGE))
            if count > PAGE:
                self._add_gap(node, blocks[0], PAGE, count)
        else:
            assert entry.equation is not None  # several blocks: an equation's
            for block in blocks:
                key = block_key(entry.equation, block)
                child = Entry(key, block=block)
                self._node_by_key[key] = node.add(self._label_of(child, node), child)

    def _add_equations(self, parent: TreeNode[Entry], block: Block, start: int, stop: int, before: TreeNode[Entry] | None = None) -> None:
        for eqn in block.equations[start:stop]:
            entry = Entry(eqn.id, equation=eqn, populated=not eqn.blocks)
            self._node_by_key[eqn.id] = parent.add(self._label_of(entry, parent), entry, before=before,
                                                   allow_expand=bool(eqn.blocks))

    def _add_gap(self, parent: TreeNode[Entry], block: Block, start: int, stop: int, before: TreeNode[Entry] | None = None) -> None:
        entry = Entry(f"{_entry_of(parent).key}#{start}", block=block, populated=True, gap=(start, stop))
        parent.add(self._label_of(entry, parent), entry, before=before, allow_expand=False)

    def _label_of(self, entry: Entry, parent: TreeNode[Entry]) -> Text:
        """The label of ``entry``'s node under ``parent``: an equation, a sub-block, or a gap."""
        styles = self.label_styles()
        if entry.gap is not None:
            start, stop = entry.gap
            inside = self.index.inside_between(_entry_of(parent).key, start, stop)
            return gap_label(stop - start, min(PAGE, stop - start), inside, styles)
        if entry.equation is not None:
            return equation_label(entry.equation, self.index.collectives.get(entry.key), self._inside(entry.key), styles)
        assert entry.block is not None  # not a gap nor an equation: a block
        return block_label(entry.block, self._inside(entry.key), styles)

    def _relabel(self, node: TreeNode[Entry]) -> None:
        """Make every label below ``node`` again, with the current label styles."""
        for child in node.children:
            child.set_label(self._label_of(_entry_of(child), node))
            self._relabel(child)

    def _open_gap(self, gap_node: TreeNode[Entry], around: int | None) -> None:
        """Show a page of the gap's equations (the page around position ``around`` if given)."""
        parent, entry = gap_node.parent, _entry_of(gap_node)
        assert parent is not None and entry.gap is not None and entry.block is not None  # a gap: a child, made with its range and block
        start, stop = entry.gap
        low, high = (start, min(stop, start + PAGE)) if around is None else (
            max(start, around - CONTEXT), min(stop, around + CONTEXT + 1))
        if low > start:
            self._add_gap(parent, entry.block, start, low, before=gap_node)
        self._add_equations(parent, entry.block, low, high, before=gap_node)
        if high < stop:
            self._add_gap(parent, entry.block, high, stop, before=gap_node)
        gap_node.remove()

    def _open_gap_around(self, parent: TreeNode[Entry], key: str) -> TreeNode[Entry]:
        position = self.index.positions[key]
        for child in parent.children:
            gap = _entry_of(child).gap
            if gap is not None and gap[0] <= position < gap[1]:
                self._open_gap(child, position)
                return self._node_by_key[key]
        raise KeyError(key)

    def _inside(self, key: str) -> Inside:
        return self.index.inside.get(key, Inside())

    def label_styles(self) -> LabelStyles:
        """The label styles, from the component classes of the current theme."""
        if self._styles is None:
            style = self.get_component_rich_style
            self._styles = LabelStyles(
                type=style("plan-tree--type", partial=True),
                varying=style("plan-tree--varying", partial=True),
                collective_in_loop=style("plan-tree--collective-in-loop", partial=True),
                collective_once=style("plan-tree--collective-once", partial=True),
                badge_in_loop=style("plan-tree--badge-in-loop", partial=True),
                badge_once=style("plan-tree--badge-once", partial=True),
                cast=style("plan-tree--cast", partial=True),
                loop=style("plan-tree--loop", partial=True),
            )
        return self._styles

    def clear(self) -> "PlanTree":
        """``Tree.clear``; node ids start again from 0, so the lines cached by node go too."""
        self._forget_kept_lines()
        return super().clear()

    def forget_drawn_lines(self) -> None:
        """Draw every line afresh on the next render (none of the lines kept by node)."""
        self._forget_kept_lines()
        self.refresh()

    def _forget_kept_lines(self) -> None:
        self._node_lines_generation += 1
        self._node_lines.clear()

    def notify_style_update(self) -> None:
        """The styles changed (a theme, focus): no line or component style kept is right any more.

        The labels carry their colours, made when their node was added: if the label styles
        changed (a theme; not a focus change), every label is made again. Textual updates the
        component classes' styles (which the label styles come from) only after this call
        (``Stylesheet.apply``), so that is checked on the next turn.
        """
        self._forget_kept_lines()
        self._component_styles_kept.clear()
        self._view_width_kept = None  # padding or a border may have changed
        super().notify_style_update()
        if self._styles is not None:
            self.call_later(self._relabel_if_styles_changed, self._styles)

    def _relabel_if_styles_changed(self, made_with: LabelStyles) -> None:
        self._component_styles_kept.clear()  # what was read before the component classes' update
        self._forget_kept_lines()  # ... and the lines drawn with it, or with the labels replaced below
        self._styles = None
        if self.label_styles() != made_with:
            self._relabel(self.root)

    def get_component_rich_style(self, *names: str, partial: bool = False, default: Style | None = None) -> Style:
        """``Widget.get_component_rich_style``, kept until the styles change.

        ``Widget`` forgets these on every ``refresh``, and a tree refreshes a line whenever its
        cursor moves: each render pass then walked every ancestor's styles again for each
        component class a line uses (guides, cursor, highlight), about 0.2 ms each.
        """
        key = ("rich", names, partial, default)
        style = self._component_styles_kept.get(key)
        if style is None:
            style = self._component_styles_kept[key] = super().get_component_rich_style(
                *names, partial=partial, default=default)
        return style

    def get_component_styles(self, *names: str):
        """``DOMNode.get_component_styles``, kept until the styles change (``Tree`` reads the guides'
        colours three times a line; the styles are only read)."""
        key = ("styles", names)
        styles = self._component_styles_kept.get(key)
        if styles is None:
            styles = self._component_styles_kept[key] = super().get_component_styles(*names)
        return styles

    def render_lines(self, crop: Region) -> list[Strip]:
        """The visible lines as the compositor takes them, each kept by what it shows.

        ``Tree`` caches a line by its number and Textual's styles cache keeps the finished line
        (background, filters) by its row; a key press that opens nodes (``n`` does in every
        tree) or scrolls drops both, so every visible line was drawn and finished again, about
        0.3 ms each. Here a finished line is kept by its node and the node's state
        (:func:`~shardscope.app.views.plans.tree_lines.line_key`), whatever row it lands on: a
        line scrolled into view that was seen, or drawn ahead (:meth:`draw_ahead`), costs a
        lookup. The widget's style and everything the lines share are fetched once per call.

        A tree with a border, padding or an outline (none here) is drawn and styled by Textual itself.
        """
        drawing = self._drawing(cursor=self.cursor_node)
        if drawing is None:
            return super().render_lines(crop)
        scroll_x, scroll_y = self.scroll_offset
        x2 = scroll_x + self.size.width
        strips = [self._finished_line(row + scroll_y, scroll_x, x2, drawing) for row in crop.line_range]
        if crop.column_span != (0, self.size.width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def render_line(self, y: int) -> Strip:
        """Row ``y`` of the view as :meth:`render_lines` draws it (Textual asks for one row to find
        what the mouse points at); a tree with a box is ``Tree``'s to draw."""
        if line_finish(self) is None:
            return super().render_line(y)
        return self.render_lines(Region(0, y, self.size.width, 1))[0]

    def _drawing(self, cursor: TreeNode[Entry] | None) -> Drawing | None:
        """How this render pass draws its lines, with the cursor on ``cursor``; None for a tree
        with a border, padding or an outline (a finished line then depends on its row)."""
        finish = line_finish(self)
        if finish is None:
            return None
        hover = self.get_node_at_line(self.hover_line) if self.hover_line >= 0 else None
        style = self.rich_style
        rich = self.get_component_rich_style
        return Drawing(
            base_style=style, cursor=cursor, hover=hover, has_focus=self.has_focus,
            view=(self._node_lines_generation, self.virtual_size.width, self.guide_depth, self.show_guides,
                  self.show_root, self.get_pseudo_class_state(), self.has_focus, style, finish.key()),
            finish=finish, guides=guide_styles(self), label=rich("tree--label", partial=True),
            highlight=rich("tree--highlight", partial=True), cursor_label=rich("tree--cursor"),
            highlight_line=rich("tree--highlight-line"))

    def _finished_line(self, y: int, x1: int, x2: int, drawing: Drawing) -> Strip:
        """Tree line ``y`` as the compositor takes it: kept by its key, else drawn and finished.

        A row below the last line is blank: its key is the view alone.
        """
        node = self.get_node_at_line(y)
        key = (drawing.view, None, x1, x2) if node is None else line_key(node, x1, x2, drawing)
        strip = self._node_lines.get(key)
        if strip is None:
            self.lines_drawn += 1
            content = Strip.blank(self.size.width, drawing.base_style) if node is None \
                else draw_line(self, node, x1, x2, drawing)
            strip = self._node_lines[key] = finish_line(self, content, drawing.finish)
        return strip

    def on_mouse_move(self, event: events.MouseMove) -> None:
        """Hover the line under the mouse, found by its position: a kept line carries no row number."""
        if "line" in event.style.meta:
            return  # a line Textual styled itself (a tree with a box): ``Tree``'s handler reads its row
        event.prevent_default()  # ``Tree``'s handler would find no row and clear the hover
        self.hover_line = self._line_at(event)

    async def on_click(self, event: events.Click) -> None:
        """Move the cursor to the clicked line and select it, or toggle its node on the arrow.

        ``Tree``'s own handler, which runs next, reads the row from the line's mouse meta; the
        kept lines carry none, so it does nothing. A line Textual styled itself (a tree with a
        border or padding, see :meth:`render_lines`) carries its row: that click is ``Tree``'s
        alone (handled twice, the arrow would toggle its node back).
        """
        if "line" in event.style.meta:
            return
        line = self._line_at(event)
        if line < 0:
            return
        async with self.lock:
            if event.style.meta.get("toggle", False):
                node = self.get_node_at_line(line)
                if node is not None and node.allow_expand:
                    node.toggle()
            else:
                self.cursor_line = line
                await self.run_action("select_cursor")

    def _line_at(self, event: events.MouseEvent) -> int:
        """The tree line under the mouse, or -1."""
        offset = event.get_content_offset(self)
        if offset is None:
            return -1
        line = offset.y + self.scroll_offset.y
        return line if line <= self.last_line else -1

    def get_label_width(self, node: TreeNode[Entry]) -> int:
        """The label's width as drawn: no wider than the room its line has (see :meth:`render_label`)."""
        label = node.label
        width = (label.cell_len if hasattr(label, "cell_len") else len(str(label))) + (2 if node.allow_expand else 0)
        return min(width, self._room(node))

    def render_label(self, node: TreeNode[Entry], base_style: Style, style: Style) -> Text:
        """The label cut with an ellipsis to the room its line has: the tree never scrolls sideways.

        Labels lead with what matters (the badge, the name), so the cut takes the details; the
        full label of the node under the cursor is :attr:`cursor_details`.
        """
        text = super().render_label(node, base_style, style)
        room = self._room(node)
        if text.cell_len > room:
            text.truncate(room, overflow="ellipsis")
        return text

    @property
    def cursor_details(self) -> Text:
        """The node under the cursor in full (empty when there is none): its label, and for a
        collective the value it carries first and its source line last (``params['Wh']  x16/call
        psum_invariant_0[s] ...  rnn.py:30 (step)``). Wrappable, unlike the tree's own labels
        (``no_wrap``: one line each, cut with an ellipsis)."""
        node = self.cursor_node
        if node is None or not isinstance(node.label, Text):
            return Text()
        details = Text(overflow="fold")
        collective = self.index.collectives.get(node.data.key) if node.data is not None else None
        if collective is not None:
            details.append(f"{collective.value} ", "bold")
        label = node.label.copy()
        label.no_wrap, label.overflow = False, "fold"
        details.append_text(label)
        if collective is not None and collective.source and collective.source != collective.value:
            details.append(f"  {collective.source}", "dim")
        return details

    def on_resize(self, event: events.Resize) -> None:
        """The view's width is looked up again (``Tree`` measures its lines again on a resize too)."""
        self._view_width_kept = None

    def _view_width(self) -> int:
        """The view's width, looked up once until the tree is resized: measuring the lines after a
        key press that opens a node (:meth:`get_label_width`, once a line) was mostly this look-up."""
        width = self._view_width_kept
        if width is None:
            width = self.scrollable_content_region.width
            if width:
                self._view_width_kept = width
        return width or 10_000  # not laid out yet: no cut

    def _room(self, node: TreeNode[Entry]) -> int:
        """Columns left for ``node``'s label on its line: the view's width minus the guides."""
        depth = 0
        parent = node.parent
        root = self.root
        while parent is not None and parent is not root:
            depth += 1
            parent = parent.parent
        return max(self._view_width() - depth * self.guide_depth, 8)


def _entry_of(node: TreeNode[Entry]) -> Entry:
    """The entry of a node of the tree: every node it adds carries one (Textual types it optional)."""
    assert node.data is not None
    return node.data
