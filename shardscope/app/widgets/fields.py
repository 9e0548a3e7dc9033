"""The explorer's text fields: inputs whose footer says which keys work while typing in them.

In an input every letter types, so ``r`` (run), ``q`` (quit) and the other keys of the footer do
not work there and Textual leaves them out of it: a field names what does instead, Enter (what
it does), Tab (the next field), Escape (out of the field, where the letters work again) and
Ctrl+C (quit: the app's key, shown once ``q`` is not).
"""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input


class Field(Input):
    """An :class:`~textual.widgets.Input` that shows Tab and Escape in the footer."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "app.focus_next", "Next field", id="field.next",
                tooltip="In a field: move to the next one (a folded sidebar opens while it has the focus)"),
        Binding("escape", "app.escape", "Leave field", id="field.leave",
                tooltip="In a field: stop typing there; the keys of the footer (r, q, ...) work again"),
        # priority, as the app's own ctrl+c (which runs first and quits): so the footer shows this one
        Binding("ctrl+c", "app.quit", "Quit", key_display="^c", priority=True, id="field.quit",
                tooltip="Quit shardscope, even while typing in a field"),
    ]


class SettingField(Field):
    """A field of the sidebar's settings: Enter runs them (``r`` would type)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "submit", "Run", id="field.run",
                tooltip="In a sidebar field: analyse the sidebar's settings (r types there)"),
    ]


class BudgetField(Field):
    """The Sweep tab's memory budget: Enter sweeps (or picks again within a sweep shown)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "submit", "Sweep", id="field.sweep",
                tooltip="In the budget field: sweep, or pick again within the sweep shown"),
    ]
