"""The Diff tab: the naive and deferred canonical jaxprs, as a coloured unified diff or side by side.

The diff itself comes from :mod:`shardscope.diff` (difflib over the stable canonical texts);
this view only colours it. ``s`` switches between the two layouts; the state is a class on the
view, so the stylesheet decides which pane shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer
from textual.widget import Widget
from textual.widgets import Static

from shardscope.diff import Row, side_by_side, unified

if TYPE_CHECKING:
    from shardscope.analysis import Analysis

CONTEXT = 3
"""Equal lines kept around each change in the side-by-side view; longer equal runs fold."""

_ROW_STYLES = {"delete": ("red", ""), "insert": ("", "green"), "replace": ("red", "green"), "equal": ("", "")}


def unified_text(lines: list[str]) -> Text:
    """Unified diff lines coloured: ``+`` green, ``-`` red, ``@@`` cyan, file headers bold."""
    text = Text(no_wrap=True)
    for k, line in enumerate(lines):
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        else:
            style = ""
        text.append(line, style)
        if k + 1 < len(lines):
            text.append("\n")
    return text or Text("The two plans have the same canonical jaxpr.", "dim")


def folded(rows: list[Row], context: int = CONTEXT) -> list[Row | int]:
    """``rows`` with long runs of equal rows replaced by the number of rows folded away."""
    out: list[Row | int] = []
    k = 0
    while k < len(rows):
        if rows[k].tag != "equal":
            out.append(rows[k])
            k += 1
            continue
        end = k
        while end < len(rows) and rows[end].tag == "equal":
            end += 1
        keep_head = 0 if k == 0 else context
        keep_tail = 0 if end == len(rows) else context
        if end - k > keep_head + keep_tail + 1:
            out += rows[k : k + keep_head] + [end - k - keep_head - keep_tail] + rows[end - keep_tail : end]
        else:
            out += rows[k:end]
        k = end
    return out


def side_by_side_table(before: str, after: str) -> Table:
    """A two-column table: naive left, deferred right, changed rows coloured, equal runs folded."""
    table = Table(expand=True, show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("", width=1, no_wrap=True)
    table.add_column("naive", ratio=1, overflow="fold")
    table.add_column("deferred", ratio=1, overflow="fold")
    for row in folded(side_by_side(before, after)):
        if isinstance(row, int):
            table.add_row("", Text(f"⋯ {row} equal line(s) ⋯", "dim"), Text(f"⋯ {row} equal line(s) ⋯", "dim"))
            continue
        left_style, right_style = _ROW_STYLES[row.tag]
        marker = {"delete": "-", "insert": "+", "replace": "~", "equal": " "}[row.tag]
        table.add_row(
            Text(marker, "cyan"),
            Text(row.left or "", left_style or "dim"),
            Text(row.right or "", right_style or "dim"),
        )
    return table


class DiffView(Widget):
    """The Diff tab: unified diff by default, side by side after ``s``."""

    BINDINGS = [
        Binding(
            "s", "toggle_layout", "Side by side", id="diff.toggle_layout",
            tooltip="Switch the diff between unified and side-by-side layouts",
        ),
    ]

    DEFAULT_CLASSES = "-empty"
    DEFAULT_CSS = """
    DiffView {
        height: 1fr;
    }
    DiffView #diff-placeholder {
        display: none;
        padding: 1 2;
        color: $text-muted;
    }
    DiffView.-empty #diff-placeholder {
        display: block;
    }
    DiffView.-empty ScrollableContainer {
        display: none;
    }
    DiffView ScrollableContainer {
        height: 1fr;
        overflow: auto auto;
    }
    DiffView #diff-side-by-side, DiffView.-side-by-side #diff-unified {
        display: none;
    }
    DiffView.-side-by-side #diff-side-by-side {
        display: block;
    }
    DiffView #diff-unified-text {
        width: auto;
        padding: 0 1;
    }
    DiffView #diff-side-by-side-table {
        padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        """A placeholder until the first analysis; a pane for each layout."""
        yield Static("No analysis yet: press r to run.", id="diff-placeholder")
        with ScrollableContainer(id="diff-unified"):
            yield Static(id="diff-unified-text")
        with ScrollableContainer(id="diff-side-by-side"):
            yield Static(id="diff-side-by-side-table")

    @property
    def side_by_side(self) -> bool:
        """True while the side-by-side layout shows."""
        return self.has_class("-side-by-side")

    def show_analysis(self, analysis: "Analysis") -> None:
        """Render the diff between the naive and deferred canonical texts of ``analysis``."""
        before = analysis.plans["naive"].canonical_text
        after = analysis.plans["deferred"].canonical_text
        self.query_one("#diff-unified-text", Static).update(unified_text(unified(before, after)))
        self.query_one("#diff-side-by-side-table", Static).update(side_by_side_table(before, after))
        self.remove_class("-empty")
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The layout switch is greyed out until there is a diff to show."""
        if action == "toggle_layout":
            return None if self.has_class("-empty") else True
        return True

    def action_toggle_layout(self) -> None:
        """Switch between the unified and the side-by-side layout."""
        self.toggle_class("-side-by-side")
