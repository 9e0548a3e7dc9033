"""Which tab shows what: the deferred tab views, each mounted when its tab is first shown and handed
the latest analysis when it shows, and the tab-scoped keys (``s`` in the Diff and the Sweep tab),
run in their tab once its view can.

A part of :class:`~shardscope.app.app.ShardscopeApp` (its base class). Only the visible tab
renders a new analysis; the others get it when first shown (a big diff costs seconds).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import App
from textual.widget import Widget
from textual.widgets import TabbedContent, TabPane

from shardscope.app.base import runner
from shardscope.app.base.tabs import MEASURING_TABS, TABS
from shardscope.app.base.analysis_view import as_analysis_view

if TYPE_CHECKING:
    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis


def view_class(spec: str) -> type:
    """The class ``module:name`` names (the view of a tab, imported now)."""
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


class TabRouting(App[int]):
    """The app's tabs: their views loaded after the first paint, shown the analysis when opened, their keys."""

    if TYPE_CHECKING:  # what the app provides (ShardscopeApp)
        analysis: Analysis | None
        prepared: PreparedViews | None
        hide_measurements: bool
        _stale_tabs: set[str]
        _mounted_views: set[str]
        _view_classes: dict[str, type] | None
        _mounting_views: set[str]
        _views_requested: bool
        _pending_tab_action: tuple[str, str] | None

        def _show_error(self, message: str, hint: str | None, *, refused: bool = False,
                        failed: str | None = None) -> None: ...

        def _fit_footer(self, width: int | None = None) -> None: ...

    def _check_tab_action(self, tab: object, tab_action: object) -> bool | None:
        """A tab's own key applies only while its tab shows (else it is hidden, and the key goes
        to the next binding); greyed out while its view cannot act (None), hidden where it never
        applies (False: the sweep on a program file)."""
        if self.query_one(TabbedContent).active != tab:
            return False
        view = self._tab_view(str(tab))
        return True if view is None else view.check_action(str(tab_action), ())

    @property
    def tabs_behind(self) -> frozenset[str]:
        """Tabs not yet showing the latest analysis: each gets it when it is opened."""
        return frozenset(self._stale_tabs)

    def _load_views(self) -> None:
        """Import the other tabs' views, once: when the first run ends, or sooner if the user opens
        one of those tabs. Importing them while the first run imports JAX made both compete for the
        GIL: the first results came about 0.7 s later."""
        if not self._views_requested:
            self._views_requested = True
            self._import_views()

    @work(thread=True, group="views", exit_on_error=False)
    def _import_views(self) -> None:
        """Thread worker: import the deferred tab views, then mount the shown tab's on the UI thread."""
        try:
            views = {tab: view_class(spec) for tab, _, spec in TABS if tab != "plans"}
        except Exception as exc:  # a broken view must not take the app down
            self.call_from_thread(self._show_error, f"A tab view failed to load: {type(exc).__name__}: {exc}", runner.BUG_HINT,
                                  failed="loading the tabs")
            return
        self.call_from_thread(self._views_imported, views)

    def _views_imported(self, views: dict[str, type]) -> None:
        if not self.is_running:  # the import ended as the app shut down: no tabs to mount into
            return
        self._view_classes = views
        self._mount_view(self.query_one(TabbedContent).active)

    def _mount_view(self, tab: str) -> None:
        """Put ``tab``'s view in place of its placeholder, the first time the tab shows once the
        views are imported. A tab never opened has no view: mounting all six views after the first
        run took a fifth of the CPU an app's start and first run took, for tabs most sessions
        never open."""
        if self._view_classes is None or tab not in self._view_classes or tab in self._mounting_views:
            return
        self._mounting_views.add(tab)
        self.call_later(self._mount_view_now, tab, self._view_classes[tab])

    async def _mount_view_now(self, tab: str, view: type) -> None:
        if not self.is_running:  # quitting: no tabs to mount into
            return
        options = {"measurements_hidden": True} if tab in MEASURING_TABS and self.hide_measurements else {}
        await self.query_one(f"#{tab}-placeholder").remove()
        await self.query_one(f"#{tab}", TabPane).mount(view(id=f"{tab}-view", **options))
        self._mounted_views.add(tab)
        self._refresh_tab(self.query_one(TabbedContent).active)
        self._fit_footer()  # the view's own keys, in the words this width has room for
        self._run_pending_tab_action()

    def action_show_tab(self, tab: str) -> None:
        """Show the tab ``tab`` (plans, graph, diff, timings, hlo or sweep).

        The focus leaves the tab being hidden first: else Textual gives it to another widget of
        that tab (the Sweep tab's input, after its button), and the tabs switch back to it.
        The tab shown then takes the focus (each view's ``on_show``).
        """
        tabs = self.query_one(TabbedContent)
        if tab != tabs.active and self.focused is not None and tabs.active_pane in self.focused.ancestors:
            self.set_focus(None)
        tabs.active = tab

    def action_in_tab(self, tab: str, action: str) -> None:
        """Show ``tab`` and run its view's ``action`` there, as the tab's own key does.

        Before the view can act (still loading, or a diff waiting for the first run) the action
        waits (:meth:`_run_pending_tab_action`) and runs when it can, unless the user has left
        the tab by then.
        """
        self.action_show_tab(tab)
        self._pending_tab_action = (tab, action)
        self._load_views()
        self._run_pending_tab_action()

    @on(TabbedContent.TabActivated)
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        if self._pending_tab_action is not None and self._pending_tab_action[0] != event.pane.id:
            self._pending_tab_action = None  # the user went elsewhere: a tab's action asked for earlier lapses
        if event.pane.id != "plans":
            self._load_views()
            self._mount_view(str(event.pane.id))
        self._refresh_tab(event.pane.id)
        self._run_pending_tab_action()
        self._fit_footer()  # the footer shows the keys of the tab shown (s), and has room for

    def _refresh_tab(self, tab: str | None) -> None:
        """Hand the latest analysis to ``tab``'s view unless it already shows it."""
        if tab in self._stale_tabs and tab in self._mounted_views and self.analysis is not None:
            self._stale_tabs.discard(tab)
            self._show_in(tab, self.analysis)

    def _run_pending_tab_action(self) -> None:
        """Run the tab action that waited, once its tab (still shown) has a view that can act."""
        if self._pending_tab_action is None:
            return
        tab, action = self._pending_tab_action
        if self.query_one(TabbedContent).active != tab:
            self._pending_tab_action = None
            return
        view = self._tab_view(tab)
        if view is None:
            return  # still loading: _mount_views runs it
        self._refresh_tab(tab)
        if not view.check_action(action, ()):
            return  # nothing to act on yet (no diff before the first run): the run's end runs it
        self._pending_tab_action = None
        self.call_later(self.run_action, action, view)

    def _tab_view(self, tab: str) -> Widget | None:
        """The view of ``tab`` once mounted (None while its placeholder shows)."""
        return self.query_one(f"#{tab}-view") if tab in self._mounted_views else None

    def _show_in(self, tab: str, analysis: Analysis) -> None:
        """Hand ``analysis`` (and what the worker prepared) to one tab's view
        (:class:`~shardscope.app.base.analysis_view.AnalysisView`); a view that fails must not
        take the app down."""
        try:
            as_analysis_view(self.query_one(f"#{tab}-view")).show_analysis(analysis, self.prepared)
        except Exception as exc:  # a rendering bug: say so, keep the other tabs
            self._show_error(f"The {tab} tab could not show this analysis: {type(exc).__name__}: {exc}", runner.BUG_HINT,
                             failed=f"the {tab} tab")
