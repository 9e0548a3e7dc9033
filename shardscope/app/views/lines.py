"""A scrollable view of rendered lines that draws only the lines on screen.

A ``Static`` inside a scroll container re-renders all of its content when it scrolls; with the
diff of a program of a few thousand equations that costs about a second per key. This view uses
Textual's line API instead: it keeps the lines, and ``render_line`` turns only the visible ones
into strips (cached), so scrolling costs the same for ten lines or ten thousand.
"""

from __future__ import annotations

from typing import Sequence

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.cache import LRUCache
from textual.events import Resize
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input

from shardscope.render.theme import THEME


class LinesView(ScrollView, can_focus=True):
    """Scrollable lines: ``Text`` lines, or any rich renderable laid out once into lines."""

    DEFAULT_CSS = """
    LinesView {
        height: 1fr;
    }
    """

    def __init__(self, *, reserve_scrollbar: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.reserve_scrollbar = reserve_scrollbar
        """Lay width-fitted renderables out beside the vertical scrollbar whether it shows yet or
        not (:attr:`fit_width`): for content that is always taller than the view."""
        self._texts: Sequence[Text] = ()
        self._rendered: list[list[Segment]] | None = None
        self._renderable: RenderableType | None = None
        self._strips: LRUCache[int, tuple[Strip, int]] = LRUCache(2048)  # line -> (strip, content width)

    @property
    def line_count(self) -> int:
        """How many lines the view holds."""
        return len(self._rendered) if self._rendered is not None else len(self._texts)

    @property
    def plain(self) -> str:
        """Everything the view holds, as plain text (one line per line)."""
        if self._rendered is not None:
            return "\n".join("".join(s.text for s in line).rstrip() for line in self._rendered)
        return "\n".join(text.plain for text in self._texts)

    def show_lines(self, lines: Sequence[Text]) -> None:
        """Show ``lines``, one ``Text`` per line (not wrapped: long lines scroll sideways)."""
        self._texts, self._rendered, self._renderable = lines, None, None
        self._reset(max((text.cell_len for text in lines), default=0), len(lines))
        self.scroll_to(0, 0, animate=False)

    def show_renderable(self, renderable: RenderableType, *, fit_width: bool = False) -> None:
        """Lay ``renderable`` out into lines: at its natural width, or at the view's (tables).

        A width-fitted renderable is laid out again when the view is resized; while the view is
        hidden (no width yet) the layout waits for the first resize.
        """
        self._texts, self._rendered = (), None
        self._renderable = renderable if fit_width else None
        if not fit_width or self.size.width:
            self._lay_out(renderable, fit_width)
        self.scroll_to(0, 0, animate=False)

    def show_segments(self, lines: list[list[Segment]]) -> None:
        """Show lines already laid out (by :func:`lay_out` in a worker thread)."""
        self._texts, self._renderable = (), None
        self._rendered = lines
        self._reset(max((Segment.get_line_length(line) for line in lines), default=0), len(lines))
        self.scroll_to(0, 0, animate=False)

    @property
    def fit_width(self) -> int:
        """The width a width-fitted renderable is laid out at (0 before the view has a size).

        With :attr:`reserve_scrollbar` it leaves the scrollbar's columns even before the scrollbar
        shows: it appears without a resize once tall content is in, and a layout that depended on
        whether it shows yet would differ with when the layout ran.
        """
        if not self.reserve_scrollbar:
            return self.scrollable_content_region.width
        width = self.content_region.width
        return max(width - self.styles.scrollbar_size_vertical, 1) if width > 0 else 0

    def _lay_out(self, renderable: RenderableType, fit_width: bool) -> None:
        width = max(self.fit_width, 20) if fit_width else None
        self._rendered = lay_out(self.app.console, renderable, width)
        self._reset(max((Segment.get_line_length(line) for line in self._rendered), default=0), len(self._rendered))

    def _reset(self, width: int, height: int) -> None:
        self._strips.clear()
        self.virtual_size = Size(width, height)
        self.refresh()

    def on_resize(self, event: Resize) -> None:
        """Lay a width-fitted renderable out again at the new width."""
        if self._renderable is not None and event.size.width:
            self._lay_out(self._renderable, fit_width=True)

    def notify_style_update(self) -> None:
        """The theme or the CSS changed: drop the strips drawn with the old base style."""
        super().notify_style_update()
        self._strips.clear()

    def render_line(self, y: int) -> Strip:
        """The strip for screen row ``y``: the line under it, cropped to the visible columns."""
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        style = self.rich_style
        if index >= self.line_count:
            return Strip.blank(width, style)
        cached = self._strips.get(index)
        if cached is None:
            strip = self._strip(index)
            cached = self._strips[index] = (strip.apply_style(style), content_width(strip))
        strip, content = cached
        shown = min(self.scrollable_content_region.width or width, width)  # not under the scrollbar
        visible = strip.crop_extend(scroll_x, scroll_x + shown, style)
        cut_left, cut_right = scroll_x > 0 and content > 0, content > scroll_x + shown
        if (cut_left or cut_right) and shown > 2:
            visible = _mark_cuts(visible, shown, cut_left, cut_right, style)
        return visible.extend_cell_length(width, style).apply_offsets(scroll_x, index)

    def _strip(self, index: int) -> Strip:
        if self._rendered is not None:
            return Strip(self._rendered[index])
        text = self._texts[index]
        return Strip(list(text.render(self.app.console, end="")), text.cell_len)


def content_width(strip: Strip) -> int:
    """Cells up to the last one that shows something (trailing plain spaces do not count)."""
    width = strip.cell_length
    for segment in reversed(list(strip)):
        text = segment.text
        stripped = text.rstrip(" ")
        if stripped or (segment.style is not None and segment.style.bgcolor is not None):
            return width - (len(text) - len(stripped)) if stripped else width
        width -= len(text)
    return 0


def _mark_cuts(visible: Strip, width: int, left: bool, right: bool, style: Style) -> Strip:
    """``visible`` with a dim ``…`` in the first and/or last column where the line goes on."""
    mark = Strip([Segment("…", style + Style(dim=True, bold=True))], 1)
    parts = []
    if left:
        parts.append(mark)
    parts.append(visible.crop(1 if left else 0, width - 1 if right else width))
    if right:
        parts.append(mark)
    return Strip.join(parts)


def lay_out(console: Console, renderable: RenderableType, width: int | None = None) -> list[list[Segment]]:
    """``renderable`` as lines of segments, ``width`` wide or at its natural width.

    Pure rendering: a worker thread may call it with a console of its own (:func:`worker_console`).
    """
    options = console.options
    if width is None:
        width = max(Measurement.get(console, options.update_width(100_000), renderable).maximum, 1)
    return console.render_lines(renderable, options.update_width(width), pad=False)


def whole_cells_width(console: Console, table: Table) -> int:
    """The narrowest ``table`` lays out at with every cell of a column that does not wrap whole:
    those columns at their widest cell, each that wraps at its ``min_width`` (1 without one).
    Rich squeezes a table narrower than that by cutting every column (``deferrabl``,
    ``runs/cal``, a folding column gone); laid out this wide, the view scrolls sideways to the
    rest instead."""
    options = console.options.update_width(100_000)
    natural = Measurement.get(console, options, table).maximum
    folds = 0
    for column in table.columns:
        if column.no_wrap:
            continue
        widest = max(Measurement.get(console, options, cell).maximum for cell in (column.header, *column.cells))
        folds += max(widest - (column.min_width or 1), 0)
    return natural - folds


def worker_console() -> Console:
    """A console for laying out off the UI thread: the segments keep their styles, nothing is printed."""
    import io

    return Console(file=io.StringIO(), width=100_000, force_terminal=True, color_system="truecolor",
                   legacy_windows=False, theme=THEME)


def offer_focus(body: Widget, *, unless_focused: bool = False) -> None:
    """Focus ``body`` after the next refresh, so the arrow keys (and ``s`` in the diff) work at once.

    Never while the user is typing in an input or when ``body`` is not on screen; with
    ``unless_focused``, only if nothing has the focus (a finished run must not pull the focus
    out of the sidebar).
    """

    def focus() -> None:
        focused = body.app.focused
        if not body.is_on_screen or isinstance(focused, Input) or (unless_focused and focused is not None):
            return
        body.focus()

    body.call_after_refresh(focus)
