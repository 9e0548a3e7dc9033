"""The runs: one exclusive thread worker analyses the settings and only posts messages; the
handlers here show what each message says (stage, file loaded, results, failure), and a second
worker prepares the Diff and Graph tabs of another pair of plans (``b``, ``c``).

A part of :class:`~shardscope.app.app.ShardscopeApp` (its base class). A message of a run that
is no longer the latest (a newer ``r`` cancelled it) is dropped, and so is any message that
lands once the app has stopped running: a worker can finish while the app shuts down (a Pilot
leaving ``run_test``, a quit as the run ends), when the screen and its widgets are already gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import App
from textual.widgets import TabbedContent
from textual.worker import Worker, WorkerState, get_current_worker

from shardscope.app.base import gc_policy, runner
from shardscope.app.base.messages import ComparisonReady, DemoLoaded, LayoutsFileFound, RunFailed, RunFinished, RunMessage, RunProgress
from shardscope.app.profiling import StartupProfile
from shardscope.app.base.tabs import TABS
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.app.views.prepare import prepare
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.sidebar import Sidebar
from shardscope.app.widgets.status import StatusLine, describe_layouts, describe_programs, with_chips
from shardscope.config.settings import Settings
from shardscope.sources.programs import ProgramFile

if TYPE_CHECKING:
    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.sources.demos import DemoFile
    from shardscope.pipeline.analysis import Analysis


READY = "ready: press r to run"
READY_LAYOUTS = "ready: s in 7 Layouts ranks the layouts"
"""The status once a file of ``@shardscope.layouts`` functions only is loaded: r has nothing to run."""


class RunHandling(App[int]):
    """The app's runs and comparisons: started, reported, shown."""

    if TYPE_CHECKING:  # what the app provides (ShardscopeApp, TabRouting)
        settings: Settings
        max_devices: int
        demo_file: DemoFile | ProgramFile | None
        running: bool
        analysis: Any  # as the app holds it (an Analysis once a run is done)
        prepared: PreparedViews | None
        profile: StartupProfile | None
        collector: gc_policy.Collector
        _run_id: int
        _run_settings: Settings | None
        _stale_tabs: set[str]
        _compare_default_next: bool
        _layouts_tab_shown: bool
        _layouts_only: bool

        @property
        def comparison(self) -> Any: ...  # as the app gives it

        def _show_error(self, message: str, hint: str | None, *, refused: bool = False,
                        failed: str | None = None) -> None: ...

        def _done_text(self, analysis: Analysis) -> Text: ...

        def _mark_stale(self) -> None: ...

        def _refresh_tab(self, tab: str | None) -> None: ...

        def _run_pending_tab_action(self) -> None: ...

        def _load_views(self) -> None: ...

        def action_show_tab(self, tab: str) -> None: ...

    @property
    def run_id(self) -> int:
        """How many runs were started (the first, load-only or not, is 1)."""
        return self._run_id

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
        request = runner.RunRequest(self._run_id, self.settings, self.max_devices, self.demo_file, analyze,
                                    mesh_follows_target=not self.query_one(Sidebar).named_mesh)
        self._run_worker(request)

    @work(thread=True, exclusive=True, group="analysis", exit_on_error=False)
    def _run_worker(self, request: runner.RunRequest) -> None:
        """Thread worker: everything JAX, reported back with messages only."""
        worker = get_current_worker()
        if request.analyze:
            self.collector.collect_earlier_runs()
        runner.run(request, self.post_message, lambda: worker.is_cancelled, prepare)

    def _is_current(self, message: RunMessage) -> bool:
        return self.is_running and message.run_id == self._run_id

    def on_run_progress(self, message: RunProgress) -> None:
        """Show the stage the current run reached (and, once it differs, the mesh it runs on)."""
        if not (self._is_current(message) and self.running):
            return
        status = self.query_one(StatusLine)
        if message.mesh is not None and self._run_settings is not None and message.mesh != self._run_settings.mesh:
            self._run_settings = self._run_settings.with_(mesh=message.mesh)  # a slice's chips, once libtpu said
            status.show_settings(self._named(self._run_settings))
        status.show_stage(message.stage, message.fraction, self._run_settings)

    @property
    def programs(self) -> bool:
        """True when the file loaded is a program file (``@shardscope.program`` functions)."""
        return isinstance(self.demo_file, ProgramFile)

    def on_demo_loaded(self, message: DemoLoaded) -> None:
        """Offer the (re)loaded file's functions (or programs) in the sidebar."""
        if not self.is_running:  # shutting down: there is no sidebar any more
            return
        self.demo_file = message.demo_file
        self._layouts_only = False
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
            self.query_one(StatusLine).show_settings(self._named(self.settings))

    def _named(self, settings: Settings) -> Settings:
        """``settings`` naming the function run: the file's first when none was picked (once loaded)."""
        if settings.function is None and self.demo_file is not None and self.demo_file.names:
            return settings.with_(function=self.demo_file.names[0])
        return settings

    def on_run_finished(self, message: RunFinished) -> None:
        """Show a new analysis in every view."""
        if not self._is_current(message):
            return
        self.running = False
        self._run_settings = None
        kept = None if self._compare_default_next else self._programs_compared()
        self._compare_default_next = False
        self.analysis = analysis = message.analysis
        self.prepared = message.prepared
        self.collector.freeze_what_lives()  # until the next run, which collects what this one replaced
        status = self.query_one(StatusLine)
        self.query_one(ErrorPanel).clear()
        if not analysis.origin.chunked:  # a program file: the sidebar lists its programs
            meshes = {name: plan.mesh for name, plan in analysis.plans.items()}
            status.show_described(with_chips(describe_programs(analysis.settings.path.name, list(analysis.plans), meshes,
                                                               analysis.settings.devices, analysis.settings.targets),
                                             analysis.timed_on), results=True)
            self._show_compared()
            self._show_unavailable_programs(analysis)
            if kept is not None and set(kept) <= set(analysis.plans) and kept != (
                    analysis.comparison.baseline, analysis.comparison.candidate):
                self.call_after_refresh(self._compare, *kept)  # r keeps the programs the user compared
        else:
            self.settings = self.settings.with_(function=analysis.function)
            # a target's slice may have started more CPU devices than --max-devices: later runs may use them
            self.max_devices = max(self.max_devices, analysis.settings.mesh.devices)
            self.query_one(Sidebar).show_resolved(analysis.settings)
            status.show_results(analysis.settings, analysis.shapes, analysis.timed_on)
        # Only the visible tab renders now; the others when first shown (a big diff costs seconds).
        self._stale_tabs = {tab for tab, _, _ in TABS}
        self._refresh_tab(self.query_one(TabbedContent).active)
        self._run_pending_tab_action()
        status.show_done(self._done_text(analysis))
        self._mark_stale()
        for warning in analysis.warnings:
            self.notify(warning, title="Warning", severity="warning", timeout=10)
        for note in analysis.what_if_notes:
            self.notify(note, title="What-if: left out", severity="information", timeout=10)
        self.refresh_bindings()
        if self.profile is not None and self.profile.results_s is None:
            self.call_after_refresh(self._mark_results, self.profile)

    def _programs_compared(self) -> tuple[str, str] | None:
        """The (baseline, candidate) a program file's results on screen compare (None: no such results)."""
        if self.analysis is None or self.analysis.origin.chunked:
            return None
        return self.comparison.baseline, self.comparison.candidate

    def _show_compared(self) -> None:
        """Mark the baseline and candidate in the Plans tab's headers and a program file's in the sidebar's list."""
        if self.analysis is None:
            return
        self.query_one(PlansView).show_compared(self.comparison.baseline, self.comparison.candidate)
        if not self.analysis.origin.chunked:
            self.query_one(Sidebar).show_compared(self.comparison.baseline, self.comparison.candidate)

    def _show_unavailable_programs(self, analysis: Analysis) -> None:
        """Programs of the file that failed to trace: the error panel names them; the others show."""
        if analysis.unavailable:
            failed = "; ".join(f"{name}: {reason}" for name, reason in analysis.unavailable.items())
            self.query_one(ErrorPanel).show_error(
                f"{len(analysis.unavailable)} program(s) of {analysis.settings.path.name} could not be analysed: {failed}",
                "fix them and press r (the file is reloaded); the other programs are shown",
            )

    def on_layouts_file_found(self, message: LayoutsFileFound) -> None:
        """A file of ``@shardscope.layouts`` functions only: nothing for the plans' tabs to run, and
        nothing failed. The status line and the sidebar name the file's layouts functions, not a
        demo's settings, and the Layouts tab, which reads them, shows (once, on the first load:
        the user's tab is left alone on a reload)."""
        if not self._is_current(message):
            return
        self.running = False
        self._layouts_only = True
        self._run_settings = None  # the file has no settings to run
        self.query_one(StatusLine).show_described(describe_layouts(message.path_name, message.functions),
                                                  results=False)
        self.query_one(Sidebar).show_layouts_only(message.functions)
        if not self._layouts_tab_shown:
            self._layouts_tab_shown = True
            self.action_show_tab("layouts")

    def on_run_failed(self, message: RunFailed) -> None:
        """Show the error; the previous results stay on screen."""
        if not self._is_current(message):
            return
        self.running = False
        self._show_error(message.message, message.hint)
        self._mark_stale()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A load-only run ends quietly; a worker that crashed anyway is an error panel."""
        if event.worker.group != "analysis" or not self.is_running:
            return
        if event.state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            self._load_views()  # the first run is over: the other tabs' imports no longer slow it down
        if event.state == WorkerState.ERROR:
            self.running = False
            error = event.worker.error
            self._show_error(f"{type(error).__name__}: {error}", runner.BUG_HINT)
        elif event.state == WorkerState.SUCCESS and not self.running:
            if not self.query_one(ErrorPanel).shown and self.analysis is None:
                self.query_one(StatusLine).show_done(READY_LAYOUTS if self._layouts_only else READY)

    def _compare(self, baseline: str, candidate: str) -> None:
        """Show ``candidate`` against ``baseline`` once the worker has prepared the Diff and Graph tabs."""
        self.query_one(StatusLine).show_done(f"comparing {candidate} with {baseline}...")
        self._compare_worker(self._run_id, self.analysis, baseline, candidate)

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def _compare_worker(self, run_id: int, analysis: Analysis, baseline: str, candidate: str) -> None:
        """Thread worker: the diff and the drawings of another pair of plans."""
        worker = get_current_worker()
        with runner.working():
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

    def _mark_results(self, profile: StartupProfile) -> None:
        self.log(f"startup: first results after {profile.mark_results():.3f} s")
