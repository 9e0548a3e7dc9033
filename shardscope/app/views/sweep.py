"""The Sweep tab: run time and memory per device against chunk size, one line per plan.

The sweep compiles every plan at every chunk size, so it runs only when asked (``s`` or the
button), in an exclusive thread worker that checks for cancellation between chunk sizes. The
charts are textual-plotext plots; the budget is a horizontal line, the pick a marked point.
With ``measurements_hidden`` the run times, the time chart's curves and the pick (the fastest
point, a measured result) show as ``···`` or are not drawn, so a screenshot of the tab is the
same on every run; memory per device is computed, not measured, and stays.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.color import Color
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Static
from textual.worker import get_current_worker
from textual_plotext import PlotextPlot

from shardscope.app.base.bindings import SWEEP_BINDINGS
from shardscope.app.base.runner import load_settings_targets, working
from shardscope.app.views.lines import offer_focus
from shardscope.app.widgets.fields import BudgetField
from shardscope.costmodel.quantities import parse_size
from shardscope.pipeline.sweep import Sweep, run_sweep
from shardscope.errors import Cancelled, ShardscopeError
from shardscope.targets.host import devices_needed, ensure_devices
from shardscope.render.sweep import HIDDEN, mib, pick_sentence, sweep_table
from shardscope.render.text import plans_unavailable

if TYPE_CHECKING:
    from shardscope.pipeline.sweep import SweepPoint
    from textual_plotext import Plot
    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis
    from shardscope.config.settings import Settings

PLAN_COLOURS = ("red", "green", "blue", "magenta", "cyan", "yellow")
BUDGET_COLOUR = "orange"


class SweepProgress(Message):
    """The sweep finished another chunk size."""

    def __init__(self, done: int, total: int, chunk_size: int) -> None:
        super().__init__()
        self.done, self.total, self.chunk_size = done, total, chunk_size


class SweepFinished(Message):
    """The sweep is done: every point and the pick, for ``settings``."""

    def __init__(self, sweep: "Sweep", settings: "Settings") -> None:
        super().__init__()
        self.sweep, self.settings = sweep, settings


def swept_alike(one: "Settings", other: "Settings") -> bool:
    """True when a sweep for ``one`` is a sweep for ``other``: the same file, function, mesh, batch
    axes, targets and repeats (the chunk size is what a sweep tries, every one of them)."""
    def key(s: "Settings") -> tuple:
        return s.path, s.function, s.mesh.text(), s.split_axes, s.targets, s.repeats
    return key(one) == key(other)


def stale_sweep_banner(swept: "Settings", shown: "Settings") -> Text:
    """``Stale: this sweep is for linear.py::linear  mesh s=2; the results are for ... mesh s=4.``"""
    def where(s: "Settings") -> Text:
        text = Text.assemble((f"{s.path.name}::{s.function or '(first demo)'}", "bold"), "  mesh ", (s.mesh.text(), "bold"))
        if s.targets:
            text.append(f"  target {', '.join(s.targets)}")
        return text
    return Text.assemble(("Stale: ", "bold"), "this sweep is for ", where(swept), "; the results are now for ",
                         where(shown), (". Press s to sweep them.", "bold"))


class SweepFailed(Message):
    """The sweep failed with a message the user can act on."""

    def __init__(self, message: str, hint: str | None) -> None:
        super().__init__()
        self.message, self.hint = message, hint


def budget_bytes(text: str) -> int | None:
    """The budget the input holds (None when empty); :class:`ShardscopeError` when unreadable."""
    return parse_size(text) if text.strip() else None


def draw_time(plot: PlotextPlot, sweep: "Sweep", hidden: bool = False) -> None:
    """Median run time (ms) against chunk size, one line per plan, the pick marked; with
    ``hidden`` no curve, only the chunk-size axis and a placeholder."""
    plt = plot.plt
    plt.clear_data()
    plt.clear_figure()
    if hidden:
        _placeholder(plot, sweep)
        plot.refresh()
        return
    _plot_series(plt, sweep, lambda p: p.run_s.median * 1e3)
    _mark_pick(plt, sweep, lambda p: p.run_s.median * 1e3)
    _chunk_axis(plt, sweep)
    plt.title("median run time (ms) vs chunk size")
    plot.refresh()


def draw_memory(plot: PlotextPlot, sweep: "Sweep", hidden: bool = False) -> None:
    """Memory per device (KiB) against chunk size, one line per plan, the budget as a line in
    the legend; the pick marked unless ``hidden`` (it is the fastest point that fits, a measured result)."""
    plt = plot.plt
    plt.clear_data()
    plt.clear_figure()
    on_target = sweep.target is not None  # the budget is checked against the slice's memory, so is the chart

    def kib(p: SweepPoint) -> float:
        footprint = p.target_footprint_bytes if on_target else p.footprint_bytes
        assert footprint is not None  # a sweep for a target compiles every point for it
        return footprint / 1024

    _plot_series(plt, sweep, kib)
    if sweep.memory_budget_bytes is not None:
        budget = sweep.memory_budget_bytes / 1024
        plt.hline(budget, BUDGET_COLOUR)  # across the frame; a line plotted from end to end overshot it
        plt.plot([_x(sweep.chunk_sizes[0])], [budget], label=f"budget {mib(sweep.memory_budget_bytes)}",
                 color=BUDGET_COLOUR, marker="braille")  # one point on that line: the budget's entry in the legend
    if not hidden:
        _mark_pick(plt, sweep, kib)
    _chunk_axis(plt, sweep)
    plt.title(f"memory per device{f' on {sweep.target}' if on_target else ''} (KiB) vs chunk size")
    plot.refresh()


def same_series(sweep: "Sweep", value: Callable[[Any], float]) -> list[tuple[list[str], list[tuple[int, float]]]]:
    """Each plan's ``(chunk size, value)`` points, plans with identical points together:
    ``[(["naive"], [...]), (["deferred", "reduced"], [...])]`` in plan order. One line each: a
    second identical line would be drawn over the first and hide it (mlp's deferred and
    reduced plans need the same memory at every chunk size)."""
    groups: list[tuple[list[str], list[tuple[int, float]]]] = []
    for name in sweep.plan_names:
        series = [(p.chunk_size, value(p)) for p in sweep.points if p.plan == name]
        for names, seen in groups:
            if seen == series:
                names.append(name)
                break
        else:
            groups.append(([name], series))
    return groups


def _plot_series(plt: Plot, sweep: "Sweep", value: Callable[[SweepPoint], float]) -> None:
    """One line per distinct series, labelled ``deferred = reduced`` when plans share it, in the
    colour of its first plan (each plan keeps its colour, merged or not)."""
    colours = dict(zip(sweep.plan_names, PLAN_COLOURS))
    for names, series in same_series(sweep, value):
        plt.plot([_x(c) for c, _ in series], [y for _, y in series], label=" = ".join(names),
                 color=colours[names[0]], marker="braille")


def _x(chunk_size: int) -> float:
    """Chunk sizes are divisors, often powers of two: a log2 axis spaces them evenly."""
    return math.log2(chunk_size)


def _chunk_axis(plt: Plot, sweep: "Sweep") -> None:
    plt.xticks([_x(c) for c in sweep.chunk_sizes], [str(c) for c in sweep.chunk_sizes])
    plt.xlabel("chunk size (log scale)")


def _placeholder(plot: PlotextPlot, sweep: "Sweep") -> None:
    """The time chart's frame and chunk-size axis with ``··· (measured times hidden)`` inside,
    in the colours of the axes (plotext's own default would be a white box)."""
    plt, theme = plot.plt, plot.app.theme_variables
    low, high = _x(sweep.chunk_sizes[0]), _x(sweep.chunk_sizes[-1])
    if high == low:  # one chunk size: give the axis some width
        low, high = low - 1, high + 1
    plt.xlim(low, high)
    plt.ylim(0, 1)
    plt.yticks([])
    plt.text(f"{HIDDEN} (measured times hidden)", (low + high) / 2, 0.5, alignment="center",
             color=Color.parse(theme["foreground"]).rgb, background=Color.parse(theme["surface"]).rgb)
    _chunk_axis(plt, sweep)
    plt.title("median run time (ms) vs chunk size")


def _mark_pick(plt: Plot, sweep: "Sweep", value) -> None:
    pick = sweep.pick
    if pick is not None:
        plt.scatter([_x(pick.chunk_size)], [value(pick)], marker="X", color="white", label="pick")


READY = "Press s (or the button) to sweep every chunk size of the current settings."
"""What the tab says before its first sweep."""


class SweepView(Widget):
    """Run the chunk-size sweep for the current settings and chart it."""

    BINDINGS: ClassVar[list[BindingType]] = [*SWEEP_BINDINGS]
    """The tab's keys, for the view on its own; in the app they are app bindings too (:func:`~shardscope.app.base.bindings.tab_key_bindings`)."""

    measurements_hidden: reactive[bool] = reactive(False)
    """Show placeholders instead of wall-clock numbers and the pick (for screenshots that must not change)."""

    DEFAULT_CSS = """
    SweepView {
        height: 1fr;
    }
    SweepView #sweep-controls {
        height: 3;
        padding: 0 1;
    }
    SweepView #sweep-budget-label {
        padding: 1 1 0 0;
    }
    SweepView #sweep-budget {
        width: 24;
    }
    SweepView #sweep-status {
        padding: 0 1;
        height: auto;
    }
    SweepView #sweep-charts {
        height: 20;
    }
    SweepView PlotextPlot {
        width: 1fr;
    }
    SweepView #sweep-table {
        padding: 0 1;
        height: auto;
    }
    SweepView #sweep-stale {
        display: none;
        padding: 0 1;
        background: $warning 30%;
    }
    SweepView.-stale #sweep-stale {
        display: block;
    }
    SweepView.-no-chunks #sweep-controls, SweepView.-no-chunks #sweep-charts, SweepView.-no-chunks #sweep-table {
        display: none;
    }
    """

    def __init__(self, *, measurements_hidden: bool = False, **kwargs: Any) -> None:  # Textual's widget keywords, passed on
        super().__init__(**kwargs)
        self.settings: Settings | None = None
        self.sweep: Sweep | None = None
        self.swept: Settings | None = None  # the settings the sweep shown was made for
        self.running = False
        self.set_reactive(SweepView.measurements_hidden, measurements_hidden)

    def compose(self) -> ComposeResult:
        """The stale banner, budget and button, status, the two charts, the table of points."""
        yield Static(id="sweep-stale")
        with Horizontal(id="sweep-controls"):
            yield Label("Memory budget per device", id="sweep-budget-label")
            yield BudgetField(placeholder="none, e.g. 20KiB", id="sweep-budget")
            yield Button("Run sweep (s)", id="sweep-run", variant="primary")
        yield Static(READY, id="sweep-status")
        with VerticalScroll():
            with Horizontal(id="sweep-charts"):
                yield PlotextPlot(id="sweep-time")
                yield PlotextPlot(id="sweep-memory")
            yield Static(id="sweep-table")

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Remember the settings of the latest analysis: the sweep uses them. A program file has no
        chunks to sweep: the tab says so and shows nothing else. A sweep shown for other settings
        (another mesh) is marked stale until it is swept again."""
        chunked = analysis.origin.chunked
        was_chunked = not self.has_class("-no-chunks")
        self.set_class(not chunked, "-no-chunks")
        self.app.refresh_bindings()  # s is shown on a demo's sweep only
        self.query_one("#sweep-run", Button).disabled = not chunked
        if not chunked:
            self.settings = None
            self.set_class(False, "-stale")
            self._say(Text("The sweep tries every chunk size of a demo's plans; a program file's programs are not "
                           "chunked by shardscope, so there is nothing to sweep.", "dim"))
            return
        self.settings = analysis.settings
        if not was_chunked and not self.running:  # the status said there is nothing to sweep
            if self.sweep is None:
                self._say(Text(READY))
            else:
                self._show(self.sweep)
        self._mark_stale()

    def _mark_stale(self) -> None:
        """Show the stale banner while the sweep shown was made for other settings than the results'."""
        stale = self.swept is not None and self.settings is not None and not swept_alike(self.swept, self.settings)
        if stale:
            assert self.swept is not None and self.settings is not None
            self.query_one("#sweep-stale", Static).update(stale_sweep_banner(self.swept, self.settings))
        self.set_class(stale, "-stale")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``s`` is hidden on a program file: there are no chunks to sweep."""
        if action == "sweep":
            return not self.has_class("-no-chunks")
        return True

    def on_show(self) -> None:
        """The tab was opened: the charts and the table take the focus, so the arrow keys scroll them."""
        offer_focus(self.query_one(VerticalScroll))

    def action_sweep(self) -> None:
        """Start the sweep (a running one is cancelled: the worker is exclusive)."""
        settings = self.settings or getattr(self.app, "settings", None)
        try:
            budget = budget_bytes(self.query_one("#sweep-budget", Input).value)
        except ShardscopeError as exc:
            self._say(Text.assemble((exc.message, "bold red"), f"  hint: {exc.hint}"))
            return
        if self.query_one("#sweep-run", Button).disabled:
            return  # a program file: nothing to sweep (the status says so)
        if settings is None:
            self._say(Text("No settings yet: run an analysis first (r).", "yellow"))
            return
        self.running = True
        self._say(Text(f"sweeping {settings.path.name}: starting...", "bold"))
        self._sweep_worker(settings, budget, getattr(self.app, "max_devices", settings.devices))

    @on(Button.Pressed, "#sweep-run")
    def _button(self) -> None:
        self.action_sweep()

    @on(Input.Submitted, "#sweep-budget")
    def _budget_entered(self) -> None:
        """A new budget re-picks at once when a sweep is shown; else it starts one."""
        if self.sweep is None:
            self.action_sweep()
            return
        try:
            budget = budget_bytes(self.query_one("#sweep-budget", Input).value)
        except ShardscopeError as exc:
            self._say(Text.assemble((exc.message, "bold red"), f"  hint: {exc.hint}"))
            return
        from dataclasses import replace

        self._show(replace(self.sweep, memory_budget_bytes=budget))

    @work(thread=True, exclusive=True, group="sweep", exit_on_error=False)
    def _sweep_worker(self, settings: "Settings", budget: int | None, max_devices: int) -> None:
        """Thread worker: all the JAX work of the sweep; reports with messages only."""
        worker = get_current_worker()

        def progress(done: int, total: int, chunk: int) -> None:
            if worker.is_cancelled:
                raise Cancelled
            self.post_message(SweepProgress(done, total, chunk))

        try:
            with working():  # quitting meanwhile does not wait for the sweep (shardscope.app.leaving)
                ensure_devices(max_devices, needed=devices_needed(max_devices, settings.mesh.devices))
                # the slice the analysis was compiled for: each point is compiled for it too, budgeted there
                targets, target_error = load_settings_targets(settings)
                if target_error is not None:
                    raise target_error
                sweep = run_sweep(settings, None, budget, progress, target=targets[0] if targets else None)
        except Cancelled:
            return
        except ShardscopeError as exc:
            self.post_message(SweepFailed(exc.message, exc.hint))
            return
        except Exception as exc:  # a bug: say so, keep the app running
            self.post_message(SweepFailed(f"{type(exc).__name__}: {exc}", "this looks like a bug"))
            return
        self.post_message(SweepFinished(sweep, settings))

    def on_sweep_progress(self, message: SweepProgress) -> None:
        """Show how far the sweep got."""
        self._say(Text(f"sweeping: chunk size {message.chunk_size} done ({message.done}/{message.total})", "bold"))

    def on_sweep_failed(self, message: SweepFailed) -> None:
        """Say why the sweep failed; the previous charts stay."""
        self.running = False
        self._say(Text.assemble((message.message, "bold red"), f"  hint: {message.hint}" if message.hint else ""))

    def on_sweep_finished(self, message: SweepFinished) -> None:
        """Chart the new sweep."""
        self.running = False
        self.swept = message.settings
        self._show(message.sweep)
        self._mark_stale()

    def watch_measurements_hidden(self) -> None:
        """Re-render the sweep shown when the placeholders are switched on or off (a running sweep
        renders with the new setting when it ends)."""
        if self.sweep is not None and self.is_mounted and not self.running:
            self._show(self.sweep)

    def _show(self, sweep: "Sweep") -> None:
        self.sweep = sweep
        hidden = self.measurements_hidden
        draw_time(self.query_one("#sweep-time", PlotextPlot), sweep, hidden)
        draw_memory(self.query_one("#sweep-memory", PlotextPlot), sweep, hidden)
        said = Text(pick_sentence(sweep, hidden), "bold green" if sweep.pick else "bold yellow")
        for line in plans_unavailable(sweep.unavailable):
            said.append(f"\n{line}", "yellow")
        self._say(said)
        self.query_one("#sweep-table", Static).update(Group(sweep_table(sweep, hidden)))

    def _say(self, text: Text) -> None:
        self.query_one("#sweep-status", Static).update(text)
