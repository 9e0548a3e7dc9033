"""The Timings tab: what each plan costs (time, communication, memory) and whether it is right.

With a target (a TPU slice or GPUs), each plan's compile for it, its compiled collective runs there
and its memory per device there (as that compiler lays the arrays out) sit under the CPU's;
nothing runs on a target, so it has no run times.

Every number comes from the :class:`~shardscope.pipeline.analysis.Analysis`; this view formats them. With
``measurements_hidden`` the wall-clock numbers (compile and run times, their ratio, the bars)
show as placeholders, so a screenshot of the tab is the same on every run.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.bar import Bar
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from shardscope.app.base.summaries import SIMULATED, loop_style
from shardscope.app.views.lines import offer_focus
from shardscope.engine.counts import total_runs
from shardscope.measure.speedup import FASTER, HOW as SPEEDUP_HOW
from shardscope.measure.timing import GRADIENT_CHECK
from shardscope.render.report import CACHE_NOTE, FROM_CACHE
from shardscope.app.views.projection import ProjectionPanel
from shardscope.render.text import unavailable_lines

if TYPE_CHECKING:
    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.comparison import Comparison

HIDDEN = "··· ms"
"""What a measured time shows while measurements are hidden."""
BAR_WIDTH = 40
MEMORY_ROWS = (
    ("argument_size_in_bytes", "memory: arguments"),
    ("output_size_in_bytes", "memory: outputs"),
    ("temp_size_in_bytes", "memory: temporaries"),
)
REFERENCE = "reference"
NOT_RUN = Text("not run", "dim")
"""A run time that was not measured: on a target, or where the example arguments do not fit."""
NARROW = 82
"""Under this many columns the cost table drops its edge padding (80 columns, three plans and the reference)."""


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


def error_text(error: float, hidden: bool) -> str:
    """A gradient error, ``7.25e-05``; while measurements are hidden, the power of ten above it,
    ``< 1e-04``: the last digits come from the machine's floating-point rounding (another CPU,
    another XLA thread split of a sum) and would make a screenshot differ from one machine to
    the next."""
    if not hidden or not math.isfinite(error) or error <= 0:
        return f"{error:.2e}"
    return f"< 1e{math.floor(math.log10(error)) + 1:+03d}"


def _columns(analysis: "Analysis") -> list[str]:
    """Every plan of the analysis, then the reference (a program file has none)."""
    return [*analysis.plans] + ([] if analysis.reference is None else [REFERENCE])


def _runs(analysis: "Analysis") -> dict:
    runs = {name: plan.run_s for name, plan in analysis.plans.items()}
    return runs if analysis.reference is None else {**runs, REFERENCE: analysis.reference.run_s}


def _compiles(analysis: "Analysis") -> dict[str, tuple[float | None, bool]]:
    """Each column's compile seconds, and whether a cache served its executable."""
    compiles = {name: (plan.compile_s, plan.compile_from_cache) for name, plan in analysis.plans.items()}
    if analysis.reference is None:
        return compiles
    return {**compiles, REFERENCE: (analysis.reference.compile_s, analysis.reference.compile_from_cache)}


def compile_cell(compile_s: float | None, from_cache: bool, hidden: bool) -> Text:
    """A compile time, ``0.484 s``; ``6.7 ms (cache)`` when JAX's persistent cache served it
    (the time is the read). Hidden measurements hide both: a cache hit depends on earlier runs."""
    if hidden:
        return Text(HIDDEN)
    if compile_s is None:
        return Text("—")
    return Text.assemble(seconds(compile_s), (FROM_CACHE, "dim") if from_cache else "")


