"""The shardscope explorer: composes the sidebar, status line, error panel and tabs, and routes.

State lives here (the settings asked for, the latest :class:`~shardscope.pipeline.analysis.Analysis`,
the demo file loaded); rendering lives in the widgets. Analyses run in one exclusive thread
worker that only posts messages, so the first paint never waits for JAX.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult, SystemCommand
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Input, Select, Static, Switch, TabbedContent, TabPane
from textual.worker import Worker, WorkerState, get_current_worker

from shardscope.app import gc_policy, runner
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.footer import KeysFooter
from shardscope.app.messages import ComparisonReady, DemoLoaded, RunFailed, RunFinished, RunMessage, RunProgress
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.app.profiling import StartupProfile
from shardscope.app.widgets.sidebar import Sidebar
from shardscope.app.bindings import APP_BINDINGS
from shardscope.app.commands import binding_commands
from shardscope.app.export_actions import ExportActions
from shardscope.app.widgets.status import StatusLine, describe_programs, describe_settings
from shardscope.app.summaries import IN_LOOP, ONCE
from shardscope.app.tab_routing import TabRouting
from shardscope.app.tabs import TABS
from shardscope.errors import ShardscopeError
from shardscope.plans.settings import Settings

CONTROLS = (Input, Select, Button, Switch)
"""Widgets the app never moves the focus into for the user: inputs and pickers take typed keys,
a button or a switch acts on Enter; the tab's content (a tree, a diff, a scrolling pane) takes it."""


