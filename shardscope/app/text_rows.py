"""A few rows of rich text that change on every key press: a cheaper ``Static`` for them.

``n`` rewrites each plan's header and details line. A ``Static`` turns its content into a
Textual visual and lays it out again on every update (about a millisecond a row here, a fifth
of what ``n`` costs to paint); these rows are only ever one line each, cut with an ellipsis,
so they render straight from the ``Text`` and keep the strips until the next update.
"""

from __future__ import annotations

from rich.text import Text
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
        self._strips: dict[int, list[Strip]] = {}  # width -> the rows at that width

    @property
    def content(self) -> Text:
        """The text shown."""
        return self._text

    def render(self) -> Text:
        """The text, as ``Static.render`` gives it (the rows themselves come from :meth:`render_line`)."""
        return self._text

    def update(self, text: Text | str, *, layout: bool = False) -> None:
        """Show ``text``; without ``layout`` the height stays (set it in the CSS)."""
        self._text = text if isinstance(text, Text) else Text(text)
        self._strips = {}
        self.refresh(layout=layout)

    def get_content_height(self, container, viewport, width: int) -> int:
        """One row per line (per wrapped line with ``wrap``)."""
        if self.wrap:
            return len(self._text.wrap(self.app.console, max(width, 1)))
        return len(self._text.split("\n", allow_blank=True))

    def render_line(self, y: int) -> Strip:
        """Row ``y``: its line of the text, cut with an ellipsis and padded to the width."""
        width = self.size.width
        rows = self._strips.get(width)
        if rows is None:
            style = self.rich_style
            rows = []
            lines = list(self._text.wrap(self.app.console, width) if self.wrap else self._text.split("\n", allow_blank=True))
            height = self.size.height
            if height and len(lines) > height:  # what does not fit: say so at the end of the last row
                lines = lines[:height]
                lines[-1].append("…")
            for line in lines:
                line.truncate(width, overflow="ellipsis")
                segments = list(line.render(self.app.console, end=""))
                rows.append(Strip(segments, line.cell_len).apply_style(style).extend_cell_length(width, style))
            self._strips = {width: rows}
        return rows[y] if y < len(rows) else Strip.blank(width, self.rich_style)
