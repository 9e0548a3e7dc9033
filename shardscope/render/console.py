"""The console the commands print their text to: a terminal's, or one for a pipe or a file.

In a terminal, rich lays every table out to the terminal's width, as usual. Piped or
redirected, output is read by grep, diff, an editor or a CI log, and a value cut to fit 80
columns (``params['l2'][…``) or a URL folded over three lines is lost there. So when stdout is
not a terminal, tables are printed at their natural width (every value whole: a long row is
one long line, wrapped by whoever shows it) and prose is wrapped at the width rich would have
used (``COLUMNS``, else 80) between words only: a word longer than that, such as a URL, stays
whole.
"""

from __future__ import annotations

import textwrap
from typing import Any

from rich.console import Console, Group
from rich.protocol import rich_cast
from rich.table import Table

PIPE_WIDTH = 100_000
"""The width tables are laid out in when piped: wider than any row, so none is cut."""


class PipeConsole(Console):
    """A :class:`~rich.console.Console` for output that is not a terminal (see the module)."""

    def __init__(self, wrap: int, **kwargs: Any) -> None:  # rich Console's keywords, passed on
        super().__init__(width=PIPE_WIDTH, **kwargs)
        self.wrap = wrap

    def print(self, *objects: Any, **kwargs: Any) -> None:  # rich's renderables and keywords, passed on
        """Tables at their natural width, prose wrapped at :attr:`wrap` between words."""
        parts = [rich_cast(obj) for obj in objects]
        if len(parts) == 1 and isinstance(parts[0], Group):
            for part in parts[0].renderables:
                self.print(part, **kwargs)
            return
        if any(isinstance(part, Table) for part in parts):
            super().print(*parts, **kwargs)
            return
        with self.capture() as captured:  # one line per paragraph: PIPE_WIDTH wraps nothing
            super().print(*parts, **kwargs)
        text = "\n".join(wrap_words(line, self.wrap) for line in captured.get().split("\n"))
        super().print(text, end="", markup=False, emoji=False, highlight=False, no_wrap=True,
                      overflow="ignore", crop=False)


def wrap_words(line: str, width: int) -> str:
    """``line`` wrapped at ``width`` between words only (a URL or a path longer than the width
    stays whole on a line of its own), continued at its own indentation."""
    indent = line[: len(line) - len(line.lstrip(" "))]
    if len(line) <= width:
        return line
    return textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False, drop_whitespace=True)


def stdout_console() -> Console:
    """The console for a command's text on stdout: the terminal's, or a :class:`PipeConsole`."""
    terminal = Console()
    if terminal.is_terminal:
        return terminal
    return PipeConsole(wrap=terminal.width)



def print_verbatim(console: Console, text: str) -> None:
    """``text`` as it is, never wrapped nor cropped by rich (a patch applies as printed): in a
    terminal the terminal folds a long line for the eye, piped it stays one line."""
    Console.print(console, text, markup=False, emoji=False, highlight=False, soft_wrap=True)