def cost_table(analysis: "Analysis", hidden: bool, narrow: bool = False) -> Table:
    """One row per quantity, one column per plan and the unchunked reference (per program, for a
    program file); ``narrow`` drops the padding at the table's edges, which an 80-column tab
    needs to show three plans and the reference whole."""
    table = Table(title="cost per call", title_justify="left", title_style="bold", header_style="bold",
                  pad_edge=not narrow)
    table.add_column("", no_wrap=True)  # a narrow terminal squeezes the numbers, never splits a label
    columns = _columns(analysis)
    for name in columns:
        table.add_column(name, justify="right")
    time_cell = (lambda v: HIDDEN) if hidden else seconds
    compiles, runs = _compiles(analysis), _runs(analysis)

    def run_cell(name: str, statistic: str, style: str = "") -> Text:
        times = runs[name]
        return NOT_RUN if times is None else Text(time_cell(getattr(times, statistic)), style)

    table.add_row("compile", *(compile_cell(compiles[n][0], compiles[n][1], hidden) for n in columns))
    table.add_row("run median", *(run_cell(n, "median", "bold") for n in columns))
    table.add_row("run min", *(run_cell(n, "min") for n in columns))
    table.add_row("run max", *(run_cell(n, "max") for n in columns), end_section=True)
    plans = list(analysis.plans.values())
    dash = () if analysis.reference is None else ("—",)
    if any(p.inspection.measured is not None for p in plans):
        _measured_rows(table, plans, time_cell, dash)
    table.add_row("compiled runs per call", *compiled_runs_cells(plans), *dash)
    table.add_row("jaxpr runs per call", *runs_cells(plans), *dash)
    table.add_row("collective equations in loops", *in_loops_cells(plans), *dash)
    # per call, the compiled plan's bytes, as the Compiled tab counts them (a jit program's jaxpr has no collective)
    table.add_row("bytes moved (per device)", *((p.compiled_bytes or p.jaxpr_bytes).text("B") for p in plans),
                  *dash, end_section=True)
    memories = {n: p.memory for n, p in analysis.plans.items()}
    if analysis.reference is not None:
        memories[REFERENCE] = analysis.reference.memory
    for key, label in MEMORY_ROWS:
        table.add_row(label, *(size((memories[n] or {}).get(key)) for n in columns))
    for target in analysis.target_names:
        table.add_section()
        _target_rows(table, target, plans, time_cell, dash)
    if analysis.reference is not None:  # a program has no reference gradient to be checked against
        table.add_section()
        table.add_row("max |grad - reference|", *(error_text(p.max_abs_err, hidden) if p.max_abs_err is not None else "—"
                                                  for p in plans), "—")
    return table


def _measured_rows(table: Table, plans: list, time_cell, dash: tuple) -> None:
    """``--profile``/``--profile-dir``: each plan's step per call as the profile measured it (the
    slowest device), its collectives' time per call and the compute they overlapped (on the
    device that spent the most in collectives: :attr:`MeasuredPlan.collectives_s`), and the
    target's step estimate beside them."""
    measured = [p.inspection.measured for p in plans]

    def cells(cell) -> list:
        return ["—" if m is None or cell(m) is None else time_cell(cell(m)) for m in measured]

    table.add_row("profile: step (slowest device)", *cells(lambda m: m.step_s), *dash)
    table.add_row("profile: collectives per call", *cells(lambda m: m.collectives_s), *dash)
    table.add_row("profile: overlapped with compute", *cells(lambda m: m.collectives_overlapped_s), *dash)
    estimates = [next((t.costs.step for t in p.targets if t.costs is not None and t.costs.step is not None), None)
                 for p in plans]  # the judged plan's estimate (its compute and memory part: seconds)
    if any(e is not None for e in estimates):
        table.add_row("estimate: step", *("—" if e is None else time_cell(e.seconds) for e in estimates), *dash)
    table.add_section()


def _target_rows(table: Table, target: str, plans: list, time_cell, dash: tuple) -> None:
    """``v5e:2x2 compile``, its compiled collective runs, no run time, and memory per device there."""
    on = [p.on_target(target) for p in plans]
    topology = next(t.topology for t in on if t is not None)

    def cells(cell) -> list:
        return [("—" if t is None else cell(t)) for t in on]

    table.add_row(f"{topology} compile", *cells(lambda t: time_cell(t.compile_s)), *dash)
    table.add_row(f"{topology} run", *cells(lambda t: NOT_RUN), *dash)
    table.add_row(f"{topology} compiled runs", *cells(
        lambda t: Text(total_runs(t.compiled.collectives).text(), loop_style(len(t.compiled.findings)))), *dash)
    for key, label in MEMORY_ROWS:
        table.add_row(f"{topology} {label}", *cells(lambda t: size(t.memory.get(key))), *dash)


def target_notes(analysis: "Analysis") -> list[Text]:
    """What a target's rows are: compiled for the slice, never run, its arrays padded to TPU tiles."""
    notes = []
    for target in analysis.target_names:
        _, plan = analysis.on_target(target)[0]
        laid = " (padded to its tiles)" if plan.machine is not None and plan.machine.pads_to_tiles else ""
        notes.append(Text(f"{plan.topology}: compiled for {target} ({plan.devices} x {plan.device_kind}), never run "
                          f"there: no run times; memory per device as {plan.compiler_words} lays arrays out{laid}, "
                          "compiled runs per call from its compiled module.", "dim"))
    return notes


def ratio_line(analysis: "Analysis", hidden: bool, comparison=None) -> Text:
    """``deferred is 2.22x faster than naive (median of 20 per-round ratios; 95% confidence interval
    2.10-2.35x)``: the comparison's speedup."""
    comparison = comparison or analysis.comparison
    if comparison.baseline == comparison.candidate:
        return Text(f"one program ({comparison.baseline}): nothing to compare its run time with", "dim")
    timed = SIMULATED if analysis.target_names else ""  # beside a target's plans: not that target's timing
    if hidden:
        return Text(f"{timed}{comparison.candidate} vs {comparison.baseline} (per-round ratios of run times): ···x", "bold")
    colour = "bold green" if comparison.verdict == FASTER else "bold yellow"
    return Text(f"{timed}{comparison.speedup_text()}", colour)


