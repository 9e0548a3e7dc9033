"""The key table, made from the bindings: the help screen shows it and the README carries it.

The bindings are the one place a key is defined; :func:`key_rows` turns them into rows (the
five tab keys into one ``1``-``5`` row), and a test checks the README's table is
:func:`markdown_table` of the same rows.
"""

from __future__ import annotations

from typing import Iterable

from textual.binding import Binding

PALETTE_ROW = ("`ctrl+p`", "Open the command palette: every action, searchable")
"""Textual's own key for the command palette, which offers every binding's action."""

DIFF_BINDINGS = [
    Binding("s", "toggle_layout", "Side by side", id="diff.toggle_layout",
            tooltip="In the Diff tab: switch between the unified and the side-by-side layout"),
]
"""The Diff tab's own keys (here, so the help lists them without importing the tab's view)."""

SWEEP_BINDINGS = [
    Binding("s", "sweep", "Run sweep", id="sweep",
            tooltip="In the Sweep tab: compile and time every plan at every chunk size of the current settings"),
]
"""The Sweep tab's own keys (here for the same reason)."""


def key_label(binding: Binding) -> str:
    """What the key is called on screen: ``?`` rather than ``question_mark``."""
    return binding.key_display or binding.key


def key_rows(bindings: Iterable[Binding]) -> list[tuple[str, str]]:
    """``(keys, what they do)`` per binding; the tab bindings (ids ``tab_*``) become one row."""
    rows: list[tuple[str, str]] = []
    tabs: list[Binding] = []
    for binding in bindings:
        if (binding.id or "").startswith("tab_"):
            if not tabs:
                rows.append(("", ""))  # the tabs' row, filled in below
            tabs.append(binding)
            continue
        rows.append((f"`{key_label(binding)}`", binding.tooltip or binding.description))
    if tabs:
        titles = ", ".join(b.description for b in tabs)
        at = rows.index(("", ""))
        rows[at] = (f"`{key_label(tabs[0])}`-`{key_label(tabs[-1])}`", f"Show a tab: {titles}")
    return rows


def help_rows(app_bindings: list[Binding]) -> list[tuple[str, str]]:
    """Every key the help and the README list: the app's, the Diff tab's after the tab keys, ctrl+p."""
    after_tabs = max((k + 1 for k, b in enumerate(app_bindings) if (b.id or "").startswith("tab_")), default=0)
    ordered = [*app_bindings[:after_tabs], *DIFF_BINDINGS, *SWEEP_BINDINGS, *app_bindings[after_tabs:]]
    rows = key_rows(ordered)
    keys = [key for key, _ in rows]
    rows.insert(keys.index("`?`") + 1 if "`?`" in keys else len(rows), PALETTE_ROW)  # after help
    return rows


def _code_placeholders(text: str) -> str:
    """``<function>-<mesh>dev.diff`` in backticks, so Markdown shows it rather than taking it for HTML."""
    import re

    return re.sub(r"(\S*<[^>\s]+>\S*)", r"`\1`", text)


def markdown_table(rows: list[tuple[str, str]]) -> str:
    """The rows as a Markdown table with a ``key | action`` header."""
    lines = ["| key | action |", "| --- | --- |"]
    lines += [f"| {keys} | {_code_placeholders(action)} |" for keys, action in rows]
    return "\n".join(lines)
