"""The Compiled tab: the compiled plan of every program, what XLA runs.

The jaxpr says what a program writes; the compiled module says what runs, the partitioner's
collectives too (a jit with shardings has none in its jaxpr). Per program: its while loops with
their trip counts, every compiled collective with its runs per call, bytes, mesh axes, who wrote
it (the program or the partitioner) and its verdict, then each one's details: the jaxpr
collectives it comes from (``psum_invariant of params['W'] -> all-reduce.2 in the while body,
x4/call``), its source line and ``op_name``, the verdict's reason and the fix. ``n``/``N`` walk
the collectives of every program in turn. The backend is always named: GPU and TPU compilers
may move a collective that the CPU keeps in its loop. With a target (the sidebar's target
field, ``--target``), every program's plan there comes first: one verdict per program, by the
target's own verdicts on what its compiler leaves in loops, and every collective the target runs
with the CPU collectives it carries (stayed in the loop, left it, combined, pipelined, removed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from rich import box
from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual import work
from textual.events import Resize
from textual.message import Message
from textual.worker import get_current_worker

from shardscope.app.base import runner

from shardscope.app.base.summaries import loop_style
from shardscope.app.views.lines import lay_out, offer_focus, whole_cells_width, worker_console
from shardscope.app.views.pane import RenderedPane
from shardscope.engine.hlo.roofline import seconds_words
from shardscope.engine.counts import runs_per_call
from shardscope.render.dispatches import render_dispatches
from shardscope.render.findings import collectives_run
from shardscope.render.partitioner import warning_lines
from shardscope.render.targets import outcome_style, plan_notes, plan_verdict, row_cells
from shardscope.verdict_kinds import DEAD, style_of

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from rich.segment import Segment

    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.engine.hlo.measured import MeasuredCollective
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledLoop
    from shardscope.engine.hlo.target_plan import TargetPlan
    from shardscope.engine.hlo.paired import PairedCollective
    from shardscope.pipeline.analysis import Analysis, PlanResult

SELECTED = "reverse"
"""How the collective ``n``/``N`` went to stands out."""

Target = tuple[str, int]
"""A collective ``n``/``N`` can go to: the program's name and the collective's position in it."""


def backend_note(backend: str, targets: "Sequence[TargetPlan]" = ()) -> Text:
    """Whose compiler produced these results, and what other compilers may do differently;
    ``targets`` holds one plan of each target (which says what its machine is)."""
    text = Text(f"These are the {backend} compiler's results. ", "italic")
    if targets:
        kinds = "/".join(dict.fromkeys(plan.compiler.removeprefix("XLA:") for plan in targets))
        machines = " and ".join(dict.fromkeys(plan.machine_words for plan in targets))
        names = ", ".join(plan.target for plan in targets)
        text.append(f"The {kinds} compiler's plans for {names} are at the top: compiled for {machines}, "
                    "never run there (no timings).", "dim italic")
        return text
    text.append(
        "GPU and TPU compilers may hoist collectives out of loops or combine them differently: "
        "type a target in the sidebar's target field (e.g. tpu:v5e:2x2 or gpu:h100:8) to see what its compiler does.",
        "dim italic",
    )
    return text


def plan_heading(plan: "PlanResult") -> Text:
    """``naive: 2 compiled collectives from 3 collective equations, 18 runs/call, 17,024 B/call; 2 flagged``."""
    compiled, runs, moved = plan.compiled, plan.compiled_runs, plan.compiled_bytes
    assert compiled is not None and runs is not None and moved is not None  # only compiled plans are drawn here
    count, equations = len(compiled.collectives), len(plan.collectives)
    in_loops = len(compiled.findings)
    text = Text(f"{plan.name}: ", "bold")
    text.append(f"{count} compiled collective{'' if count == 1 else 's'}", "bold")
    text.append(f" from {equations} collective equation{'' if equations == 1 else 's'}" if equations
                else f" (none in the jaxpr: the partitioner wrote {'it' if count == 1 else 'them'})" if count else "")
    text.append(", ")
    text.append(runs_per_call(runs.text()), loop_style(in_loops))
    text.append(f", {moved.text('B')}/call, {in_loops} in while loops")
    flagged = len(plan.flagged)
    text.append(f"; {collectives_run(flagged)} in a loop without needing to"
                if flagged else "; none runs in a loop without needing to", loop_style(flagged))
    return text


def loops_line(loops: "tuple[CompiledLoop, ...]") -> Text:
    """``while loops: while.10 x4 (train.py:42 (step))``, or that there are none."""
    text = Text("  while loops: ", "dim")
    if not loops:
        return text.append("none", "dim")
    for k, loop in enumerate(loops):
        if k:
            text.append(" · ", "dim")
        text.append(f"{loop.name} ", "bold")
        text.append(f"x{'?' if loop.trip_count is None else loop.trip_count}", "bold red")
        if loop.source:
            text.append(f" ({loop.source})", "dim")
    return text


TABLE_COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("#", "right"), ("collective", "left"), ("value", "left"), ("loops", "left"), ("runs/call", "right"),
    ("B/call", "right"), ("by", "left"), ("verdict", "left"), ("jaxpr", "left"))
NARROW_TABLE = ("#", "collective", "value", "loops", "runs/call", "B/call", "verdict")
"""The collectives table under :data:`NARROW` columns: who wrote each one and the jaxpr's
primitives are in its details below the table, and at 80 columns the verdict lost its end."""


VALUE_WIDTHS = (12, 40)
"""The collectives table's value column is as wide as its longest value name (with the comma
that lists it: ``grad(p['b1']),``), between these: a value wraps between names, never inside
one, which left a lone ``),`` on a line of its own."""


def widest_word(texts: "Iterable[str]", bounds: tuple[int, int]) -> int:
    """The widest word (what wrapping keeps whole) of ``texts``, within ``bounds``."""
    widest = max((len(word) for text in texts for word in text.split()), default=0)
    return max(bounds[0], min(widest, bounds[1]))


def collectives_table(plan: "PlanResult", selected: int | None, narrow: bool = False) -> Table:
    """One row per collective: kind and axes, value, loops, runs, bytes, author, verdict, the
    jaxpr's (``narrow``: :data:`NARROW_TABLE`)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold", collapse_padding=True)
    measured = plan.inspection.measured  # --profile, --profile-dir: the measured times beside each row
    names = [name for name, _ in TABLE_COLUMNS if not narrow or name in NARROW_TABLE]
    if measured is not None:
        names[names.index("B/call") + 1:names.index("B/call") + 1] = ["measured/call", "per run"]
    justified = dict(TABLE_COLUMNS) | {"measured/call": "right", "per run": "right"}
    columns: list[tuple[str, JustifyMethod]] = [(name, justified[name]) for name in names]
    value_width = widest_word((c.value for c in plan.paired), VALUE_WIDTHS)
    for column, justify in columns:
        table.add_column(column, justify=justify, no_wrap=column not in ("value", "jaxpr"), overflow="fold",
                         min_width=value_width if column == "value" else None)
    for i, c in enumerate(plan.paired):
        kind = c.verdict_kind if c.in_loop or c.verdict_kind == DEAD else "-"
        times = [] if measured is None else measured_cells(measured.of(c.compiled.name) if c.compiled else None)
        cells: dict[str, RenderableType] = {
            "#": str(i + 1), "collective": _collective(c), "value": c.value, "loops": _trips(c),
            "runs/call": Text(c.runs.text(), loop_style(c.in_loop)), "B/call": c.bytes_count.text(),
            "by": c.written_by, "verdict": Text(kind, style_of(kind)), "jaxpr": _from_jaxpr(c),
            **dict(zip(("measured/call", "per run"), times))}
        table.add_row(*(cells[name] for name, _ in columns), style=SELECTED if i == selected else None)
    return table


