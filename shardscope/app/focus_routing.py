"""Where the focus goes: Tab reaches every field, the folded sidebar's too, and the screen says
which key runs the settings from where the focus is.

A part of :class:`~shardscope.app.app.ShardscopeApp` (its base class). Under 100 columns the
sidebar folds away (``f2`` brings it back), and Tab went round the tab's widgets only: its
fields, the Target among them, could not be reached by keyboard, and letters typed meant for
them ran the app's keys (``e`` exported a diff). Now Tab past the tab's last widget (or
Shift+Tab before its first) opens the folded sidebar and enters it; it folds again once the focus
leaves it. In a field ``r`` types: the stale banner then says Enter, which runs from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import App
from textual.widget import Widget
from textual.widgets import Input

from shardscope.app.widgets.fields import SettingField
from shardscope.app.widgets.sidebar import Sidebar


class FocusRouting(App[int]):
    """The app's focus moves: Tab into a folded sidebar, and the run key for where the focus is."""

    if TYPE_CHECKING:  # what the app provides (ShardscopeApp)
        _sidebar_opened_for_focus: bool
        analysis: object

        @property
        def sidebar_shown(self) -> bool: ...

        def _fit_sidebar(self, width: int | None = None) -> None: ...

        def _mark_stale(self) -> None: ...

    def action_focus_next(self) -> None:
        """Focus the next widget; past the tab's last one, the folded sidebar's first field."""
        self._move_focus(forward=True)

    def action_focus_previous(self) -> None:
        """Focus the previous widget; before the tab's first one, the folded sidebar's last field."""
        self._move_focus(forward=False)

    def _move_focus(self, forward: bool) -> None:
        chain = self.screen.focus_chain
        end = chain[-1] if forward else chain[0] if chain else None
        if not self.sidebar_shown and self.focused is not None and self.focused is end:
            self._sidebar_opened_for_focus = True
            self._fit_sidebar()
            self.call_after_refresh(self._enter_sidebar, forward)  # once laid out: its fields join the chain
            return
        if forward:
            self.screen.focus_next()
        else:
            self.screen.focus_previous()

    def _enter_sidebar(self, forward: bool) -> None:
        """Focus the sidebar's first field (``forward``) or its last (the Target field)."""
        sidebar = self.query_one(Sidebar)
        fields = [w for w in self.screen.focus_chain if sidebar in w.ancestors]
        if fields:
            field = fields[0] if forward else fields[-1]
            self.set_focus(field, scroll_visible=False)
            self.call_after_refresh(field.scroll_visible, animate=False)  # the sidebar laid out: scroll it there

    def _focus_moved(self, focused: Widget | None) -> None:
        """Fold the sidebar again once the focus left it (when Tab opened it), and say the run key
        that works where the focus is now."""
        if self._sidebar_opened_for_focus and (focused is None or self.query_one(Sidebar) not in focused.ancestors):
            self._sidebar_opened_for_focus = False
            self._fit_sidebar()
        if self.analysis is not None:
            self._mark_stale()

    @property
    def run_key(self) -> str:
        """The key that runs the sidebar's settings from where the focus is: ``r``, or Enter in a
        sidebar field (``r`` types there), or Escape then ``r`` in another field."""
        if isinstance(self.focused, SettingField):
            return "Enter"
        return "Escape, then r" if isinstance(self.focused, Input) else "r"
