"""The footer: Textual's, with ``f2 Sidebar``, ``? Help`` and ``q Quit`` kept at the right end.

Textual's footer lists the keys left to right and cuts what does not fit, so at 80 columns
the keys that bring back the folded sidebar, say how to get help and how to leave were the
first to go. Here they sit in a group docked right with the palette's ``^p``, and a narrow
terminal cuts the other keys first (all of them are in the help and the palette).
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Footer

from shardscope.app.base.textual_adapter import FooterKey, drop_closed_watchers  # FooterKey: not in textual.widgets

PINNED_ACTIONS = ("toggle_sidebar", "help", "quit", "app.quit")
"""The actions whose keys the footer never cuts (``app.quit``: a field's ``^c``, where ``q`` types)."""


class KeysFooter(Footer):
    """A :class:`~textual.widgets.Footer` whose sidebar, help, quit and palette keys stay on screen."""

    DEFAULT_CSS = """
    KeysFooter #footer-pinned { dock: right; width: auto; height: 1; }
    KeysFooter #footer-pinned FooterKey.-command-palette { dock: none; }
    KeysFooter.-compact FooterLabel { margin: 0 1 0 0; }
    """

    NARROW = 100
    """Under this many columns the keys drop their padding (Textual's compact footer): at 80, the
    Diff tab's own key pushed the Compare group under the pinned keys."""

    _shown: Hashable = None
    """What the keys on screen were composed from (:meth:`_keys_to_show`)."""

    def on_resize(self, event: Resize) -> None:
        """Compact under :attr:`NARROW` columns."""
        self.compact = event.size.width < self.NARROW

    def _keys_to_show(self, screen: Screen) -> Hashable:
        """Everything of the screen's bindings that :meth:`compose` draws: the shown bindings' key,
        label, action, group, whether enabled and their tooltip, and the palette's key."""
        return tuple(
            (binding.key, binding.key_display, binding.description, binding.action, binding.group, enabled, tooltip)
            for _node, binding, enabled, tooltip in screen.active_bindings.values()
            if binding.show or binding.key == self.app.COMMAND_PALETTE_BINDING
        )

    def bindings_changed(self, screen: Screen) -> None:
        """Recompose only when the keys to show changed.

        Textual's footer recomposes whenever the screen's bindings are updated: on every change of
        focus, and on every run's start and end. Most change nothing the footer shows, and each
        recompose mounts some twenty widgets and lays the screen out again (a quarter of the CPU
        the app spent on a run and a pass over the tabs, measured here)."""
        if self._shown is not None and self.is_attached and screen is self.screen and screen.app.app_focus:
            if self._keys_to_show(screen) == self._shown:
                self._bindings_ready = True
                return
        super().bindings_changed(screen)

    def compose(self) -> ComposeResult:
        """Textual's keys, the pinned ones moved into one right-docked group (a second docked key
        would cover the first: docks on one edge do not stack).

        Each change of the keys shown recomposes the footer (:meth:`bindings_changed`): the keys
        it replaced are forgotten (``drop_closed_watchers``), else each stays bound to the
        footer's ``compact``, alive. Each key is composed already as compact as it will show
        (:func:`_compact_from_the_start`)."""
        drop_closed_watchers(self)
        if self._bindings_ready:
            self._shown = self._keys_to_show(self.screen)
        pinned = []
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                _compact_from_the_start(widget, self.compact)
            if isinstance(widget, FooterKey) and (widget.action in PINNED_ACTIONS or widget.has_class("-command-palette")):
                pinned.append(widget)
            else:
                yield widget
        if pinned:
            with HorizontalGroup(id="footer-pinned"):
                yield from pinned


def _compact_from_the_start(key: FooterKey, footer_compact: bool) -> None:
    """Give a key just composed the ``compact`` it will have once mounted, and its class.

    Textual's ``FooterKey.compact`` starts True: on mount its watcher added ``-compact`` (the key
    restyled), then the footer's ``data_bind`` set it to the footer's value, False on a wide
    terminal (restyled again). Every recompose of the footer (each change of the tab shown) did
    that for twenty keys: 11% of the UI thread's time over a run and a pass over the tabs. Set
    before mount, neither happens, and the key ends as it did: compact like the footer, the
    palette's key (not bound to the footer) compact always."""
    compact = True if key.has_class("-command-palette") else footer_compact
    key.set_reactive(FooterKey.compact, compact)
    key.set_class(compact, "-compact", update=False)