def measured_cells(found: "MeasuredCollective | None") -> list[str]:
    """A collective's measured time per call (its slowest device) and per run, or ``not run``."""
    if found is None:
        return ["not run", ""]
    return [seconds_words(found.per_step_s), seconds_words(found.per_run_s)]


def details(plan: "PlanResult", index: int, selected: bool) -> Table:
    """One collective's details: the pairing, its source and ``op_name``, the verdict and the fix
    (``▶`` in the margin when ``n``/``N`` went to it)."""
    c = plan.paired[index]
    head = Text(f"{plan.name} #{index + 1} ", SELECTED if selected else "bold")
    head.append(c.pairing(), "bold" if c.flagged else "")
    lines: list[RenderableType] = []
    if c.source or (c.compiled is not None and c.compiled.op_name):
        where = Text(f"source {c.source or 'unknown'}", "dim")
        if c.compiled is not None and c.compiled.op_name:
            where.append(f" · op_name {c.compiled.op_name}", "dim")
        lines.append(where)
    if not c.dead:
        verdict = c.verdict
        said = Text(verdict.kind, style_of(verdict.kind))
        if verdict.reason:
            said.append(f": {verdict.reason}")
        lines.append(said)
        if verdict.fix:
            lines.append(Text.assemble(("fix: ", "bold"), verdict.fix))
    grid = Table.grid()
    grid.add_column(width=2, no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row(Text("▶" if selected else "", "bold"), Group(head, Padding(Group(*lines), (0, 0, 0, 2))))
    return grid


def plan_blocks(plan: "PlanResult", selected: Target | None,
                narrow: bool = False) -> list[tuple[RenderableType, Target | None]]:
    """The blocks of one program, each with the collective it is about (None for the heading, the
    loops and the table; ``narrow``: for a tab under :data:`NARROW` columns)."""
    at = selected[1] if selected is not None and selected[0] == plan.name else None
    assert plan.compiled is not None  # only compiled plans are drawn here
    blocks: list[tuple[RenderableType, Target | None]] = []
    if plan.dispatches is not None:  # what runs: each call's own module; the one jit below does not run
        blocks += [(render_dispatches(plan.name, plan.dispatches), None), (Text(), None),
                   (Text(f"{plan.name} compiled as one jax.jit (XLA merges the calls; not what runs as written):",
                         "dim"), None)]
    blocks += [(plan_heading(plan), None), (loops_line(plan.compiled.loops), None)]
    blocks += [(block, None) for block in partitioner_blocks(plan)]
    if not plan.paired:
        return blocks + [(Text("  no collective: nothing moves between devices", "dim"), None), (Text(), None)]
    blocks.append((collectives_table(plan, at, narrow), None))
    blocks += [(details(plan, i, i == at), (plan.name, i)) for i in range(len(plan.paired))]
    return blocks + [(Text(), None)]


def partitioner_blocks(plan: "PlanResult") -> list[Text]:
    """What the partitioner warned about while compiling the program (the log line it printed
    on stderr, kept from the terminal), one finding each: its first line red."""
    compiled = plan.compiled
    if compiled is None:
        return []
    return [Text(f"  {line}", "bold red" if k == 0 else "") for warning in compiled.partitioner
            for k, line in enumerate(warning_lines(warning, compiled.collectives))]


def compiled_blocks(analysis: "Analysis", selected: Target | None = None,
                    narrow: bool = False) -> list[tuple[RenderableType, Target | None]]:
    """Every program's blocks, under the backend line, with the note on other compilers last; with
    a target, its plans first."""
    plans = list(analysis.plans.values())
    if plans[0].compiled is None:
        return [(Text(f"Traced only: the {analysis.origin.noun}s were not compiled, so there is no compiled plan "
                      "to show.", "dim"), None)]
    backend = plans[0].compiled.backend
    # a user who picked a target reads its plans and verdicts first; the CPU's follow
    blocks: list[tuple[RenderableType, Target | None]] = [*target_blocks(analysis, narrow)]
    blocks += [(Text.assemble(("backend: ", "bold"), (backend, "bold cyan")), None), (Text(), None)]
    for plan in plans:
        blocks += plan_blocks(plan, selected, narrow)
    firsts = [analysis.on_target(target)[0][1] for target in analysis.target_names]
    return blocks + [(backend_note(backend, firsts), None)]


def target_heading(target: str, plan: "TargetPlan") -> Text:
    """``on tpu:v5e:2x2: 4 x TPU v5 lite, compiled for, never run there``."""
    return Text.assemble(("on ", "bold"), (target, "bold cyan"),
                         (f": {plan.devices} x {plan.device_kind}, compiled for {plan.machine_words}, never run there", "dim"))


NARROW = 100
"""Under this many columns the placements table keeps the runs and the placement, not the loops
and the target's instruction names (at 80 columns the placement, its point, had no room left)."""

WIDE_COLUMNS = ("collective", "value", "loops", "runs/call", "verdict", "CPU collective", "CPU runs", "placement")
NARROW_COLUMNS = ("collective", "value", "runs/call", "CPU runs", "placement")


_MIN_WIDTHS = {"value": 18, "placement": 10}
"""The placements table's folding columns keep this much: a gradient's label whole
(``grad(params['Wh'])``, or the longest label when shorter; narrow, 10: the runs and the
placement come first), the placement's first words."""


def placements_table(plan: "TargetPlan", narrow: bool = False) -> Table:
    """Every collective the target's compiler runs for one program, its verdict there and the CPU
    collectives it carries (``narrow``: its runs per call on each side and the placement only);
    their runs add up to the target's runs per call."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold", collapse_padding=True)
    rows = plan.rows
    longest = max((len(row.value) for row in rows), default=0)
    widths = {**_MIN_WIDTHS, "value": 10 if narrow else max(10, min(longest, _MIN_WIDTHS["value"]))}
    columns = NARROW_COLUMNS if narrow else WIDE_COLUMNS
    for column in columns:
        table.add_column(column, justify="right" if "runs" in column else "left",
                         no_wrap=column not in ("value", "placement"), overflow="fold",
                         min_width=widths.get(column))
    moved = {id(p) for p in plan.moved}
    for row in rows:
        cells = {**row_cells(row), "collective": _collective(row.collective).plain if row.collective is not None else "-"}
        styles = {"collective": "bold", "runs/call": loop_style(row.collective is not None and row.collective.in_loop),
                  "verdict": style_of(cells["verdict"]),
                  "placement": "check.failed" if row.finding else
                  "check.moved" if any(id(p) in moved for p in row.cpu) else ""}
        table.add_row(*(Text(cells[column], styles.get(column, "")) for column in columns))
    return table


def target_blocks(analysis: "Analysis", narrow: bool = False) -> list[tuple[RenderableType, None]]:
    """For each target: every program's verdict there, its loops and each CPU collective's placement."""
    blocks: list[tuple[RenderableType, None]] = []
    for target in analysis.target_names:
        plans = analysis.on_target(target)
        blocks.append((target_heading(target, plans[0][1]), None))
        blocks.append((Text(), None))
        for plan, on_target in plans:
            verdict = plan_verdict(f"the {plan.title}", on_target)
            blocks.append((Text.assemble((f"{plan.name}: ", "bold"), (verdict, outcome_style(on_target))), None))
            for note, style in plan_notes(on_target):
                blocks.append((Text(f"  {note}", style), None))
            blocks.append((loops_line(on_target.compiled.loops), None))
            if on_target.comparison.placements:
                blocks.append((placements_table(on_target, narrow), None))
            else:
                blocks.append((Text("  no collective on the CPU: nothing to place", "dim"), None))
            blocks.append((Text(), None))
    return blocks


def targets(analysis: "Analysis") -> list[Target]:
    """Every collective ``n``/``N`` walks, program by program."""
    return [(plan.name, i) for plan in analysis.plans.values() if plan.compiled is not None
            for i in range(len(plan.paired))]


def hlo_renderable(analysis: "Analysis") -> Group:
    """The whole tab as one renderable (what the tab shows, nothing selected)."""
    return Group(*(block for block, _ in compiled_blocks(analysis)))


def _collective(c: "PairedCollective | CompiledCollective") -> Text:
    """``all-reduce[s]``: the collective's kind and mesh axes (its instruction's name, which the
    compiler picks, is in its details)."""
    axes = "?" if c.axes is None else ",".join(c.axes)
    return Text(f"{c.kind}[{axes}]", "bold")


def _trips(c: "PairedCollective") -> str:
    return " x ".join("?" if t is None else str(t) for t in c.loop_trip_counts) or "-"


def _from_jaxpr(c: "PairedCollective") -> str:
    """``psum_invariant``, ``2 x psum_invariant``, ``-`` for the partitioner's, ``dead`` for one that never runs."""
    if c.dead:
        return f"{c.label} (dead: removed)"
    if not c.equations:
        return "-"
    names = ", ".join(c.primitives)
    return f"{len(c.equations)} x {names}" if len(c.equations) > 1 else names


