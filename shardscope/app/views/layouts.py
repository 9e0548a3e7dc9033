"""The Layouts tab: the file's ``@shardscope.layouts`` function ranked on a target, a row per
candidate as it compiles (``shardscope layouts`` in the explorer).

``s`` (or the button) compiles every candidate for the target typed beside it (default: the
app's ``--target``), in an exclusive thread worker that posts each candidate as it is made and
checks for cancellation between them; the table is re-ranked with each. Clicking a column's
header sorts by it (again: the other way); Enter on a row opens that candidate's compiled plan.
The candidates compile in the app's process, over its CPU devices: a target of more devices than
the app started needs the app opened with ``--target`` (as the other tabs do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Label, Static
from textual.worker import get_current_worker

from shardscope.app.base.bindings import LAYOUTS_BINDINGS
from shardscope.app.base.runner import working
from shardscope.pipeline.layout_ranking import LayoutRanking, RankedLayout
from shardscope.errors import ShardscopeError
from shardscope.render.layouts import (candidate_plan, collectives_cell, memory_cell, per_chip_cell, step_cell,
                                       utilization_cell)

if TYPE_CHECKING:
    from pathlib import Path

    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.config.layout_candidates import Candidate
    from shardscope.config.settings import Settings
    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.layout_compile import CompiledCandidate
    from shardscope.sources.layouts import LayoutFunction
    from shardscope.targets.base import TargetDevices

DEFAULT_TARGET = "tpu:v5e:2x4"
"""The target typed in when the app has none."""

COLUMNS = ("rank", "mesh", "options", "memory", "step", "per chip", "MFU", "top collectives")


class LayoutMade(Message):
    """One more candidate compiled (or cut, or failed), and the ranking of every one made so far
    (ranked in the worker: the view only shows it)."""

    def __init__(self, result: "CompiledCandidate", ranking: "LayoutRanking", done: int) -> None:
        super().__init__()
        self.result, self.ranking, self.done = result, ranking, done


class LayoutsFailed(Message):
    """The ranking could not start or go on: a message the user can act on."""

    def __init__(self, message: str, hint: str | None) -> None:
        super().__init__()
        self.message, self.hint = message, hint


class LayoutPlanScreen(ModalScreen[None]):
    """One candidate's compiled plan over the app; Escape closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss", "Close", id="layouts.close",
                                                     tooltip="Close the candidate's compiled plan")]
    DEFAULT_CSS = """
    LayoutPlanScreen {
        align: center middle;
    }
    LayoutPlanScreen > VerticalScroll {
        width: 90%;
        height: 90%;
        border: round $primary;
        background: $surface;
        padding: 0 1;
    }
    """

    def __init__(self, row: RankedLayout, target: str) -> None:
        super().__init__()
        self.row, self.target = row, target

    def compose(self) -> ComposeResult:
        """The plan, scrollable."""
        with VerticalScroll():
            yield Static(candidate_plan(self.row, self.target), id="layouts-plan")


