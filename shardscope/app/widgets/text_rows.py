"""A few rows of rich text that change on every key press: a cheaper ``Static`` for them.

``n`` rewrites each plan's header and details line. A ``Static`` turns its content into a
Textual visual and lays it out again on every update (about a millisecond a row here, a fifth
of what ``n`` costs to paint); these rows are only ever one line each, cut with an ellipsis,
so they render straight from the ``Text`` and keep the strips until the next update. An
update that changes some lines only (``n`` changes the last line of a header) repaints those.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


class TextRows(Widget):
    """One row per line of a ``Text``, each cut with ``…`` to the width; the height is the CSS's.

    With ``wrap``, long lines wrap instead, and the last row that fits ends with ``…`` if more
    was left out.
    """

    DEFAULT_CSS = """
    TextRows { height: auto; }
    """

    def __init__(self, text: Text | str = "", *, wrap: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.wrap = wrap
        self._text = text if isinstance(text, Text) else Text(text)
        self._lines: list[Text] | None = None  # the text's rows at ``_width`` (before the cut)
        self._width = -1
        self._style: Style | None = None  # the widget's style the rows were drawn with
        self._strips: dict[int, Strip] = {}  # row -> its strip, at ``_width`` in ``_style``

    @property
    def content(self) -> Text:
        """The text shown."""
        return self._text

    def render(self) -> Text:
        """The text, as ``Static.render`` gives it (the rows themselves come from :meth:`render_line`)."""
        return self._text

    def update(self, text: Text | str, *, layout: bool = False) -> None:
        """Show ``text``; without ``layout`` the height stays (set it in the CSS).

        When the text has as many lines as before and fits, only the rows whose line changed
        are drawn again (a ``Text`` compares by its characters and styles).
        """
        text = text if isinstance(text, Text) else Text(text)
        changed = None if layout else self._changed_rows(text)
        self._text = text
        if changed is None:
            self._lines, self._strips = None, {}
            self.refresh(layout=layout)
            return
        self._lines = list(text.split("\n", allow_blank=True))
        width = self.size.width
        for y in changed:
            self._strips.pop(y, None)
        if changed:
            self.refresh(*(Region(0, y, width, 1) for y in changed))

    def _changed_rows(self, text: Text) -> list[int] | None:
        """The rows ``text`` changes, or None when every row must be drawn again."""
        old = self._lines
        if self.wrap or old is None or not self._strips:
            return None
        new = text.split("\n", allow_blank=True)
        height = self.size.height
        if len(new) != len(old) or (height and len(new) > height):
            return None  # rows come or go, or the last row's "…" may move
        return [y for y, (before, after) in enumerate(zip(old, new)) if before != after]

    def notify_style_update(self) -> None:
        """New styles (a theme): the rows are drawn again in them."""
        self._strips = {}
        super().notify_style_update()

    def get_content_height(self, container, viewport, width: int) -> int:
        """One row per line (per wrapped line with ``wrap``)."""
        if self.wrap:
            return len(self._text.wrap(self.app.console, max(width, 1)))
        return len(self._text.split("\n", allow_blank=True))

    def render_line(self, y: int) -> Strip:
        """Row ``y``: its line of the text, cut with an ellipsis and padded to the width."""
        width = self.size.width
        if width != self._width or self._lines is None:
            self._width, self._strips = width, {}
            self._lines = self._rows_at(width)
        strip = self._strips.get(y)
        if strip is None:
            if not self._strips or self._style is None:  # the first row drawn since the text, width or styles changed
                self._style = self.rich_style
            style = self._style
            if y < len(self._lines):
                line = self._lines[y].copy()
                line.truncate(width, overflow="ellipsis")
                segments = list(line.render(self.app.console, end=""))
                strip = Strip(segments, line.cell_len).apply_style(style).extend_cell_length(width, style)
            else:
                strip = Strip.blank(width, style)
            self._strips[y] = strip
        return strip

    def _rows_at(self, width: int) -> list[Text]:
        """The text's rows at ``width``: its lines, or its wrapped lines ending with ``…`` if cut."""
        lines = list(self._text.wrap(self.app.console, width) if self.wrap else self._text.split("\n", allow_blank=True))
        height = self.size.height
        if height and len(lines) > height:  # what does not fit: say so at the end of the last row
            lines = lines[:height]
            lines[-1].append("…")
        return lines