def run_bars(analysis: "Analysis", hidden: bool) -> Table:
    """A bar per plan: the median run time, scaled to the slowest median."""
    runs = _runs(analysis)
    longest = max(r.median for r in runs.values()) or 1.0
    grid = Table.grid(padding=(0, 1))
    grid.add_column(min_width=10)
    grid.add_column(width=BAR_WIDTH)
    grid.add_column()
    palette = ("red", "green", "magenta", "yellow", "cyan")
    colours = {name: palette[k % len(palette)] for k, name in enumerate(analysis.plans)} | {REFERENCE: "blue"}
    for name in _columns(analysis):
        median = runs[name].median
        end = BAR_WIDTH / 2 if hidden else BAR_WIDTH * median / longest
        label = HIDDEN if hidden else f"{seconds(median)}  (min {seconds(runs[name].min)}, max {seconds(runs[name].max)})"
        grid.add_row(name, Bar(BAR_WIDTH, 0, end, color="grey50" if hidden else colours[name]), label)
    return grid


def outputs_note(analysis: "Analysis") -> str:
    """What was checked about a program file's outputs: programs have no reference gradient."""
    checks = [
        f"{c.candidate} {'agrees with' if c.agree else 'DIFFERS from'} {c.baseline} ("
        + (c.non_finite_mismatch or f"max |diff| {c.max_abs_diff:.2e}; tolerance {c.tolerance_text()}")
        + (f"; {c.non_finite_note}" if c.non_finite_note and not c.non_finite_mismatch else "") + ")"
        for c in analysis.output_checks
    ]
    if not checks:
        return ("outputs: no two programs take the same example arguments (same shapes and values) and return "
                "outputs of the same structure, so none were compared (a program has no unchunked reference to check against).")
    return "outputs on the same example arguments: " + "; ".join(checks) + "."


def unavailable_notes(analysis: "Analysis") -> list[Text]:
    """``reduced: unavailable (reason)`` for each plan that could not be built here, and what a
    profile given (``--profile-dir``) could not be put on: the plans stand without its times."""
    profile = [Text(f"profile: {error.message}", "yellow") for error in analysis.profile_errors]
    return [Text(line, "yellow") for line in unavailable_lines(analysis)] + profile


def traced_only(analysis: "Analysis") -> Group:
    """What the tab says about an analysis that was traced but not compiled or timed."""
    plans = list(analysis.plans.values())
    table = Table(title="per call (traced only: nothing was compiled or timed)", title_justify="left",
                  title_style="bold", header_style="bold")
    table.add_column("", no_wrap=True)
    for plan in plans:
        table.add_column(plan.name, justify="right")
    table.add_row("collective runs per call", *runs_cells(plans))
    table.add_row("collective equations in loops", *in_loops_cells(plans))
    table.add_row("bytes moved (per device)", *(p.jaxpr_bytes.text("B") for p in plans))
    return Group(table, *unavailable_notes(analysis), Text(),
                 Text("Run the analysis with measurements to see times, memory and errors.", "dim"))


def not_timed(analysis: "Analysis", hidden: bool, narrow: bool = False) -> Group:
    """What the tab says about programs compiled but not run: a program's example arguments do
    not fit in memory here. The compile times, collectives and memory need no run."""
    why = analysis.not_timed
    assert why is not None  # only called when the analysis says why
    said = Text.assemble(("Not run or timed: ", "bold yellow"), (why.message, "yellow"))
    return Group(cost_table(analysis, hidden, narrow), *target_notes(analysis), *unavailable_notes(analysis), Text(),
                 said, Text(f"The plans, the compiled plans and the targets need no run: the other tabs show them. "
                            f"hint: {why.hint}.", "dim"))