class LayoutsView(Widget):
    """Rank the file's layouts on a target, row by row as they compile."""

    BINDINGS: ClassVar[list[BindingType]] = [*LAYOUTS_BINDINGS]
    """The tab's keys, for the view on its own; in the app they are app bindings too."""

    DEFAULT_CSS = """
    LayoutsView {
        height: 1fr;
    }
    LayoutsView #layouts-controls {
        height: 3;
        padding: 0 1;
    }
    LayoutsView #layouts-target-label {
        padding: 1 1 0 0;
    }
    LayoutsView #layouts-target {
        width: 24;
    }
    LayoutsView #layouts-status {
        padding: 0 1;
        height: auto;
    }
    LayoutsView DataTable {
        height: 1fr;
    }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.settings: Settings | None = None
        self.made: list[CompiledCandidate] = []
        self.ranking: LayoutRanking | None = None
        self.shown: list[RankedLayout] = []
        self.sorted_by: tuple[str, bool] | None = None
        self.running = False

    def compose(self) -> ComposeResult:
        """Target and button, status, the table of candidates."""
        with Horizontal(id="layouts-controls"):
            yield Label("Target", id="layouts-target-label")
            yield Input(placeholder=DEFAULT_TARGET, id="layouts-target")
            yield Button("Rank layouts (s)", id="layouts-run", variant="primary")
        yield Static("Press s (or the button) to compile every layout of the file's @shardscope.layouts function "
                     "for the target and rank them.", id="layouts-status")
        table: DataTable[Text | str] = DataTable(id="layouts-table", cursor_type="row", zebra_stripes=True)
        for column in COLUMNS:
            table.add_column(column, key=column)
        yield table

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Remember the settings of the latest analysis: its file and its target."""
        self.settings = analysis.settings
        field = self.query_one("#layouts-target", Input)
        if not field.value and analysis.settings.targets:
            field.value = analysis.settings.targets[0]

    def action_rank(self) -> None:
        """Start ranking (a running one is cancelled: the worker is exclusive)."""
        settings = self.settings or getattr(self.app, "settings", None)
        if settings is None:
            self._say(Text("No file yet: open one (shardscope FILE).", "yellow"))
            return
        field = self.query_one("#layouts-target", Input).value.strip()
        target = field or (settings.targets[0] if settings.targets else DEFAULT_TARGET)
        self.made, self.ranking, self.sorted_by, self.running = [], None, None, True
        self.query_one(DataTable).clear()
        self._say(Text(f"ranking the layouts of {settings.path.name} on {target}: starting...", "bold"))
        self._rank_worker(settings.path, target, getattr(self.app, "max_devices", None))

    @on(Button.Pressed, "#layouts-run")
    def _button(self) -> None:
        self.action_rank()

    @on(Input.Submitted, "#layouts-target")
    def _target_entered(self) -> None:
        self.action_rank()

    @work(thread=True, exclusive=True, group="layouts", exit_on_error=False)
    def _rank_worker(self, path: Path, text: str, max_devices: int | None) -> None:
        """Thread worker: load the target and the file, compile each candidate, post each one."""
        worker = get_current_worker()
        try:
            with working():  # quitting meanwhile does not wait for the compiles (shardscope.app.leaving)
                function, target, candidates = _prepare(path, text, max_devices)
                from shardscope.pipeline.layout_compile import compile_candidate
                from shardscope.pipeline.layout_ranking import ranked

                made: list[CompiledCandidate] = []
                for candidate in candidates:
                    if worker.is_cancelled:
                        return
                    made.append(compile_candidate(function, candidate, target))
                    ranking = ranked(made, function.name, str(target.target), len(candidates))
                    self.post_message(LayoutMade(made[-1], ranking, len(made)))
        except ShardscopeError as exc:
            self.post_message(LayoutsFailed(exc.message, exc.hint))
        except Exception as exc:  # a bug: say so, keep the app running
            self.post_message(LayoutsFailed(f"{type(exc).__name__}: {exc}", "this looks like a bug"))

    def on_layout_made(self, message: LayoutMade) -> None:
        """Show the ranking with one more candidate: redraw the table."""
        self.made.append(message.result)
        done, total = message.done, message.ranking.total
        self.running = done < total
        self.ranking = message.ranking
        self._fill(self.ranking.rows)
        if self.running:
            self._say(Text(f"ranking on {message.ranking.target}: {done} of {total} candidates "
                           f"({message.result.candidate.label}: {message.result.status})", "bold"))
        else:
            self._say(Text(self.ranking.why(), "bold green" if self.ranking.pick is not None else "bold yellow"))

    def on_layouts_failed(self, message: LayoutsFailed) -> None:
        """Say why the ranking stopped; the rows made so far stay."""
        self.running = False
        self._say(Text.assemble((message.message, "bold red"), f"  hint: {message.hint}" if message.hint else ""))

    @on(DataTable.HeaderSelected)
    def _sort(self, event: DataTable.HeaderSelected) -> None:
        """Sort by the column clicked; the same column again sorts the other way."""
        if self.ranking is None:
            return
        column = str(event.column_key.value)
        descending = self.sorted_by == (column, False)
        self.sorted_by = (column, descending)
        rows = sorted(self.ranking.rows, key=lambda row: _sort_value(row, column, self.ranking), reverse=descending)
        self._fill(rows)

    @on(DataTable.RowSelected)
    def _open(self, event: DataTable.RowSelected) -> None:
        """Enter on a row: the candidate's compiled plan."""
        if self.ranking is not None and event.cursor_row < len(self.shown):
            self.app.push_screen(LayoutPlanScreen(self.shown[event.cursor_row], self.ranking.target))

    def _fill(self, rows: "list[RankedLayout] | tuple[RankedLayout, ...]") -> None:
        table = self.query_one(DataTable)
        table.clear()
        self.shown = list(rows)
        ranks = _ranks(self.ranking)
        for row in rows:
            style = "green" if self.ranking is not None and row is self.ranking.pick else "" if ranks.get(id(row)) else "dim"
            cells = (str(ranks.get(id(row), "-")), row.compiled.candidate.mesh_words, row.compiled.candidate.option_words,
                     memory_cell(row), step_cell(row), per_chip_cell(row), utilization_cell(row), collectives_cell(row))
            table.add_row(*(Text(cell, style=style) for cell in cells))

    def _say(self, text: Text) -> None:
        self.query_one("#layouts-status", Static).update(text)


def _ranks(ranking: LayoutRanking | None) -> dict[int, int]:
    """Each fitting row's place in the ranking, by ``id``."""
    if ranking is None:
        return {}
    fitting = [row for row in ranking.rows if row.outcome in ("fits", "unknown")]
    return {id(row): place for place, row in enumerate(fitting, 1)}


def _sort_value(row: RankedLayout, column: str, ranking: LayoutRanking | None) -> tuple[int, float | str]:
    """What a column sorts by: a number where it holds one (missing ones last), else its text."""
    per_chip, utilization = row.per_chip(), row.utilization()
    numbers = {
        "rank": float(_ranks(ranking).get(id(row), 10**9)),
        "memory": None if row.compiled.fit is None else row.compiled.fit.needed_bytes,
        "step": row.high_s, "per chip": None if per_chip is None else per_chip[0],
        "MFU": None if utilization is None else utilization[0],
    }
    if column in numbers:
        value = numbers[column]
        return (0, float(value)) if value is not None else (1, 0.0)
    text = {"mesh": row.compiled.candidate.mesh_words, "options": row.compiled.candidate.option_words,
            "top collectives": collectives_cell(row)}[column]
    return (0, text)


def _prepare(path: Path, text: str, max_devices: int | None
             ) -> "tuple[LayoutFunction, TargetDevices, list[Candidate]]":
    """The file's first layouts function, the target's devices and every candidate (a thread
    worker's: it starts JAX and imports the file); the target must fit the CPU devices JAX has."""
    from shardscope.config.layout_candidates import candidates
    from shardscope.sources.loading import load_layout_file
    from shardscope.targets.host import ensure_devices
    from shardscope.targets.registry import load_target, parse_target

    target = load_target(parse_target(text))
    ensure_devices(max(max_devices or 0, target.count), needed=target.count)
    function = next(iter(load_layout_file(path).functions.values()))
    return function, target, candidates(target.count, function.spec.axes, function.spec.options)
