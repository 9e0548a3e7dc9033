"""A plan tree's lines, drawn with Textual's public API for a cursor that is named, not read.

``Tree`` draws a line from its private state: each node's hover and selected flags, its lines'
paths, a cache by row. A plan tree keeps finished lines by what they show (:func:`line_key`)
and draws ahead the lines a key press is about to show, before the cursor is there; so here a
line is drawn for the cursor and the hovered node a :class:`Drawing` names, which need not be
the tree's own yet. The look is ``Tree._render_line``'s (textual 8.2.8) piece by piece: the
guides, the label with its expand arrow (``Tree.render_label``), the node in the mouse meta, the
padding to the widest line. The SVG snapshots pin it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from shardscope.app.base.textual_adapter import LineFinish

Guides = tuple[str, str, str, str]
"""A guide's four pieces: space, vertical, terminator (a last child), cross (a child with siblings below)."""


@dataclass(frozen=True)
class GuideStyles:
    """The guides' three looks: plain, under the mouse, below the cursor (a style and its pieces)."""

    plain: tuple[Style, Guides]
    hovered: tuple[Style, Guides]
    selected: tuple[Style, Guides]


@dataclass(frozen=True)
class Drawing:
    """What every line of one render pass is drawn with, and what the lines depend on alike."""

    base_style: Style
    cursor: TreeNode | None  # the node drawn as the cursor's
    hover: TreeNode | None  # the node drawn as under the mouse
    has_focus: bool
    view: tuple  # everything the lines depend on alike (the first part of each line's key)
    finish: LineFinish
    guides: GuideStyles
    label: Style
    highlight: Style  # the label under the mouse
    cursor_label: Style
    highlight_line: Style  # a line whose node or an ancestor is under the mouse


def guide_styles(tree: Tree) -> GuideStyles:
    """The guides' looks from ``tree``'s component classes (a transparent colour hides a guide)."""

    def look(style: Style, hidden: bool) -> tuple[Style, Guides]:
        return style, _guides(tree, style, hidden)

    plain = tree.get_component_rich_style("tree--guides", partial=True)
    hidden = {name: tree.get_component_styles(name).color.a == 0
              for name in ("tree--guides", "tree--guides-hover", "tree--guides-selected")}
    return GuideStyles(
        look(plain, hidden["tree--guides"]),
        look(plain + tree.get_component_rich_style("tree--guides-hover", partial=True), hidden["tree--guides-hover"]),
        look(plain + tree.get_component_rich_style("tree--guides-selected", partial=True),
             hidden["tree--guides-selected"]),
    )


def _guides(tree: Tree, style: Style, hidden: bool) -> Guides:
    if tree.show_guides and not hidden:
        lines = tree.LINES["bold"] if style.bold else tree.LINES["double"] if style.underline2 else tree.LINES["default"]
    else:
        lines = ("  ", "  ", "  ", "  ")
    depth = max(0, tree.guide_depth - 2)
    space, vertical, terminator, cross = (f"{characters[0]}{characters[1] * depth} " for characters in lines)
    return space, vertical, terminator, cross


def path_to(node: TreeNode) -> list[TreeNode]:
    """The nodes from the top level down to ``node`` (the root, never shown, left out)."""
    path = []
    while node.parent is not None:
        path.append(node)
        node = node.parent
    path.reverse()
    return path


def line_key(node: TreeNode, x1: int, x2: int, drawing: Drawing) -> tuple:
    """Everything ``node``'s line as drawn and finished depends on, but not the row it lands on.

    The label is the node's for as long as the tree's lines are kept (relabelling forgets them).
    """
    hover, cursor = drawing.hover, drawing.cursor
    return (drawing.view, node.id, node.is_expanded, node.allow_expand, x1, x2,
            tuple((each is hover, each is cursor, each.is_last) for each in path_to(node)))


def draw_line(tree: Tree, node: TreeNode, x1: int, x2: int, drawing: Drawing) -> Strip:
    """``node``'s line of ``tree`` (columns ``x1`` to ``x2``): guides, expand arrow and label."""
    path = path_to(node)
    hover, cursor, focus = drawing.hover, drawing.cursor, drawing.has_focus
    line_style = drawing.highlight_line if hover is not None and any(each is hover for each in path) \
        else drawing.base_style
    guides = Text(style=line_style)
    looks = drawing.guides
    hovered = path[0] is hover
    selected = path[0] is cursor and focus
    guide_style, pieces = looks.plain
    for each in path[1:]:
        guide_style, pieces = looks.selected if selected else looks.hovered if hovered else looks.plain
        if each is not node:
            guides.append(pieces[0] if each.is_last else pieces[1], style=guide_style)
        hovered = hovered or each is hover
        selected = (selected or each is cursor) and focus
    if len(path) > 1:
        guides.append(pieces[2] if node.is_last else pieces[3], style=guide_style)
    label_style = drawing.label
    if node is hover:
        label_style += drawing.highlight
    if node is cursor:
        label_style += drawing.cursor_label
    label = tree.render_label(node, line_style, label_style).copy()
    label.stylize(Style(meta={"node": node.id}))
    guides.append(label)
    segments = list(guides.render(tree.app.console))
    pad = max(tree.virtual_size.width, tree.size.width) - guides.cell_len
    if pad:
        segments.append(Segment(" " * pad, line_style))
    return Strip(segments).crop(x1, x2)
