"""Which plans the Plans tab has room for: every one, or the two compared.

A tree's line leads with its badge and the equation's name (`` x2/call  psum_invariant_0[s]``,
29 columns, after 6 of guides at the chunk loop's depth). Three plans beside the sidebar at 120
columns leave each tree 30, and cut every collective's name; two of them leave forty-five.
Under :data:`MIN_COLUMN` columns a plan, the tab shows the two compared (``B`` and ``C``, which
``b`` and ``c`` pick) and says which it left out.
"""

from __future__ import annotations

from rich.text import Text

MIN_COLUMN = 36
"""The fewest columns a plan's tree is given before the plans not compared are left out: a
collective's badge and name whole at the chunk loop's depth, with the column's border."""


def shown_plans(names: tuple[str, ...], compared: tuple[str, str], width: int) -> tuple[str, ...]:
    """The plans of ``names`` (in order) that get a column at ``width``: all when each has
    :data:`MIN_COLUMN`, else the compared ones (a lone program: itself)."""
    if not names or width >= MIN_COLUMN * len(names):
        return names
    kept = tuple(name for name in names if name in compared)
    return kept if kept else names[:2]


def left_out_note(names: tuple[str, ...], shown: tuple[str, ...]) -> Text:
    """``reduced: no room at this width (b/c compare it; f2 hides the sidebar)`` (empty when none)."""
    hidden = [name for name in names if name not in shown]
    if not hidden:
        return Text()
    return Text.assemble((", ".join(hidden), "bold"),
                         f": no room at this width (b / c compare {'it' if len(hidden) == 1 else 'them'}; "
                         "f2 hides the sidebar)", style="dim")
