"""The shardscope explorer: composes the sidebar, status line, error panel and tabs, and routes.

State lives here (the settings asked for, the latest :class:`~shardscope.pipeline.analysis.Analysis`,
the demo file loaded); rendering lives in the widgets. The app's other parts are its base
classes, one concern each: :mod:`~shardscope.app.run_handling` (the runs: analyses run in one
exclusive thread worker that only posts messages, so the first paint never waits for JAX),
:mod:`~shardscope.app.tab_routing` (which tab shows what, the tabs' own keys) and
:mod:`~shardscope.app.export_actions` (the diff and the screenshot). The keys are in
:mod:`~shardscope.app.base.bindings`, the palette's commands in :mod:`~shardscope.app.commands`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, cast

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult, SystemCommand
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Input, Select, Static, Switch, TabbedContent, TabPane

from shardscope.app.base import gc_policy
from shardscope.app.base.bindings import APP_BINDINGS, TAB_BINDINGS, fit_footer
from shardscope.app.commands import binding_commands
from shardscope.app.export_actions import ExportActions
from shardscope.app.focus_routing import FocusRouting
from shardscope.app.profiling import StartupProfile
from shardscope.app.run_handling import RunHandling
from shardscope.app.base.summaries import done_text
from shardscope.app.tab_routing import TabRouting
from shardscope.app.base.tabs import TABS
from shardscope.app.base.textual_adapter import own_bindings
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.footer import KeysFooter
from shardscope.app.widgets.sidebar import Sidebar
from shardscope.app.widgets.status import StatusLine, describe_programs, describe_settings, settings_changes, stale_banner
from shardscope.errors import ShardscopeError
from shardscope.render.theme import THEME
from shardscope.config.settings import Settings

if TYPE_CHECKING:
    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis
    from shardscope.sources.demos import DemoFile
    from shardscope.sources.programs import ProgramFile
    from shardscope.app.views.hlo import HloView  # the deferred tabs' views load after the first paint (tabs.py)

CONTROLS = (Input, Select, Button, Switch)
"""Widgets the app never moves the focus into for the user: inputs and pickers take typed keys,
a button or a switch acts on Enter; the tab's content (a tree, a diff, a scrolling pane) takes it."""


