"""The footer: Textual's, with ``f2 Sidebar``, ``? Help`` and ``q Quit`` kept at the right end.

Textual's footer lists the keys left to right and cuts what does not fit, so at 80 columns
the keys that bring back the folded sidebar, say how to get help and how to leave were the
first to go. Here they sit in a group docked right with the palette's ``^p``, and a narrow
terminal cuts the other keys first (all of them are in the help and the palette).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.widgets import Footer

from shardscope.app.textual_adapter import FooterKey, drop_closed_watchers  # FooterKey: not in textual.widgets

PINNED_ACTIONS = ("toggle_sidebar", "help", "quit")
"""The actions whose keys the footer never cuts."""


class KeysFooter(Footer):
    """A :class:`~textual.widgets.Footer` whose sidebar, help, quit and palette keys stay on screen."""

    DEFAULT_CSS = """
    KeysFooter #footer-pinned { dock: right; width: auto; height: 1; }
    KeysFooter #footer-pinned FooterKey.-command-palette { dock: none; }
    """

    def compose(self) -> ComposeResult:
        """Textual's keys, the pinned ones moved into one right-docked group (a second docked key
        would cover the first: docks on one edge do not stack).

        Each change of focus recomposes the footer: the keys it replaced are forgotten
        (``drop_closed_watchers``), else each stays bound to the footer's ``compact``, alive."""
        drop_closed_watchers(self)
        pinned = []
        for widget in super().compose():
            if isinstance(widget, FooterKey) and (widget.action in PINNED_ACTIONS or widget.has_class("-command-palette")):
                pinned.append(widget)
            else:
                yield widget
        if pinned:
            with HorizontalGroup(id="footer-pinned"):
                yield from pinned
