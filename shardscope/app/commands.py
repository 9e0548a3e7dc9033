"""The command palette's shardscope commands: one per binding of the app, so the palette offers every action.

A tab's own key (``s``) opens its tab and acts there, from whatever tab is shown. ``q`` is left
out: Textual's own commands offer Quit.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from textual.app import App, SystemCommand
from textual.binding import Binding

from shardscope.app.base.bindings import TAB_ACTIONS

def binding_commands(app: App[Any], in_tab: Callable[..., Any]) -> Iterator[SystemCommand]:
    """A palette command for each of ``app``'s bindings, titled by its description, explained by its
    tooltip; a tab's action runs through ``in_tab`` (the app's ``action_in_tab``)."""
    for binding in app.BINDINGS:
        if not isinstance(binding, Binding) or binding.action == "quit":  # Textual offers its own Quit
            continue
        tab_action = TAB_ACTIONS.get(binding.action)
        if tab_action is not None:
            callback = lambda tab_action=tab_action: app.call_later(in_tab, *tab_action)
        else:  # call_later: run_action is a coroutine, and the palette wants a plain callable
            callback = lambda action=binding.action: app.call_later(app.run_action, action)
        yield SystemCommand(binding.description, binding.tooltip, callback)