class ShardscopeApp(RunHandling, TabRouting, FocusRouting, ExportActions):
    """Pick a demo function and settings, run the analysis, compare the two plans."""

    CSS_PATH = Path(__file__).with_name("shardscope.tcss")  # absolute: subclasses live elsewhere
    TITLE = "shardscope"
    AUTO_FOCUS = None
    """No focus by DOM order: Textual's default ("*") gave it to the sidebar even while folded away
    (after the help or the palette closed). The tab shown takes it (:meth:`_focus_shown_tab`)."""

    BINDINGS = [*APP_BINDINGS]  # a list of the base class's type (BindingType)

    NARROW = 100
    """Under this many columns the sidebar hides by itself (``f2`` brings it back)."""

    def __init__(
        self,
        settings: Settings,
        *,
        max_devices: int = 8,
        export_dir: Path | None = None,
        autorun: bool = True,
        profile_startup: bool = False,
        hide_measurements: bool = False,
    ) -> None:
        """``hide_measurements`` shows ``···`` for wall-clock numbers (for snapshots)."""
        super().__init__()
        self.console.push_theme(THEME)  # the renderings' named styles (verdict.deferrable, check.failed, ...)
        self.settings = settings  # what the user asked for (function/chunk may be None: default)
        self.max_devices = max(max_devices, settings.devices)
        self.export_dir = export_dir
        self.autorun = autorun
        self.analysis: Any = None  # the latest Analysis (Any: the handlers read it once a run is done, unchecked)
        self.prepared: PreparedViews | None = None  # its Graph and Diff tabs for the comparison shown (views.prepare)
        self.demo_file: DemoFile | ProgramFile | None = None  # the loaded demo or program file
        self.running = False
        self.collector = gc_policy.Collector()  # what lives is frozen when a result shows
        self.last_export: Path | None = None
        self.profile = StartupProfile() if profile_startup else None
        self.hide_measurements = hide_measurements
        self._run_id = 0
        self._run_settings: Settings | None = None  # the settings of the run in flight
        self._compare_default_next = False  # w toggled the rewrites: the next results compare the default pair
        self._sidebar_wanted: bool | None = None  # the user's f2; None: by the terminal's width
        self._sidebar_opened_for_focus = False  # Tab went into the folded sidebar: it shows until the focus leaves
        self._stale_tabs: set[str] = set()  # tabs not yet showing self.analysis
        self._mounted_views: set[str] = {"plans"}  # the tabs whose view is in place (tab_routing)
        self._mounting_views: set[str] = {"plans"}  # ... or on its way
        self._view_classes: dict[str, type] | None = None  # the deferred tabs' views, once imported
        self._views_requested = False
        self._error_spares_results = False  # the error shown left the results on screen as they were
        self._layouts_tab_shown = False  # a file of layouts functions only opened the Layouts tab once
        self._layouts_only = False  # the file loaded marks @shardscope.layouts functions only
        self._pending_tab_action: tuple[str, str] | None = None  # (tab, action) asked for before its view could act

    # -- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        """Status line on top, sidebar on the left, error panel and tabs on the right."""
        yield StatusLine(self.settings, id="status")
        with Horizontal(id="body"):
            yield Sidebar(self.settings, self.max_devices, id="sidebar")
            with Vertical(id="main"):
                yield ErrorPanel(id="error")
                yield Static("", id="stale")
                with TabbedContent(id="tabs", initial="plans"):
                    for i, (tab, title, _) in enumerate(TABS, 1):
                        with TabPane(f"{i} {title}", id=tab):
                            if tab == "plans":
                                yield PlansView(self.collector, id="plans-view")
                            else:
                                yield Static("loading this view...", id=f"{tab}-placeholder")
        yield KeysFooter()

    def on_mount(self) -> None:
        """Start JAX and the first run only after the first paint."""
        self._fit_sidebar()
        self._fit_footer()
        self.watch(self.screen, "focused", self._focus_moved, init=False)
        self.call_after_refresh(self._after_first_paint)

    def on_resize(self, event: events.Resize) -> None:
        """Fold the sidebar away on a narrow terminal (unless the user said otherwise with ``f2``),
        and leave out of the footer the keys it has no room for."""
        self._fit_sidebar(event.size.width)
        self._fit_footer(event.size.width)

    def _fit_footer(self, width: int | None = None) -> None:
        """The footer's keys for this width and the tab shown (:func:`~shardscope.app.base.bindings.fit_footer`)."""
        narrow = (self.size.width if width is None else width) < self.NARROW
        tab = self.query_one(TabbedContent).active
        fit_footer(own_bindings(self), narrow, tab)
        view = self._tab_view(tab) if tab in TAB_BINDINGS else None
        if view is not None:  # the focus is in it: its own key is the one the footer shows
            fit_footer(own_bindings(view), narrow, tab, TAB_BINDINGS[tab])
        self.refresh_bindings()

    @property
    def sidebar_shown(self) -> bool:
        """True while the settings sidebar is on screen."""
        return not self.query_one(Sidebar).has_class("-collapsed")

    def _fit_sidebar(self, width: int | None = None) -> None:
        narrow = (self.size.width if width is None else width) < self.NARROW
        shown = ((not narrow) if self._sidebar_wanted is None else self._sidebar_wanted) or self._sidebar_opened_for_focus
        sidebar = self.query_one(Sidebar)
        sidebar.set_class(not shown, "-collapsed")
        sidebar.set_class(narrow, "-narrow")
        if not shown and self.focused is not None and sidebar in self.focused.ancestors_with_self:
            self._focus_shown_tab()

    def _focus_shown_tab(self) -> None:
        """Give the focus to the tab shown: its first focusable widget that is not a control
        (:data:`CONTROLS`), so every key works; else to nothing (the keys still reach the app)."""
        pane = self.query_one(TabbedContent).active_pane
        target = next((w for w in self.screen.focus_chain
                       if pane in w.ancestors and not isinstance(w, CONTROLS)), None)
        self.set_focus(target)

    def _after_first_paint(self) -> None:
        if self.profile is not None:
            self.log(f"startup: first paint after {self.profile.mark_first_paint():.3f} s")
        self._start_run(analyze=self.autorun)

    def _handle_exception(self, error: Exception) -> None:
        """An error in a widget the quit is tearing down is not the user's problem.

        ``q`` during the first second can land while the tab views are still mounting: a
        ``Select`` then looks for its own overlay after the quit removed it (``NoMatches``),
        which Textual reports as a crash (exit 1, a traceback) of an app that was quitting
        anyway. Once quitting, such an error is logged, not shown; any other error still is.
        Overrides a private of Textual (``textual_adapter``: no public hook sees such an error).
        """
        from textual.css.query import NoMatches

        quitting = self.return_code is not None or not self.is_running  # exit() was called, or shutting down
        if quitting and isinstance(error, NoMatches):
            self.log.warning(f"ignored while quitting: {error!r}")
            return
        super()._handle_exception(error)

    # -- actions ------------------------------------------------------------------------

    def action_run(self) -> None:
        """Analyse the sidebar's settings (reloading the demo file if it changed on disk)."""
        try:
            settings = self.query_one(Sidebar).requested_settings(self.settings)
        except ShardscopeError as exc:
            self._show_error(exc.message, exc.hint, refused=True)
            return
        self.settings = settings
        self._start_run(analyze=True)

    def action_what_if(self) -> None:
        """Analyse the program file again with (or without) each program's verified what-if
        rewrites beside it (:mod:`shardscope.pipeline.what_if_programs`)."""
        self.settings = self.settings.with_(what_if=not self.settings.what_if)
        self._compare_default_next = True  # a program beside its rewrite, not the pair compared before
        self._start_run(analyze=True)

    @property
    def comparison(self) -> Any:  # the Comparison, or None (Any: read as self.analysis is)
        """The comparison the Diff and Graph tabs show (``shardscope.pipeline.comparison.Comparison``)."""
        if self.prepared is not None:
            return self.prepared.comparison
        return None if self.analysis is None else self.analysis.comparison

    def action_pick_baseline(self) -> None:
        """Make the next plan the baseline (skipping the candidate)."""
        self._pick(baseline_step=1)

    def action_pick_candidate(self) -> None:
        """Make the next plan the candidate (skipping the baseline)."""
        self._pick(candidate_step=1)

    def _pick(self, baseline_step: int = 0, candidate_step: int = 0) -> None:
        names = list(self.analysis.plans)
        baseline, candidate = self.comparison.baseline, self.comparison.candidate
        if len(names) == 2 and baseline != candidate:  # two programs: the only other choice is a swap
            baseline, candidate = candidate, baseline
        else:
            if baseline_step:
                baseline = _next_other(names, baseline, candidate)
            if candidate_step:
                candidate = _next_other(names, candidate, baseline)
        self._compare(baseline, candidate)

    @on(Sidebar.CandidatePicked)
    def _candidate_picked(self, event: Sidebar.CandidatePicked) -> None:
        """A program picked in a program file's list becomes the candidate (a swap if it was the baseline)."""
        if self.analysis is None or event.name not in self.analysis.plans:
            return
        baseline, candidate = self.comparison.baseline, self.comparison.candidate
        if event.name == baseline:
            baseline = candidate
        elif baseline == candidate:
            baseline = next((n for n in self.analysis.plans if n != event.name), event.name)
        if (baseline, event.name) != (self.comparison.baseline, self.comparison.candidate):
            self._compare(baseline, event.name)

    def action_next_collective(self) -> None:
        """Go to the next collective in every plan tree."""
        self._step_collective(1)

    def action_previous_collective(self) -> None:
        """Go to the previous collective in every plan tree."""
        self._step_collective(-1)

    def action_toggle_sidebar(self) -> None:
        """Show or hide the settings sidebar; the choice holds until the next ``f2``.

        Afterwards the keys work: focus left nowhere, or in an input (f2 from the Sweep tab's
        budget left the digits typing there), goes to the tab shown.
        """
        self._sidebar_wanted = not self.sidebar_shown
        self._sidebar_opened_for_focus = False  # f2 decides now
        self._fit_sidebar()
        if self.focused is None or isinstance(self.focused, Input):
            self.call_after_refresh(self._focus_shown_tab)  # after the layout: the chain holds what shows

    def action_help(self) -> None:
        """Show the help screen."""
        from shardscope.app.widgets.help_screen import HelpScreen  # Rich's Markdown imports markdown_it and pygments, not before the first paint

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_escape(self) -> None:
        """Leave the input being typed in; otherwise hide the error panel."""
        if isinstance(self.focused, Input):
            self.set_focus(None)
        else:
            self._clear_error()

    def _clear_error(self) -> None:
        """Hide the error panel; when the error was not the run's (an export, a screenshot, refused
        settings), the status line says again what the results on screen are."""
        self.query_one(ErrorPanel).clear()
        status = self.query_one(StatusLine)
        if self._error_spares_results and status.state == "failed":
            status.show_done(self._done_text(self.analysis) if self.analysis is not None else "ready: press r to run")
            self._mark_stale()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out actions that need a result (export) or a collective (n/N); a tab's own key
        applies only while its tab shows (else it is hidden, and the key goes to the next binding)."""
        if action == "in_tab":
            return self._check_tab_action(*parameters)
        if action == "what_if":  # a demo's deferred plan already is its naive plan rewritten
            return self.programs or None
        if action == "export":  # a lone program has nothing to diff against
            return (self.analysis is not None and len(self.analysis.plans) > 1) or None
        if action in ("pick_baseline", "pick_candidate"):  # two programs: b and c swap them
            plans = 0 if self.analysis is None else len(self.analysis.plans)
            return (plans > 2 or (plans == 2 and not self.analysis.origin.chunked)) or None
        if action in ("next_collective", "previous_collective"):
            has_collectives = self.analysis is not None and any(p.collectives or p.paired for p in self.analysis.plans.values())
            return has_collectives or None
        return True

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette: Textual's own commands plus every shardscope binding (:mod:`commands`)."""
        yield from super().get_system_commands(screen)
        yield from binding_commands(self, self.action_in_tab)

    # -- the sidebar's settings ---------------------------------------------------------

    @on(Sidebar.Changed)
    def _settings_committed(self) -> None:
        if self.query_one(Sidebar).autorun:
            self.action_run()

    @on(Sidebar.RunAsked)
    def _run_asked(self) -> None:
        """Enter in a sidebar field runs its settings (``r`` types there)."""
        self.action_run()

    @on(Sidebar.Edited)
    def _settings_edited(self) -> None:
        self._mark_stale()

    # -- stale results ------------------------------------------------------------------

    @property
    def stale(self) -> bool:
        """True when results are on screen and the sidebar asks for other settings."""
        return self.query_one("#stale", Static).has_class("-visible")

    def _mark_stale(self) -> None:
        """Say so, over the tabs and in the status line, when the sidebar differs from the results."""
        banner = self.query_one("#stale", Static)
        status = self.query_one(StatusLine)
        asked = self._sidebar_differs()
        banner.set_class(asked is not None, "-visible")
        if asked is None:
            if status.state == "stale":
                status.show_done(self._done_text(self.analysis))
            return
        banner.update(stale_banner(self._results_described(), asked, self.run_key))
        if status.state not in ("running", "failed"):
            status.show_stale(asked, self.run_key)

    def _results_described(self) -> Text:
        """The settings of the results on screen, in words (a program file: its name, programs and targets)."""
        analysis = self.analysis
        if analysis.origin.chunked:
            return describe_settings(analysis.settings, analysis.shapes)
        return describe_programs(analysis.settings.path.name, list(analysis.plans), targets=analysis.settings.targets)

    def _sidebar_differs(self) -> Text | None:
        """What the sidebar asks for that the results on screen are not (None: nothing, or no results)."""
        if self.analysis is None:
            return None
        shown = self.analysis.settings
        draft = self.query_one(Sidebar).draft_settings(shown)
        if not self.analysis.origin.chunked:  # a program file: only its target is the sidebar's
            return None if draft is None or draft.targets == shown.targets else Text.assemble(
                "target ", (", ".join(draft.targets) or "none", "bold"))
        return settings_changes(shown, draft)

    # -- helpers ------------------------------------------------------------------------

    def _show_error(self, message: str, hint: str | None, *, refused: bool = False, failed: str | None = None) -> None:
        """The error panel and the status line: a run's failure names the settings that failed, not
        the ones on screen; ``failed`` names what else failed (``the export``), ``refused`` says the
        sidebar's settings were refused. Those two leave the results on screen as they were, so
        hiding the panel (:meth:`_clear_error`) gives the status line back to them."""
        self.query_one(ErrorPanel).show_error(message, hint)
        status = self.query_one(StatusLine)
        self._error_spares_results = refused or failed is not None
        if refused:
            status.show_failed(None, "the sidebar's settings were refused: see the error panel")
        elif failed is not None:
            status.show_failed(None, f"{failed} failed: see the error panel")
        else:
            status.show_failed(self._run_settings, "failed: see the error panel")

    def _step_collective(self, step: int) -> None:
        compiled = cast("HloView | None", self._tab_view("hlo"))
        if self.query_one(TabbedContent).active == "hlo" and compiled is not None:
            self._refresh_tab("hlo")
            compiled.step_collective(step)
            return
        self.action_show_tab("plans")
        self._refresh_tab("plans")
        self.query_one(PlansView).step_collective(step)

    def _done_text(self, analysis: Analysis) -> Text:
        """The status line's summary of ``analysis`` (:func:`~shardscope.app.base.summaries.done_text`)."""
        return done_text(analysis, self.comparison, self.hide_measurements)

def _next_other(names: list[str], current: str, other: str) -> str:
    """The plan after ``current`` in ``names`` (wrapping), never ``other``."""
    k = names.index(current)
    for step in range(1, len(names) + 1):
        name = names[(k + step) % len(names)]
        if name != other:
            return name
    return current
