"""The Timings tab: what each plan costs (time, communication, memory) and whether it is right.

Every number comes from the :class:`~shardscope.analysis.Analysis`; this view formats them. With
``measurements_hidden`` the wall-clock numbers (compile and run times, their ratio, the bars)
show as placeholders, so a screenshot of the tab is the same on every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.bar import Bar
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive

from shardscope.app.summaries import IN_LOOP, ONCE, bounded, runs_per_call, speedup_text
from shardscope.app.views.pane import RenderedPane

if TYPE_CHECKING:
    from shardscope.analysis import Analysis

HIDDEN = "··· ms"
"""What a measured time shows while measurements are hidden."""
BAR_WIDTH = 40
MEMORY_ROWS = (
    ("argument_size_in_bytes", "memory: arguments"),
    ("output_size_in_bytes", "memory: outputs"),
    ("temp_size_in_bytes", "memory: temporaries"),
)
COLUMNS = ("naive", "deferred", "reference")


def seconds(value: float) -> str:
    """A duration in the unit that reads best: ``211 µs``, ``3.42 ms``, ``1.25 s``."""
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s"


def size(value: int | None) -> str:
    """Bytes with thousands separators, or ``—`` when not known."""
    return "—" if value is None else f"{value:,} B"


def _runs(analysis: "Analysis") -> dict:
    return {**{name: plan.run_s for name, plan in analysis.plans.items()}, "reference": analysis.reference.run_s}


def _compiles(analysis: "Analysis") -> dict:
    return {**{name: plan.compile_s for name, plan in analysis.plans.items()}, "reference": analysis.reference.compile_s}


def cost_table(analysis: "Analysis", hidden: bool) -> Table:
    """One row per quantity, one column per plan and the unchunked reference."""
    table = Table(title="cost per call", title_justify="left", title_style="bold", header_style="bold")
    table.add_column("", no_wrap=True)
    for name in COLUMNS:
        table.add_column(name, justify="right", no_wrap=True)
    time_cell = (lambda v: HIDDEN) if hidden else seconds
    compiles, runs = _compiles(analysis), _runs(analysis)
    table.add_row("compile", *(time_cell(compiles[n]) for n in COLUMNS))
    table.add_row("run median", *(Text(time_cell(runs[n].median), "bold") for n in COLUMNS))
    table.add_row("run min", *(time_cell(runs[n].min) for n in COLUMNS))
    table.add_row("run max", *(time_cell(runs[n].max) for n in COLUMNS), end_section=True)
    _collective_rows(table, analysis, ("—",))
    table.add_section()
    memories = {**{n: p.memory for n, p in analysis.plans.items()}, "reference": analysis.reference.memory}
    for key, label in MEMORY_ROWS:
        table.add_row(label, *(size((memories[n] or {}).get(key)) for n in COLUMNS))
    table.add_section()
    naive, deferred = analysis.plans["naive"], analysis.plans["deferred"]
    table.add_row("max |grad - reference|", *(f"{p.max_abs_err:.2e}" for p in (naive, deferred)), "—")
    return table


def _collective_rows(table: Table, analysis: "Analysis", tail: tuple[str, ...]) -> None:
    """Runs per call (coloured by where they run), collective equations in loops, bytes per call."""
    plans = (analysis.plans["naive"], analysis.plans["deferred"])
    table.add_row("collective runs per call",
                  *(Text(runs_per_call(p), IN_LOOP if p.collectives_in_loops else ONCE) for p in plans), *tail)
    table.add_row("  equations in loops", *(f"{p.collectives_in_loops} of {len(p.collectives)}" for p in plans), *tail)
    table.add_row("bytes per call (per device)", *(bounded(p, size(p.bytes_per_call)) for p in plans), *tail)


def ratio_line(analysis: "Analysis", hidden: bool) -> Text:
    """``deferred is 2.22x faster than naive (...)``: the one wording the status line uses too."""
    return Text.assemble(speedup_text(analysis, hidden), style="bold")


def run_bars(analysis: "Analysis", hidden: bool) -> Table:
    """A bar per plan: the median run time, scaled to the slowest median."""
    runs = _runs(analysis)
    longest = max(r.median for r in runs.values()) or 1.0
    grid = Table.grid(padding=(0, 1))
    grid.add_column(min_width=10)
    grid.add_column(width=BAR_WIDTH)
    grid.add_column()
    colours = {"naive": "red", "deferred": "green", "reference": "blue"}
    for name in COLUMNS:
        median = runs[name].median
        end = BAR_WIDTH / 2 if hidden else BAR_WIDTH * median / longest
        label = HIDDEN if hidden else f"{seconds(median)}  (min {seconds(runs[name].min)}, max {seconds(runs[name].max)})"
        grid.add_row(name, Bar(BAR_WIDTH, 0, end, color="grey50" if hidden else colours[name]), label)
    return grid


def traced_only(analysis: "Analysis") -> Group:
    """What the tab says about an analysis that was traced but not compiled or timed."""
    table = Table(title="per call (traced only: nothing was compiled or timed)", title_justify="left",
                  title_style="bold", header_style="bold")
    table.add_column("", no_wrap=True)
    table.add_column("naive", justify="right", no_wrap=True)
    table.add_column("deferred", justify="right", no_wrap=True)
    _collective_rows(table, analysis, ())
    return Group(table, Text(), Text("Run the analysis with measurements to see times, memory and errors.", "dim"))


def timings_renderable(analysis: "Analysis", hidden: bool) -> Group:
    """The whole tab: the table, the ratio, the bars, and how the times were taken."""
    if not analysis.measured:
        return traced_only(analysis)
    repeats = len(analysis.plans["naive"].run_s.samples)
    note = (
        f"reference: the unchunked VJP over the whole batch. {repeats} timed runs per plan after warm-up, "
        f"interleaved; backend {analysis.backend}"
    )
    if hidden:
        note += "; measured times hidden"
    warnings = [Text(f"warning: {w}", "bold yellow") for w in analysis.warnings]
    return Group(
        cost_table(analysis, hidden),
        *warnings,
        Text(),
        ratio_line(analysis, hidden),
        Text(),
        Text("run time (median)", "bold"),
        run_bars(analysis, hidden),
        Text(),
        Text(note, "dim"),
    )


class TimingsView(RenderedPane):
    """The Timings tab: compile and run times, collectives, bytes, memory and gradient error.

    At its natural width, scrolling sideways when the pane is narrower: labels never wrap.
    """

    NAME = "timings"

    measurements_hidden: reactive[bool] = reactive(False)
    """Show placeholders instead of wall-clock numbers (for screenshots that must not change)."""

    def __init__(self, *, measurements_hidden: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.set_reactive(TimingsView.measurements_hidden, measurements_hidden)

    def render_analysis(self, analysis: "Analysis") -> Group:
        """The whole tab for ``analysis``, measured times hidden or not."""
        return timings_renderable(analysis, self.measurements_hidden)

    def watch_measurements_hidden(self) -> None:
        """Re-render when the placeholders are switched on or off."""
        if self.analysis is not None and self.is_mounted:
            self.body.show_renderable(self.render_analysis(self.analysis))