def timings_renderable(analysis: "Analysis", hidden: bool, comparison=None, narrow: bool = False) -> Group:
    """The whole tab: the table, the ratio, the bars, and how the times were taken (``narrow``:
    for a tab under :data:`NARROW` columns)."""
    if analysis.not_timed is not None:
        return not_timed(analysis, hidden, narrow)
    if not analysis.measured:
        return traced_only(analysis)
    run_s = next(iter(analysis.plans.values())).run_s
    assert run_s is not None  # measured
    repeats = len(run_s.samples)
    note = analysis.origin.timing_note(repeats, analysis.backend)
    if hidden:
        note += "; measured times hidden, gradient errors shown as the power of ten above them"
    note += "."
    if analysis.timed_on is not None:
        note += " " + analysis.timed_on.meaning()
    note += "\n" + SPEEDUP_HOW
    if not hidden and any(from_cache for _, from_cache in _compiles(analysis).values()):
        note += "\n" + CACHE_NOTE
    note += "\n" + (GRADIENT_CHECK if analysis.reference is not None else outputs_note(analysis))
    warnings = [Text(f"warning: {w}", "bold yellow") for w in analysis.warnings]
    warnings += [Text(f"what-if, left out: {note}", "yellow") for note in analysis.what_if_notes]
    return Group(
        cost_table(analysis, hidden, narrow),
        *target_notes(analysis),
        *warnings,
        *unavailable_notes(analysis),
        Text(),
        ratio_line(analysis, hidden, comparison),
        Text(),
        Text("run time (median)", "bold"),
        run_bars(analysis, hidden),
        Text(),
        Text(note, "dim"),
    )


class TimingsView(Widget):
    """The Timings tab: compile and run times, collectives, bytes, memory and gradient error."""

    measurements_hidden: reactive[bool] = reactive(False)
    """Show placeholders instead of wall-clock numbers (for screenshots that must not change)."""

    DEFAULT_CLASSES = "-empty"
    DEFAULT_CSS = """
    TimingsView {
        height: 1fr;
    }
    TimingsView #timings-placeholder {
        display: none;
        padding: 1 2;
        color: $text-muted;
    }
    TimingsView.-empty #timings-placeholder {
        display: block;
    }
    TimingsView.-empty VerticalScroll {
        display: none;
    }
    TimingsView VerticalScroll {
        height: 1fr;
    }
    TimingsView #timings-body {
        padding: 0 1;
    }
    """

    def __init__(self, *, measurements_hidden: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self._analysis: Analysis | None = None
        self._comparison: Comparison | None = None
        self._narrow = False  # the table was laid out for a tab under NARROW columns
        self.set_reactive(TimingsView.measurements_hidden, measurements_hidden)

    def compose(self) -> ComposeResult:
        """A placeholder until the first analysis, then the table and the bars."""
        yield Static("No analysis yet: press r to run.", id="timings-placeholder")
        with VerticalScroll():
            yield Static(id="timings-body")
            yield ProjectionPanel(measurements_hidden=self.measurements_hidden, id="timings-projection")

    @property
    def analysis(self) -> "Analysis | None":
        """The analysis the tab shows (None before the first)."""
        return self._analysis

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Render the costs of ``analysis``; the speedup of the comparison ``prepared`` holds."""
        self._analysis = analysis
        self._comparison = None if prepared is None else prepared.comparison
        self._render_analysis()
        self.query_one(ProjectionPanel).show_projection(analysis, self._comparison)
        self.remove_class("-empty")
        offer_focus(self.query_one(VerticalScroll), unless_focused=True)

    def on_show(self) -> None:
        """The tab was opened: let the table take the focus, so the arrow keys scroll it."""
        offer_focus(self.query_one(VerticalScroll))

    def watch_measurements_hidden(self) -> None:
        """Re-render when the placeholders are switched on or off."""
        self._render_analysis()
        if self.is_mounted and self._analysis is not None:
            panel = self.query_one(ProjectionPanel)
            panel.measurements_hidden = self.measurements_hidden
            panel.show_projection(self._analysis, self._comparison)

    def on_resize(self) -> None:
        """Lay the table out again when the tab crosses :data:`NARROW` columns."""
        if (self.size.width < NARROW) != self._narrow:
            self._render_analysis()

    def _render_analysis(self) -> None:
        if self._analysis is not None and self.is_mounted:
            self._narrow = self.size.width < NARROW
            self.query_one("#timings-body", Static).update(
                timings_renderable(self._analysis, self.measurements_hidden, self._comparison, self._narrow)
            )


def compiled_runs_cells(plans: list) -> list[Text]:
    """Each plan's collective runs per call in its compiled module (what XLA runs, the
    partitioner's collectives too): red when one runs in a while loop."""
    return [Text("—") if p.compiled is None else Text(p.compiled_runs.text(), loop_style(len(p.compiled.findings)))
            for p in plans]


def runs_cells(plans: list) -> list[Text]:
    """Each plan's runs per call: red when its collectives run in a loop, green when once per call."""
    return [Text(p.jaxpr_runs.text(), loop_style(p.collectives_in_loops)) for p in plans]


def in_loops_cells(plans: list) -> list[Text]:
    """``1 of 1``: each plan's collective equations inside loops, of all of them, coloured as the runs."""
    return [Text(f"{p.collectives_in_loops} of {len(p.collectives)}", loop_style(p.collectives_in_loops)) for p in plans]
