"""The console the commands print their text to: a terminal's, or one for a pipe or a file.

In a terminal, rich lays every table out to the terminal's width, as usual. Piped or
redirected, output is read by grep, diff, an editor or a CI log, and a value cut to fit 80
columns (``params['l2'][…``) is lost there. So when stdout is not a terminal, nothing is cut:
a table is laid out at most :data:`CI_TABLE_WIDTH` columns wide (or the ``COLUMNS`` rich would
use, when wider), where a CI log shows it without a horizontal scroll: a row that fits stays one
line, a longer cell wraps inside its column between words, and a word longer than its column is
folded, never cut. Prose is wrapped at the width rich would have used (``COLUMNS``, else 80)
between words only: a word longer than that, such as a URL, stays whole. A reference table
whose rows are copied whole (the presets' sources and their URLs) keeps its natural width.
"""

from __future__ import annotations

import textwrap
from typing import Any

from rich.console import Console, Group
from rich.protocol import rich_cast
from rich.table import Table
from rich.text import Text

from shardscope.render.theme import THEME, Themed

PIPE_WIDTH = 100_000
"""The width prose is laid out in before it is wrapped between words, and a reference table's
(``rows_whole``): wider than any row, so none is cut."""

CI_TABLE_WIDTH = 120
"""The widest a piped table is laid out (unless ``COLUMNS`` is wider): what a CI log's page shows."""


class PipeConsole(Console):
    """A :class:`~rich.console.Console` for output that is not a terminal (see the module)."""

    def __init__(self, wrap: int, rows_whole: bool = False, **kwargs: Any) -> None:  # rich Console's keywords
        super().__init__(width=PIPE_WIDTH, theme=THEME, **kwargs)
        self.wrap = wrap
        self.table_width = PIPE_WIDTH if rows_whole else max(wrap, CI_TABLE_WIDTH)

    def print(self, *objects: Any, **kwargs: Any) -> None:  # rich's renderables and keywords, passed on
        """Tables at their natural width, prose wrapped at :attr:`wrap` between words."""
        parts = [rich_cast(obj) for obj in objects]
        if len(parts) == 1 and isinstance(parts[0], Themed):  # this console has the theme: laid out as itself
            self.print(parts[0].renderable, **kwargs)
            return
        if len(parts) == 1 and isinstance(parts[0], Group):
            for part in parts[0].renderables:
                self.print(part, **kwargs)
            return
        if any(isinstance(part, Table) for part in parts):
            for part in parts:
                if isinstance(part, Table):
                    _wrap_cells(part)
            kwargs.setdefault("width", self.table_width)
            super().print(*parts, **kwargs)
            return
        with self.capture() as captured:  # one line per paragraph: PIPE_WIDTH wraps nothing
            super().print(*parts, **kwargs)
        text = "\n".join(wrap_words(line, self.wrap) for line in captured.get().split("\n"))
        super().print(text, end="", markup=False, emoji=False, highlight=False, no_wrap=True,
                      overflow="ignore", crop=False)


def _wrap_cells(table: Table) -> None:
    """The table's long cells wrap between words when its rows are wider than the table may be:
    a column whose cells are all short (a name, a count) stays whole, and a column of long
    values or prose wraps (a column kept on one line in a terminal would be cropped there). A
    word longer than its column is folded onto the next line instead of cut with ``…``."""
    for column in table.columns:
        widest = max((cell_width(cell) for cell in column.cells), default=0)
        column.no_wrap = widest <= SHORT_CELL
        if column.overflow in ("ellipsis", "crop"):
            column.overflow = "fold"


SHORT_CELL = 20
"""The widest cell of a column a piped table keeps on one line: names (``all-reduce-start.12``),
counts, verdicts. Longer values and prose wrap inside their column."""


def cell_width(cell: object) -> int:
    """The columns ``cell`` takes on one line (its longest line; 0 for a renderable that is not text)."""
    plain = cell.plain if isinstance(cell, Text) else cell if isinstance(cell, str) else ""
    return max((len(line) for line in plain.splitlines()), default=0)


def wrap_words(line: str, width: int) -> str:
    """``line`` wrapped at ``width`` between words only (a URL or a path longer than the width
    stays whole on a line of its own), continued at its own indentation."""
    indent = line[: len(line) - len(line.lstrip(" "))]
    if len(line) <= width:
        return line
    return textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False, drop_whitespace=True)


def stdout_console(rows_whole: bool = False) -> Console:
    """The console for a command's text on stdout: the terminal's, or a :class:`PipeConsole`
    (``rows_whole``: its tables at their natural width, for a reference table whose rows are
    copied whole)."""
    terminal = Console(theme=THEME)
    if terminal.is_terminal:
        return terminal
    return PipeConsole(wrap=terminal.width, rows_whole=rows_whole)



def table_width(console: Console) -> int:
    """The columns a table printed on ``console`` may take: a pipe's :attr:`PipeConsole.table_width`,
    else the terminal's width."""
    return console.table_width if isinstance(console, PipeConsole) else console.width


def print_verbatim(console: Console, text: str) -> None:
    """``text`` as it is, never wrapped nor cropped by rich (a patch applies as printed): in a
    terminal the terminal folds a long line for the eye, piped it stays one line."""
    Console.print(console, text, markup=False, emoji=False, highlight=False, soft_wrap=True)