class _AtItsWidth:
    """The tab's blocks as one renderable, narrow or not by the width it is laid out at (the
    body's, once it has one: the tab drawn before it was laid out read ``deferrab`` at 80 columns)."""

    def __init__(self, analysis: "Analysis", selected: Target | None) -> None:
        self.analysis, self.selected = analysis, selected

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The blocks for ``options.max_width``."""
        yield Group(*(block for block, _ in compiled_blocks(self.analysis, self.selected,
                                                            narrow=options.max_width < NARROW)))


LAY_OUT_HERE = 64
"""Up to this many collectives (every program's, every target's) the tab is laid out on the UI
thread, at once (about 3 ms each here: the table and every one's details); more are laid out in a
thread worker, the tab saying so meanwhile. A program of 2,605 compiled collectives took the UI
thread for tens of seconds: keys, ``q`` and signals waited for it."""


def collective_count(analysis: "Analysis") -> int:
    """How many collectives the tab lays out: every program's, and every target's placements."""
    cpu = sum(len(plan.paired) for plan in analysis.plans.values() if plan.compiled is not None)
    return cpu + sum(len(on_target.comparison.placements) for target in analysis.target_names
                     for _, on_target in analysis.on_target(target))


class Layout:
    """The tab's blocks laid out: the lines, where each collective's details start, where the
    plans on a target start (None without one)."""

    def __init__(self) -> None:
        self.lines: list[list[Segment]] = []
        self.starts: dict[Target, int] = {}
        self.slice_start: int | None = None


def lay_out_blocks(analysis: "Analysis", selected: Target | None, width: int, console: Console,
                   is_cancelled: "Callable[[], bool]" = lambda: False,
                   progress: "Callable[[int, int], None]" = lambda done, total: None) -> Layout | None:
    """Every block of the tab laid out ``width`` wide (pure Rich: a worker thread may call it with
    a console of its own); ``progress(done, total)`` after each collective's details; None when
    cancelled half-way."""
    blocks = compiled_blocks(analysis, selected, narrow=width < NARROW)
    total = sum(1 for _, target in blocks if target is not None)
    headings = tuple(f"on {name}:" for name in analysis.target_names)
    layout, done = Layout(), 0
    for block, target in blocks:
        if is_cancelled():
            return None
        if target is not None:
            layout.starts[target] = len(layout.lines)
            done += 1
            progress(done, total)
        if layout.slice_start is None and headings and isinstance(block, Text) and block.plain.startswith(headings):
            layout.slice_start = len(layout.lines)
        # a table narrower than its cells need is laid out at that width: the view scrolls sideways to it
        needed = whole_cells_width(console, block) if isinstance(block, Table) else 0
        layout.lines += lay_out(console, block, max(width, 20, needed))
    return layout


NO_TARGET = ("These results were compiled for the CPU only: type a target in the sidebar's Target field "
             "(tpu:v5e:2x2, gpu:h100:8) and press Enter (Shift+Tab from the tab bar goes there, opening the sidebar), or open "
             "the app with --target tpu:v5e:2x2; t then goes to its plans.")
"""What ``t`` says in the Compiled tab when the analysis has no target (a TPU slice or GPUs)."""


class HloView(RenderedPane):
    """The Compiled tab: every program's compiled plan; ``n``/``N`` go from collective to collective.

    A large analysis (over :data:`LAY_OUT_HERE` collectives) is laid out in a thread worker: the
    tab shows a progress line meanwhile, and the UI thread stays free for keys and signals.
    """

    NAME = "hlo"
    FIT_WIDTH = True
    RESERVE_SCROLLBAR = True  # the compiled plans with their details are taller than the tab (all but the smallest)

    class Progress(Message):
        """The worker laid out ``done`` of ``total`` collectives' details (layout ``generation``)."""

        def __init__(self, generation: int, done: int, total: int) -> None:
            super().__init__()
            self.generation, self.done, self.total = generation, done, total

    class LaidOut(Message):
        """The worker laid the tab out (layout ``generation``)."""

        def __init__(self, generation: int, layout: Layout) -> None:
            super().__init__()
            self.generation, self.layout = generation, layout

    def __init__(self, lay_out_here: int = LAY_OUT_HERE, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lay_out_here = lay_out_here
        """Up to this many collectives the tab is laid out on the UI thread (:data:`LAY_OUT_HERE`)."""
        self._analysis: "Analysis | None" = None
        self._selected: int = -1  # position in targets(analysis); -1: none yet
        self._starts: dict[Target, int] = {}  # the first line of each collective's details
        self._slice_start: int | None = None  # the first line of the plans on a target (a TPU slice, GPUs)
        self._generation = 0  # the layout asked for last: a worker's older one is dropped
        self._laying_out = False  # a worker is laying the tab out
        self._then: "Callable[[], None] | None" = None  # what to do once the worker's layout shows (scroll)
        self._pending: "Callable[[], None] | None" = None  # that, once shown, until the body has its height
        self._has_layout = False  # the body shows a layout of the analysis (not its progress line)

    @property
    def laying_out(self) -> bool:
        """True while a worker lays the tab out (the tab shows its progress)."""
        return self._laying_out

    def render_analysis(self, analysis: "Analysis") -> RenderableType:
        """The compiled plans of ``analysis``."""
        return hlo_renderable(analysis)

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Show ``analysis`` from the top, nothing selected."""
        self._analysis, self._selected, self._then = analysis, -1, None
        self._starts, self._slice_start, self._has_layout = {}, None, False
        self._draw()
        self.remove_class("-empty")
        offer_focus(self.body, unless_focused=True)

    def step_collective(self, step: int) -> Target | None:
        """Go to the next (``step=1``) or previous (``-1``) collective, wrapping; None when there is none."""
        walk = targets(self._analysis) if self._analysis is not None else []
        if not walk:
            return None
        self._selected = (0 if step > 0 else len(walk) - 1) if self._selected < 0 else (self._selected + step) % len(walk)
        target = walk[self._selected]
        self._draw(then=lambda: self.body.scroll_to(y=max(self._starts.get(target, 0) - 2, 0), animate=False))
        return target

    @property
    def selected(self) -> Target | None:
        """The collective ``n``/``N`` went to last (None before the first)."""
        walk = targets(self._analysis) if self._analysis is not None else []
        return walk[self._selected] if 0 <= self._selected < len(walk) else None

    def on_resize(self, event: Resize) -> None:
        """Lay the blocks out again at the new width, where the view was."""
        if self._analysis is not None:
            y = self.body.scroll_offset.y
            # a scroll still to come (asked for during a layout, or waiting for the layout's
            # height) is kept: the view's offset is not where it is going yet
            self._draw(then=self._then or self._pending or (lambda: self.body.scroll_to(y=y, animate=False)))

    def _draw(self, then: "Callable[[], None] | None" = None) -> None:
        """Lay every block out at the body's width and remember where each collective's details
        start, then do ``then`` (a scroll); a large analysis is laid out in :meth:`_lay_out_worker`.

        The width always leaves room for the vertical scrollbar, here and when the body lays the
        blocks out itself (before it has a width): the blocks are longer than the view, and the
        scrollbar they bring appears without a resize, so lines laid out under it would lose
        their last columns, and a width taken from whether it shows yet would differ with when
        the drawing ran (:attr:`LinesView.fit_width`).
        """
        body = self.body
        width = body.fit_width
        if self._analysis is None:
            return
        self._generation += 1
        self._pending = None  # a scroll waiting for the last layout now waits for this one (``then``)
        large = collective_count(self._analysis) > self.lay_out_here
        if width <= 0:  # not laid out yet: laid out once it has a width (the resize draws it again)
            if large:  # the body shows once the tab is laid out: then it has a width
                # kept for a resize meanwhile, which draws again with it (an n/N taken now is not lost)
                self._then, self._laying_out = then, True
                self._show_progress(0, len(targets(self._analysis)))
                self.call_after_refresh(self._draw_if_current, self._generation, then)
            else:
                body.show_renderable(_AtItsWidth(self._analysis, self.selected), fit_width=True)
            return
        if large:
            self._then, self._laying_out = then, True
            if not self._has_layout:  # else the last layout shows until the new one is ready
                self._show_progress(0, len(targets(self._analysis)))
            self._lay_out_worker(self._analysis, self.selected, width, self._generation)
            return
        layout = lay_out_blocks(self._analysis, self.selected, width, self.app.console)
        assert layout is not None  # never cancelled here
        self._show_layout(layout)
        if then is not None:
            then()

    def _draw_if_current(self, generation: int, then: "Callable[[], None] | None") -> None:
        """Draw, unless another drawing was asked for since ``generation``."""
        if generation == self._generation:
            self._draw(then)

    def _show_progress(self, done: int, total: int) -> None:
        self.body.show_lines([Text(f"Laying out the compiled plans: {done:,} of {total:,} collectives' details...",
                                   "italic")])

    @work(thread=True, exclusive=True, group="hlo-layout", exit_on_error=False)
    def _lay_out_worker(self, analysis: "Analysis", selected: Target | None, width: int, generation: int) -> None:
        """Thread worker: lay the tab out off the UI thread, reporting its progress by messages."""
        worker = get_current_worker()
        step = [0]

        def progress(done: int, total: int) -> None:
            if done == total or done >= step[0]:
                step[0] = done + max(total // 20, 1)
                self.post_message(self.Progress(generation, done, total))

        console = worker_console()
        with runner.working():  # quitting meanwhile does not wait for the layout (shardscope.app.leaving)
            try:
                layout = lay_out_blocks(analysis, selected, width, console, lambda: worker.is_cancelled, progress)
            except Exception as exc:  # a rendering bug: say so in the tab, not "laying out" for ever
                layout = Layout()
                layout.lines = lay_out(console, Text(f"The Compiled tab could not be laid out: {type(exc).__name__}: "
                                                     f"{exc} ({runner.BUG_HINT})", "bold red"), max(width, 20))
        if layout is not None:
            self.post_message(self.LaidOut(generation, layout))

    def on_hlo_view_progress(self, message: Progress) -> None:
        """Say how far the worker got, while nothing was shown yet."""
        if message.generation == self._generation and not self._has_layout:
            self._show_progress(message.done, message.total)

    def on_hlo_view_laid_out(self, message: LaidOut) -> None:
        """Show the worker's layout (the latest asked for), then do what waited for it."""
        if message.generation != self._generation:
            return
        self._laying_out = False
        self._show_layout(message.layout)
        then, self._then = self._then, None
        if then is not None:  # once the body has taken the new lines' height
            self._pending = then
            self.call_after_refresh(self._run_pending, then)

    def _run_pending(self, then: "Callable[[], None]", again: bool = True) -> None:
        """Do the scroll that waited for a layout, unless a later drawing took it over; once more
        after the next screen update (the body may take the new lines' height only then, and a
        scroll past the old height stops short)."""
        if self._pending is then:
            then()
            if again:
                self.call_after_refresh(self._run_pending, then, False)
            else:
                self._pending = None

    def _show_layout(self, layout: Layout) -> None:
        self._starts, self._slice_start, self._has_layout = layout.starts, layout.slice_start, True
        self.body.show_segments(layout.lines)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``t`` is greyed out until there are results (without a target it says how to set one)."""
        if action == "to_target":
            return True if self._analysis is not None else None
        return True

    def action_to_target(self) -> None:
        """Go to the plans compiled for the target (``t``: a TPU slice or GPUs); without one, say how to set one."""
        if self._laying_out:  # the lines are not counted yet: go there once they are
            self._then = self._to_target_once_laid_out
            return
        if not self.scroll_to_targets():
            self.notify(NO_TARGET, title="No target", severity="information", timeout=8)

    def _to_target_once_laid_out(self) -> None:
        if not self.scroll_to_targets():
            self.notify(NO_TARGET, title="No target", severity="information", timeout=8)

    def scroll_to_targets(self) -> bool:
        """Scroll to the plans on the first target (False when the analysis has none)."""
        if self._slice_start is None and self._analysis is not None and not self._laying_out:
            self._draw()  # laid out at the body's width now: the lines are counted
        if self._slice_start is None:
            return False
        self.body.scroll_to(y=self._slice_start, animate=False)
        return True
