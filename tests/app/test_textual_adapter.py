"""The parts of Textual shardscope builds on are still there, with the signatures it calls them by.

Every private of Textual the app uses is listed in ``shardscope.app.base.textual_adapter.PRIVATES``;
each is checked here by name and ``inspect.signature``, so a Textual upgrade that renames,
removes or re-signs one fails here, naming it. The public methods and attributes the plan tree
and the footer override or read are checked the same way (an override whose signature no longer
matches is called wrongly, or not at all, without an error), and the two behaviours the
overrides count on (a node that opens calls ``Tree._invalidate``; the footer yields its keys as
``FooterKey`` widgets with their action) are checked on a live app.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Footer, Tree

from app_support import drain, run
from shardscope.app.base import textual_adapter
from shardscope.app.base.textual_adapter import PRIVATES, FooterKey, Private

PUBLIC = (
    # (owner, name, parameter names or None for an attribute): what PlanTree, TreeLines and KeysFooter rely on
    ("textual.widgets:Tree", "render_label", ("self", "node", "base_style", "style")),
    ("textual.widgets:Tree", "get_label_width", ("self", "node")),
    ("textual.widgets:Tree", "render_line", ("self", "y")),
    ("textual.widgets:Tree", "render_lines", ("self", "crop")),
    ("textual.widgets:Tree", "watch_cursor_line", ("self", "previous_line", "line")),
    ("textual.widgets:Tree", "get_node_at_line", ("self", "line_no")),
    ("textual.widgets:Tree", "notify_style_update", ("self",)),
    ("textual.widgets:Tree", "clear", ("self",)),
    ("textual.widgets:Tree", "LINES", None),
    ("textual.widgets:Tree", "last_line", None),
    ("textual.widgets:Tree", "cursor_node", None),
    ("textual.scroll_view:ScrollView", "watch_scroll_y", ("self", "old_value", "new_value")),
    ("textual.widget:Widget", "refresh", ("self", "regions", "repaint", "layout", "recompose")),
    ("textual.widget:Widget", "get_component_rich_style", ("self", "names", "partial", "default")),
    ("textual.widget:Widget", "get_component_styles", ("self", "names")),
    ("textual.widget:Widget", "allow_vertical_scroll", None),
    ("textual.widget:Widget", "validate_scroll_x", ("self", "value")),
    ("textual.widget:Widget", "validate_scroll_y", ("self", "value")),
    ("textual.widget:Widget", "get_line_filters", ("self",)),
    ("textual.widget:Widget", "background_colors", None),
    ("textual.widget:Widget", "gutter", None),
    ("textual.widgets.tree:TreeNode", "toggle", ("self",)),
    ("textual.widgets.tree:TreeNode", "is_last", None),
    ("textual.widgets:Footer", "compose", ("self",)),
    ("textual.widgets:Footer", "bindings_changed", ("self", "screen")),
    ("textual.widgets:Footer", "_bindings_ready", None),
    ("textual.screen:Screen", "active_bindings", None),
    ("textual.widgets:Static", "update", ("self", "content", "layout")),
)


def _resolve(owner: str):
    module, _, qualname = owner.partition(":")
    found = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        found = getattr(found, part)
    return found


def _check(owner: str, name: str, parameters: tuple[str, ...] | None) -> None:
    where = _resolve(owner)
    if name in ("_styles_cache", "_closing", "_bindings"):  # set by Widget.__init__ (DOMNode's): look on an instance
        where = Widget()
    assert hasattr(where, name), f"Textual has no {owner}.{name} any more (shardscope uses it)"
    if parameters is not None:
        found = tuple(inspect.signature(getattr(where, name)).parameters)
        assert found == parameters, f"{owner}.{name} now takes {found}, shardscope calls it with {parameters}"


@pytest.mark.parametrize("private", PRIVATES, ids=lambda p: f"{p.owner}.{p.name}")
def test_each_private_of_textual_the_app_uses_is_there_with_its_signature(private: Private):
    _check(private.owner, private.name, private.parameters)


@pytest.mark.parametrize("owner, name, parameters", PUBLIC, ids=lambda item: str(item))
def test_each_public_method_the_plan_tree_and_footer_override_keeps_its_signature(owner, name, parameters):
    _check(owner, name, parameters)


def _private_names(path: Path) -> tuple[set[str], set[str]]:
    """The private names a module defines (functions, attributes it assigns) and those it reads
    (attributes, and ``getattr(x, "_name")``); ``os._exit`` is not Textual's."""
    defined, read = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined |= {sub.attr for sub in ast.walk(target) if isinstance(sub, ast.Attribute)}
        if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id == "os"):
            read.add(node.attr)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            read.add(node.args[1].value)
    private = lambda names: {name for name in names if name.startswith("_") and not name.startswith("__")}
    return private(defined), private(read)


