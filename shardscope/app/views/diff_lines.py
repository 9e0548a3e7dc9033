"""The Diff tab's lines: the unified diff coloured, the side-by-side rows folded and laid out.

Pure Rich (no widgets), so the run's worker thread prepares them (:mod:`~shardscope.app.views.prepare`)
and :class:`~shardscope.app.views.diff.DiffView` only displays them.
"""

from __future__ import annotations

import re

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from shardscope.render.diff import Row

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
            out += [*rows[k : k + keep_head], end - k - keep_head - keep_tail, *rows[end - keep_tail : end]]
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
