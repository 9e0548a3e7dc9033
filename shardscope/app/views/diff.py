"""The Diff tab: the compared plans' canonical jaxprs, as a coloured unified diff or side by side.

The diff itself comes from :mod:`shardscope.render.diff` (difflib over the stable canonical texts);
this view only colours it. ``s`` switches between the two layouts; the state is a class on the
view, so the stylesheet decides which pane shows.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Static

from shardscope.app.bindings import DIFF_BINDINGS
from shardscope.app.views.lines import LinesView, offer_focus

from shardscope.render.diff import Row, side_by_side

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import Analysis
    from shardscope.app.views.prepare import PreparedViews

CONTEXT = 3
"""Equal lines kept around each change in the side-by-side view; longer equal runs fold."""

_ROW_STYLES = {"delete": ("red", ""), "insert": ("", "green"), "replace": ("red", "green"), "equal": ("", "")}


def unified_lines(lines: list[str]) -> list[Text]:
    """Unified diff lines coloured: ``+`` green, ``-`` red, ``@@`` cyan, file headers bold."""
    if not lines:
        return [Text("The two plans have the same canonical jaxpr.", "dim")]
    return [Text(line, _unified_style(line)) for line in lines]


def _unified_style(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    return "cyan" if line.startswith("@@") else ""


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


class SideBySide:
    """Two columns, baseline left and candidate right, laid out at whatever width it is given.

    Long lines fold within their column at token boundaries (:func:`fold`); changed rows are coloured, equal ones dim, and long
    runs of equal rows fold into one marker row. A rich renderable, so the view can lay it out
    again when its width changes.
    """

    def __init__(self, rows: list[Row | int], left: str = "before", right: str = "after") -> None:
        self.rows = rows
        self.left, self.right = left, right

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """One or more lines per row: ``marker left │ right``, each side folded to half the width."""
        column = max((options.max_width - 5) // 2, 10)
        bar = Segment(" │ ", Style.parse("bright_black"))
        header = Style.parse("bold")
        yield from (Segment("  "), Segment(self.left.ljust(column), header), bar, Segment(self.right, header), Segment.line())
        for row in self.rows:
            if isinstance(row, int):
                note = f"⋯ {row} equal line(s) ⋯"
                dim = Style.parse("dim")
                yield from (Segment("  "), Segment(note.ljust(column), dim), bar, Segment(note, dim), Segment.line())
                continue
            yield from _row_segments(row, column)


def _row_segments(row: Row, column: int) -> RenderResult:
    left_style, right_style = (Style.parse(s or "dim") for s in _ROW_STYLES[row.tag])
    marker = Segment(_MARKERS[row.tag] + " ", Style.parse("cyan"))
    bar = Segment(" │ ", Style.parse("bright_black"))
    left, right = fold(row.left or "", column), fold(row.right or "", column)
    for k in range(max(len(left), len(right))):
        yield marker if k == 0 else Segment("  ")
        yield Segment((left[k] if k < len(left) else "").ljust(column), left_style)
        yield bar
        yield Segment(right[k] if k < len(right) else "", right_style)
        yield Segment.line()


_TOKEN = re.compile(r"\S+\s*|\s+")
_BREAK_AFTER = re.compile(r"[,(\[{=]")


def fold(line: str, width: int) -> list[str]:
    """``line`` cut into pieces of at most ``width`` characters, never inside a token.

    Breaks fall between words; a word longer than a whole piece breaks after a ``,``, ``(``,
    ``[``, ``{`` or ``=`` inside it, and only a word with no such place is cut mid-way.
    Continuation pieces are indented like the line, plus two spaces, so they read as one.
    """
    if len(line) <= width:
        return [line]
    indent = " " * min(len(line) - len(line.lstrip(" ")) + 2, width // 2)
    pieces: list[str] = []
    current = ""
    for token in _split_long(_TOKEN.findall(line), width - len(indent)):
        if current.strip() and len(current) + len(token.rstrip()) > width:
            pieces.append(current.rstrip())
            current = indent
        current += token
    pieces.append(current.rstrip())
    return pieces


def _split_long(tokens: list[str], room: int) -> list[str]:
    """Tokens longer than ``room`` split after their punctuation (or, with none, every ``room``)."""
    out: list[str] = []
    for token in tokens:
        while len(token.rstrip()) > room:
            cuts = [m.end() for m in _BREAK_AFTER.finditer(token, 0, room)]
            cut = cuts[-1] if cuts else room
            out.append(token[:cut])
            token = token[cut:]
        out.append(token)
    return out


_MARKERS = {"delete": "-", "insert": "+", "replace": "~", "equal": " "}


class DiffView(Widget):
    """The Diff tab: unified diff by default, side by side after ``s``."""

    BINDINGS = DIFF_BINDINGS
    """The tab's keys, for the view on its own; in the app they are app bindings too (:func:`~shardscope.app.bindings.tab_key_bindings`)."""

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
    DiffView.-empty LinesView {
        display: none;
    }
    DiffView LinesView {
        padding: 0 1;
    }
    DiffView #diff-side-by-side, DiffView.-side-by-side #diff-unified {
        display: none;
    }
    DiffView.-side-by-side #diff-side-by-side {
        display: block;
    }
    """

    def compose(self) -> ComposeResult:
        """A placeholder until the first analysis; a pane for each layout."""
        yield Static("No analysis yet: press r to run.", id="diff-placeholder")
        yield LinesView(id="diff-unified")
        yield LinesView(id="diff-side-by-side")

    @property
    def side_by_side(self) -> bool:
        """True while the side-by-side layout shows."""
        return self.has_class("-side-by-side")

    def show_analysis(self, analysis: "Analysis", prepared: "PreparedViews | None" = None) -> None:
        """Show the diff of the comparison ``prepared`` holds (prepared in the worker), or of the
        analysis's default comparison, computed here."""
        if prepared is None:
            comparison = analysis.comparison
            before = analysis.plans[comparison.baseline].canonical_text
            after = analysis.plans[comparison.candidate].canonical_text
            lines, rows = unified_lines(list(comparison.diff)), folded(side_by_side(before, after))
        else:
            comparison, lines, rows = prepared.comparison, prepared.diff_unified, prepared.diff_rows
        self.query_one("#diff-unified", LinesView).show_lines(lines)
        self.query_one("#diff-side-by-side", LinesView).show_renderable(
            SideBySide(rows, comparison.baseline, comparison.candidate), fit_width=True
        )
        self.remove_class("-empty")
        self.refresh_bindings()
        offer_focus(self.active_pane, unless_focused=True)

    @property
    def active_pane(self) -> LinesView:
        """The pane of the layout that shows: unified or side by side."""
        return self.query_one("#diff-side-by-side" if self.side_by_side else "#diff-unified", LinesView)

    def on_show(self) -> None:
        """The tab was opened: let the diff take the focus, so ``s`` and the arrow keys work at once."""
        offer_focus(self.active_pane)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The layout switch is greyed out until there is a diff to show."""
        if action == "toggle_layout":
            return None if self.has_class("-empty") else True
        return True

    def action_toggle_layout(self) -> None:
        """Switch between the unified and the side-by-side layout, keeping the focus in the diff."""
        had_focus = self.has_focus_within
        self.toggle_class("-side-by-side")
        if had_focus:
            self.active_pane.focus()