def test_no_module_of_the_app_but_the_adapter_reads_a_private_of_textual():
    """A private name a module of the app reads that it does not define itself and that Textual
    defines is Textual's: only ``textual_adapter`` may read one (and no module imports a private
    module of Textual). The two private methods the app overrides are the ones PRIVATES lists."""
    textual_root = Path(inspect.getfile(Widget)).parent
    textual_names = set().union(*(_private_names(path)[0] for path in textual_root.rglob("*.py")))
    app_root = Path(textual_adapter.__file__).parent
    for path in app_root.rglob("*.py"):
        if path.name == "textual_adapter.py":
            continue
        defined, read = _private_names(path)
        found = sorted((read - defined) & textual_names)
        assert not found, f"{path.relative_to(app_root)} reads {found} of Textual: go through textual_adapter"
        text = path.read_text()
        assert "textual._" not in text and "widgets._" not in text, f"{path.name} imports a private module of Textual"
    overridden = {(p.owner, p.name) for p in PRIVATES if p.name in ("_invalidate", "_handle_exception")}
    assert overridden == {("textual.widgets._tree:Tree", "_invalidate"), ("textual.app:App", "_handle_exception")}


def test_the_virtual_size_the_plan_tree_redeclares_is_a_reactive_of_widget():
    from shardscope.app.views.plans.plan_tree import PlanTree

    assert isinstance(Widget.__dict__["virtual_size"], Reactive), "Widget.virtual_size is no longer a Reactive"
    assert PlanTree.__dict__["virtual_size"] is not Widget.__dict__["virtual_size"]


class _Counted(Tree):
    """A Tree that counts the calls of ``_invalidate`` (what the plan tree overrides)."""

    invalidated = 0

    def _invalidate(self) -> None:
        type(self).invalidated += 1
        super()._invalidate()


class _Trees(App):
    BINDINGS = [Binding("x", "bell", "Ring", id="ring"), Binding("y", "quit", "Leave", id="leave")]

    def compose(self) -> ComposeResult:
        yield _Counted("root")
        yield Footer()


def test_a_node_that_opens_calls_tree_invalidate_and_the_footer_yields_footer_keys_with_their_action():
    async def scenario():
        app = _Trees()
        async with app.run_test(size=(60, 10)) as pilot:
            tree = app.query_one(_Counted)
            node = tree.root.add("a", expand=False)
            node.add_leaf("b")
            before = _Counted.invalidated
            node.expand()
            assert _Counted.invalidated > before, "TreeNode.expand no longer calls Tree._invalidate"
            await drain(pilot)
            keys = list(app.query(FooterKey))
            assert keys, "Footer no longer composes FooterKey widgets"
            actions = {key.action for key in keys}
            assert {"bell", "quit"} <= actions, f"FooterKey.action no longer names the binding's action: {actions}"
            assert any(key.has_class("-command-palette") for key in keys), "the palette's key lost its class"

    run(scenario())


def test_a_closed_apps_widgets_and_the_lines_they_drew_are_freed_once_released():
    """textual#6665: ``StylesCache.get_inner_outer``'s ``lru_cache`` keeps the styles cache of a
    widget that is gone (removed, or its app closed), and the lines in it, alive;
    ``release_removed_widgets`` lets it go. Should Textual fix it, the first assertion fails: the
    release can then go."""
    import gc
    import weakref

    from textual.widgets import Static

    async def scenario():
        app = App()
        async with app.run_test(size=(40, 5)) as pilot:
            widget = Static("a line of text")
            await app.mount(widget)
            await drain(pilot)
            await pilot.pause()
            assert widget._styles_cache._cache, "the widget drew lines, kept in its styles cache"
            return weakref.ref(widget._styles_cache)

    drawn = run(scenario())
    gc.collect()
    assert drawn() is not None, "Textual no longer keeps a gone widget's lines: drop the release"
    textual_adapter.release_removed_widgets()
    gc.collect()
    assert drawn() is None, "the gone widget's styles cache is still reachable"


class _Focusing(App):
    """Two inputs, each with a key of its own: a change of focus changes the footer's keys."""

    BINDINGS = [Binding("x", "bell", "Ring", id="ring")]

    def __init__(self, footer: type[Footer]):
        super().__init__()
        self.footer = footer

    def compose(self) -> ComposeResult:
        from textual.widgets import Input

        class _Left(Input):
            BINDINGS = [Binding("ctrl+l", "bell", "Left")]

        class _Right(Input):
            BINDINGS = [Binding("ctrl+r", "bell", "Right")]

        yield _Left()
        yield _Right()
        yield self.footer()


def _bound_keys_after_focus_changes(footer: type[Footer]) -> tuple[int, int]:
    """(keys the footer shows, keys bound to its ``compact``) after ten changes of focus."""
    async def scenario():
        app = _Focusing(footer)
        async with app.run_test(size=(80, 10)) as pilot:
            await drain(pilot)
            for _ in range(10):
                await pilot.press("tab")
                await drain(pilot)
                await pilot.pause()
            shown = len(app.query(FooterKey))
            bound = len(getattr(app.query_one(footer), "__watchers", {}).get("compact", []))
            return shown, bound

    return run(scenario())


def test_the_keys_a_recomposed_footer_replaced_are_not_kept_bound_to_it():
    """textual#6666: Textual's footer binds each key it composes to its ``compact`` and keeps the
    binding (and the key) after a change of focus replaced it. Should Textual fix it, the first
    assertion fails: ``drop_closed_watchers`` can then go."""
    from shardscope.app.widgets.footer import KeysFooter

    shown, bound = _bound_keys_after_focus_changes(Footer)
    assert bound >= 5 * shown, f"Textual no longer keeps replaced keys bound ({bound} bound, {shown} shown)"
    shown, bound = _bound_keys_after_focus_changes(KeysFooter)
    assert shown and bound <= shown, f"{bound} keys bound to the footer, {shown} shown"