class ShardscopeApp(TabRouting, ExportActions):
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
        self.settings = settings  # what the user asked for (function/chunk may be None: default)
        self.max_devices = max(max_devices, settings.devices)
        self.export_dir = export_dir
        self.autorun = autorun
        self.analysis: Any = None  # the latest shardscope.pipeline.analysis.Analysis
        self.prepared: Any = None  # its Graph and Diff tabs for the comparison shown (views.prepare)
        self.demo_file: Any = None  # the loaded shardscope.sources.demos.DemoFile
        self.running = False
        self.last_export: Path | None = None
        self.profile = StartupProfile() if profile_startup else None
        self.hide_measurements = hide_measurements
        self._run_id = 0
        self._run_settings: Settings | None = None  # the settings of the run in flight
        self._sidebar_wanted: bool | None = None  # the user's f2; None: by the terminal's width
        self._stale_tabs: set[str] = set()  # tabs not yet showing self.analysis
        self._mounted_views: set[str] = {"plans"}
        self._views_requested = False
        self._error_spares_results = False  # the error shown left the results on screen as they were
        self._pending_tab_action: tuple[str, str] | None = None  # (tab, action) asked for before its view could act

    @property
    def run_id(self) -> int:
        """How many runs were started (the first, load-only or not, is 1)."""
        return self._run_id

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
                                yield PlansView(id="plans-view")
                            else:
                                yield Static("loading this view...", id=f"{tab}-placeholder")
        yield KeysFooter()

    def on_mount(self) -> None:
        """Start JAX and the first run only after the first paint."""
        self._fit_sidebar()
        self.call_after_refresh(self._after_first_paint)

    def on_resize(self, event: events.Resize) -> None:
        """Fold the sidebar away on a narrow terminal (unless the user said otherwise with ``f2``)."""
        self._fit_sidebar(event.size.width)

    @property
    def sidebar_shown(self) -> bool:
        """True while the settings sidebar is on screen."""
        return not self.query_one(Sidebar).has_class("-collapsed")

    def _fit_sidebar(self, width: int | None = None) -> None:
        narrow = (self.size.width if width is None else width) < self.NARROW
        shown = (not narrow) if self._sidebar_wanted is None else self._sidebar_wanted
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

        if self.return_code is not None and isinstance(error, NoMatches):  # exit() was called
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


    @property
    def comparison(self) -> Any:
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

    def _compare(self, baseline: str, candidate: str) -> None:
        """Show ``candidate`` against ``baseline`` once the worker has prepared the Diff and Graph tabs."""
        self.query_one(StatusLine).show_done(f"comparing {candidate} with {baseline}...")
        self._compare_worker(self._run_id, self.analysis, baseline, candidate)

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

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def _compare_worker(self, run_id: int, analysis: Any, baseline: str, candidate: str) -> None:
        """Thread worker: the diff and the drawings of another pair of plans."""
        from shardscope.app.views.prepare import prepare

        worker = get_current_worker()
        prepared = prepare(analysis, analysis.compare(baseline, candidate), lambda: worker.is_cancelled)
        if prepared is not None:
            self.post_message(ComparisonReady(run_id, prepared))

    def on_comparison_ready(self, message: ComparisonReady) -> None:
        """Show the picked comparison in the Diff and Graph tabs."""
        if not self._is_current(message):
            return
        self.prepared = message.prepared
        self._show_compared()
        self._stale_tabs |= {"graph", "diff", "timings"}
        self._refresh_tab(self.query_one(TabbedContent).active)
        self.query_one(StatusLine).show_done(self._done_text(self.analysis))
        self._mark_stale()

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
        self._fit_sidebar()
        if self.focused is None or isinstance(self.focused, Input):
            self.call_after_refresh(self._focus_shown_tab)  # after the layout: the chain holds what shows

    def action_help(self) -> None:
        """Show the help screen."""
        from shardscope.app.widgets.help_screen import HelpScreen  # Markdown is slow to import: not before the first paint

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
        if action == "export":  # a lone program has nothing to diff against
            return (self.analysis is not None and not (self.analysis.is_programs and len(self.analysis.plans) < 2)) or None
        if action in ("pick_baseline", "pick_candidate"):  # two programs: b and c swap them
            plans = 0 if self.analysis is None else len(self.analysis.plans)
            return (plans > 2 or (plans == 2 and self.analysis.is_programs)) or None
        if action in ("next_collective", "previous_collective"):
            has_collectives = self.analysis is not None and any(p.collectives for p in self.analysis.plans.values())
            return has_collectives or None
        return True

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette: Textual's own commands plus every shardscope binding (:mod:`commands`)."""
        yield from super().get_system_commands(screen)
        yield from binding_commands(self)

    # -- the run ------------------------------------------------------------------------

    def _start_run(self, *, analyze: bool) -> None:
        """Start a run of the current settings; a running one is cancelled (exclusive worker)."""
        self._run_id += 1
        self.running = analyze
        # a program file has no settings of its own to name: the stages alone say what runs
        self._run_settings = self.settings if analyze and not self.programs else None
        if not self.programs:
            self.query_one(StatusLine).show_settings(self.settings)
        if analyze:
            self.query_one(StatusLine).show_stage("loading", 0.0, self._run_settings)
        request = runner.RunRequest(self._run_id, self.settings, self.max_devices, self.demo_file, analyze)
        self._run_worker(request)

    @work(thread=True, exclusive=True, group="analysis", exit_on_error=False)
    def _run_worker(self, request: runner.RunRequest) -> None:
        """Thread worker: everything JAX, reported back with messages only."""
        worker = get_current_worker()
        if request.analyze:
            gc_policy.collect_earlier_runs()
        runner.run(request, self.post_message, lambda: worker.is_cancelled)

    def _is_current(self, message: RunMessage) -> bool:
        return message.run_id == self._run_id

    def on_run_progress(self, message: RunProgress) -> None:
        """Show the stage the current run reached."""
        if self._is_current(message) and self.running:
            self.query_one(StatusLine).show_stage(message.stage, message.fraction, self._run_settings)

    @property
    def programs(self) -> bool:
        """True when the file loaded is a program file (``@shardscope.program`` functions)."""
        from shardscope.sources.programs import ProgramFile  # no JAX: a plain dataclass

        return isinstance(self.demo_file, ProgramFile)

    def on_demo_loaded(self, message: DemoLoaded) -> None:
        """Offer the (re)loaded file's functions (or programs) in the sidebar."""
        self.demo_file = message.demo_file
        descriptions = {name: fn.description for name, fn in message.demo_file.functions.items()}
        meshes = message.meshes
        self.query_one(Sidebar).load_demo(message.demo_file.names, message.batches, descriptions,
                                          programs=self.programs, devices=self.max_devices,
                                          meshes=meshes, demo_mesh=self.settings.demo_mesh)
        if meshes and self.settings.demo_mesh:  # the user gave no mesh: the demo's own is the one run
            function = self.settings.function if self.settings.function in meshes else message.demo_file.names[0]
            self.settings = self.settings.for_demo(meshes[function])
        if self.programs:  # no settings of its own: name the file and its programs
            self._run_settings = None
            self.query_one(StatusLine).show_described(
                describe_programs(message.demo_file.path.name, message.demo_file.names), results=False)
            return
        if self.settings.function is None:  # name the default demo as soon as it is known
            self.query_one(StatusLine).show_settings(self.settings.with_(function=message.demo_file.names[0]))

    def on_run_finished(self, message: RunFinished) -> None:
        """Show a new analysis in every view."""
        if not self._is_current(message):
            return
        self.running = False
        self._run_settings = None
        kept = self._programs_compared()
        self.analysis = analysis = message.analysis
        self.prepared = message.prepared
        gc_policy.freeze_what_lives()  # until the next run, which collects what this one replaced
        status = self.query_one(StatusLine)
        self.query_one(ErrorPanel).clear()
        if analysis.is_programs:
            meshes = {name: plan.mesh for name, plan in analysis.plans.items()}
            status.show_described(describe_programs(analysis.settings.path.name, list(analysis.plans), meshes,
                                                    analysis.settings.devices), results=True)
            self._show_compared()
            self._show_unavailable_programs(analysis)
            if kept is not None and set(kept) <= set(analysis.plans) and kept != (
                    analysis.comparison.baseline, analysis.comparison.candidate):
                self.call_after_refresh(self._compare, *kept)  # r keeps the programs the user compared
        else:
            self.settings = self.settings.with_(function=analysis.function)
            self.query_one(Sidebar).show_resolved(analysis.settings)
            status.show_results(analysis.settings, analysis.shapes)
        # Only the visible tab renders now; the others when first shown (a big diff costs seconds).
        self._stale_tabs = {tab for tab, _, _ in TABS}
        self._refresh_tab(self.query_one(TabbedContent).active)
        self._run_pending_tab_action()
        status.show_done(self._done_text(analysis))
        self._mark_stale()
        for warning in analysis.warnings:
            self.notify(warning, title="Warning", severity="warning", timeout=10)
        self.refresh_bindings()
        if self.profile is not None and self.profile.results_s is None:
            self.call_after_refresh(self._mark_results)

    def _programs_compared(self) -> tuple[str, str] | None:
        """The (baseline, candidate) a program file's results on screen compare (None: no such results)."""
        if self.analysis is None or not self.analysis.is_programs:
            return None
        return self.comparison.baseline, self.comparison.candidate

    def _show_compared(self) -> None:
        """Mark a program file's baseline and candidate in the sidebar's list."""
        if self.analysis is not None and self.analysis.is_programs:
            self.query_one(Sidebar).show_compared(self.comparison.baseline, self.comparison.candidate)

    def _show_unavailable_programs(self, analysis: Any) -> None:
        """Programs of the file that failed to trace: the error panel names them; the others show."""
        if analysis.unavailable:
            failed = "; ".join(f"{name}: {reason}" for name, reason in analysis.unavailable.items())
            self.query_one(ErrorPanel).show_error(
                f"{len(analysis.unavailable)} program(s) of {analysis.settings.path.name} could not be analysed: {failed}",
                "fix them and press r (the file is reloaded); the other programs are shown",
            )

    def on_run_failed(self, message: RunFailed) -> None:
        """Show the error; the previous results stay on screen."""
        if not self._is_current(message):
            return
        self.running = False
        self._show_error(message.message, message.hint)
        self._mark_stale()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A load-only run ends quietly; a worker that crashed anyway is an error panel."""
        if event.worker.group != "analysis":
            return
        if event.state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            self._load_views()  # the first run is over: the other tabs' imports no longer slow it down
        if event.state == WorkerState.ERROR:
            self.running = False
            error = event.worker.error
            self._show_error(f"{type(error).__name__}: {error}", runner.BUG_HINT)
        elif event.state == WorkerState.SUCCESS and not self.running:
            if not self.query_one(ErrorPanel).shown and self.analysis is None:
                self.query_one(StatusLine).show_done("ready: press r to run")

    @on(Sidebar.Changed)
    def _settings_committed(self) -> None:
        if self.query_one(Sidebar).autorun:
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
        shown = describe_settings(self.analysis.settings, self.analysis.shapes)
        banner.update(Text.assemble(("Stale: ", "bold"), "the results below are for ", shown,
                                    "; the sidebar asks for ", asked, (". Press r to run it.", "bold")))
        if status.state not in ("running", "failed"):
            status.show_stale(asked)

    def _sidebar_differs(self) -> Text | None:
        """What the sidebar asks for that the results on screen are not (None: nothing, or no results)."""
        if self.analysis is None or self.analysis.is_programs:  # a program file has no settings to change
            return None
        shown = self.analysis.settings
        draft = self.query_one(Sidebar).draft_settings(shown)
        if draft is None:
            return Text("a chunk size that is not a number")
        changes = [
            f"{label} {value}" for label, value, before in (
                ("function", draft.function, shown.function),
                ("mesh", draft.mesh.text(), shown.mesh.text()),
                ("chunk", "auto" if draft.chunk_size is None else draft.chunk_size, shown.chunk_size),
            ) if value != before
        ]
        return Text(", ".join(changes), "bold") if changes else None

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
        self.action_show_tab("plans")
        self._refresh_tab("plans")
        self.query_one(PlansView).step_collective(step)

    def _done_text(self, analysis: Any) -> Text:
        """Each plan's runs per call, red when collectives run in a loop, green when once per call."""
        text = Text("done: collective runs/call: ")
        for k, (name, plan) in enumerate(analysis.plans.items()):
            if k:
                text.append(", ")
            text.append(f"{name} {plan.executed.text()}", IN_LOOP if plan.collectives_in_loops else ONCE)
        comparison = self.comparison
        if comparison is not None and comparison.speedup is not None:
            if self.hide_measurements:
                text.append(f"; {comparison.candidate} vs {comparison.baseline}: ···x")
            else:
                text.append(f"; {comparison.speedup_text()}")
        if analysis.warnings:
            what = ("a gradient is not finite" if analysis.has_non_finite_gradient
                    else "the programs' outputs differ" if analysis.is_programs else "the plans' gradients differ")
            text.append(f"; warning: {what} (see Timings)", "bold yellow")
        return text

    def _mark_results(self) -> None:
        self.log(f"startup: first results after {self.profile.mark_results():.3f} s")


def _next_other(names: list[str], current: str, other: str) -> str:
    """The plan after ``current`` in ``names`` (wrapping), never ``other``."""
    k = names.index(current)
    for step in range(1, len(names) + 1):
        name = names[(k + step) % len(names)]
        if name != other:
            return name
    return current
