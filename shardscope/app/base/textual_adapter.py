"""The private parts of Textual that shardscope relies on, named in one place.

textual is pinned exactly (pyproject.toml) because of these. Each stays because no public API
does the job (or none does it within the key-press targets of BENCHMARKS.md); everything else
the app needs from Textual is public. ``tests/app/test_textual_adapter.py`` checks each one by
name and signature (:data:`PRIVATES`), so a Textual upgrade that changes one fails there, naming
it, instead of somewhere in a drawing or a click.

- :func:`finish_line` calls ``Widget._styles_cache.render_line``: what Textual adds to a line of
  content (the background and its blend under the widget, tint, hatch, the line filters). The
  plan trees keep finished lines by node across key presses, which Textual's own styles cache
  cannot (it keeps them by row, and drops them when the tree scrolls).
- ``Tree._invalidate`` is overridden by :class:`~shardscope.app.views.plans.plan_tree.PlanTree`:
  every node that opens, closes or is added calls it, and Textual's lays out the whole screen
  each time (most of what ``n`` cost at tens of thousands of equations).
- ``App._handle_exception`` is overridden by the app: an error in a widget that the quit is
  tearing down is not the user's problem (no public hook sees an unhandled error).
- :func:`release_removed_widgets` clears ``StylesCache.get_inner_outer``, an ``lru_cache`` on a
  method: its keys hold the styles cache of up to 1,024 widgets alive, removed or not, and with
  each every line that widget drew (textual#6665, open). Each run replaces the plan trees and
  the views' widgets, so an app kept them all after a few runs, and every full pass of the
  collector walked them.
- :func:`drop_closed_watchers` prunes the ``(watcher, callback)`` pairs ``DOMNode.watch`` and
  ``data_bind`` leave on the watched node (its ``__watchers``), which Textual prunes only when
  the watched value changes (textual#6666, open): Textual's footer binds each key it composes to
  its ``compact``, which never changes, and recomposes its keys on every change of focus, so
  every key it ever showed stayed alive (1,983 after eight runs and a pass over the tabs).
  With both: the demo's app after those eight runs holds 317,000 objects instead of 579,000, and
  the full pass that starts each run (the UI waits for it) takes 0.22 s instead of 0.41 s.
- :data:`FooterKey` (``textual.widgets._footer``, not re-exported by ``textual.widgets``): the
  footer moves the keys that must never be cut into a group docked right.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rich.terminal_theme import TerminalTheme
from textual._styles_cache import StylesCache
from textual.color import Color
from textual.css.styles import StylesBase
from textual.dom import DOMNode
from textual.geometry import Size, Spacing
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets._footer import FooterKey

__all__ = ["FooterKey", "LineFinish", "PRIVATES", "Private", "finish_line", "line_finish", "drop_closed_watchers",
           "own_bindings", "release_removed_widgets"]


@dataclass(frozen=True)
class Private:
    """One private name of Textual that shardscope uses: where it lives and how it is called."""

    owner: str  # "module:Class" (or "module" for a module-level name)
    name: str
    parameters: tuple[str, ...] | None  # the signature's parameter names; None: not a callable
    why: str


PRIVATES = (
    Private("textual.widget:Widget", "_styles_cache", None,
            "an instance attribute (textual._styles_cache.StylesCache): finish_line"),
    Private("textual._styles_cache:StylesCache", "render_line",
            ("self", "styles", "y", "size", "content_size", "padding", "base_background", "background",
             "render_content_line", "border_title", "border_subtitle", "opacity", "ansi_theme", "native_ansi"),
            "finish_line passes its 13 arguments by position"),
    Private("textual._styles_cache:StylesCache", "get_inner_outer", ("cls", "base_background", "background"),
            "an lru_cache whose keys hold each widget's styles cache: release_removed_widgets clears it"),
    Private("textual.reactive", "_watch", ("node", "obj", "attribute_name", "callback", "init"),
            "watch and data_bind keep (watcher, callback) in the watched node's '__watchers': drop_closed_watchers"),
    Private("textual.widget:Widget", "_closing", None,
            "set when a widget closes (removed); Textual's own pruning of '__watchers' reads it too"),
    Private("textual.widgets._tree:Tree", "_invalidate", ("self",),
            "PlanTree overrides it: opening nodes without a layout of the screen"),
    Private("textual.app:App", "_handle_exception", ("self", "error"),
            "ShardscopeApp overrides it: errors while quitting are logged, not shown"),
    Private("textual.widgets._footer", "FooterKey", None,
            "the footer's key widget: KeysFooter moves some into a group docked right"),
    Private("textual.widget:Widget", "_bindings", None,
            "an instance attribute (textual.binding.BindingsMap): the app's footer leaves out, under 100 "
            "columns, the keys it has no room for by editing its bindings (own_bindings)"),
    Private("textual.widgets._footer:FooterKey", "__init__",
            ("self", "key", "key_display", "description", "action", "disabled", "tooltip", "classes"),
            "KeysFooter reads the action of each key Footer.compose yields (its 'action' attribute)"),
)
"""Every private of Textual used, checked by ``tests/app/test_textual_adapter.py``."""


@dataclass(frozen=True)
class LineFinish:
    """What finishing a widget's line of content takes: ``StylesCache.render_line``'s arguments
    but the line itself (the same for every line of a render pass), and the line filters."""

    styles: StylesBase
    size: Size
    content_size: Size
    padding: Spacing
    base_background: Color
    background: Color
    opacity: float
    ansi_theme: TerminalTheme
    native_ansi: bool
    filters: tuple[Any, ...]
    effects: tuple[Any, ...]  # tint, text opacity and hatch: what a finished line depends on besides the above

    def key(self) -> tuple:
        """What lines finished with this depend on (for keeping them): every field but the styles object."""
        return (self.size, self.content_size, self.padding, self.base_background, self.background,
                self.opacity, self.ansi_theme, self.native_ansi, self.filters, self.effects)


def line_finish(widget: Widget) -> LineFinish | None:
    """How ``widget``'s lines are finished now; None when it has a border, padding or an outline
    (a finished line then depends on its row: Textual's own styles cache must finish it)."""
    styles = widget.styles
    if any(widget.gutter) or any(edge for edge, _ in styles.outline):
        return None
    base_background, background = widget.background_colors
    app = widget.app
    return LineFinish(styles, widget.size, widget.content_region.size, styles.padding, base_background, background,
                      widget.opacity, app.ansi_theme, app.native_ansi_color, tuple(widget.get_line_filters()),
                      (styles.tint, styles.text_opacity, styles.hatch if styles.has_rule("hatch") else None))


def finish_line(widget: Widget, content: Strip, finish: LineFinish) -> Strip:
    """``content`` (one line, no border nor padding around it) as Textual's compositor takes it:
    the widget's background under it, tint and filters applied, as ``Widget.render_lines`` does."""
    render_line: Callable[..., Strip] = widget._styles_cache.render_line
    strip = render_line(finish.styles, 0, finish.size, finish.content_size, finish.padding, finish.base_background,
                        finish.background, lambda _: content, None, None, finish.opacity, finish.ansi_theme,
                        finish.native_ansi)
    for line_filter in finish.filters:
        strip = strip.apply_filter(line_filter, finish.background)
    return strip


def release_removed_widgets() -> None:
    """Let the collector free the widgets that are gone, with every line they drew.

    ``StylesCache.get_inner_outer`` caches two styles per pair of colours with ``lru_cache`` on the
    method, so each key holds the widget's styles cache (``self``), and that cache holds the
    widget's rendered lines: up to 1,024 removed widgets stay reachable (textual#6665). Emptying
    it costs a few dictionary entries rebuilt on the next paint.
    """
    StylesCache.get_inner_outer.cache_clear()


def drop_closed_watchers(node: DOMNode) -> None:
    """Forget the watchers that widgets now closed (removed) left on ``node``.

    ``watch`` and ``data_bind`` keep each ``(watcher, callback)`` in the watched node's
    ``__watchers``, and Textual drops those of closed watchers only when the watched value
    changes (textual#6666): until then each one keeps its widget alive, with all it drew.
    """
    watchers: dict[str, list[tuple[Any, Any]]] = getattr(node, "__watchers", {})
    for entries in watchers.values():
        entries[:] = [(watcher, callback) for watcher, callback in entries if not watcher._closing]


def own_bindings(node: DOMNode) -> dict:
    """``node``'s own bindings by key (``DOMNode._bindings.key_to_bindings``), which the footer shows."""
    return node._bindings.key_to_bindings
