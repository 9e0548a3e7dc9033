"""The one rich theme of named styles every rendering draws with (``verdict.deferrable``,
``check.failed``, ...): the styles are :data:`shardscope.verdict_kinds.THEME`'s, so a verdict
looks the same in the text, the explorer and a notebook, and no rendering keeps a style table.

Every console shardscope makes has the theme (``Console(theme=THEME)``); a renderable handed to a
console shardscope did not make (``rich.print(inspection)``, a notebook's) carries it with it
(:class:`Themed`): rich would otherwise draw a named style it does not know as plain text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.theme import Theme

from shardscope.verdict_kinds import THEME as STYLES

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

THEME = Theme(STYLES)
"""The named styles, as a rich theme."""


class Themed:
    """``renderable`` drawn with :data:`THEME` on whatever console renders it: the theme is pushed
    while its segments are made, and popped after."""

    def __init__(self, renderable: "RenderableType") -> None:
        self.renderable = renderable

    def __rich_console__(self, console: "Console", options: "ConsoleOptions") -> "RenderResult":
        console.push_theme(THEME)
        try:
            segments = list(console.render(self.renderable, options))
        finally:
            console.pop_theme()
        yield from segments
