"""The one harness of ``benchmarks/``: what a benchmark declares, and how any declaration renders.

Each benchmark module declares a :class:`Benchmark` named ``BENCHMARK``: its section's heading, the
result files it reads, and its blocks in order: :class:`Table` (columns, each with its unit and
which way is better), :class:`Prose` (sentences built from the result: every figure in them comes
from the JSON) and :class:`Each` (the same blocks once per item, e.g. one table per chip).
:mod:`benchmarks.render` puts every declared section into ``BENCHMARKS.md``; no benchmark renders
itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Sequence, Union

Better = Literal["lower", "higher"]
ARROWS = {"lower": "↓", "higher": "↑"}
"""How a column's header says which way is better (the legend is at the top of the file)."""


@dataclass(frozen=True)
class Column:
    """One column: its title, its unit, which way is better, and how a row gives its value.

    ``value`` returns a number, a stats dict (``median`` with ``min``/``max`` or ``low``/``high``),
    a string (shown as it is) or None (``-``). Numbers are multiplied by ``scale`` (seconds shown
    in ms: ``scale=1e3``) and shown with ``digits`` decimals, or thousands separators when
    ``digits`` is None. ``target``: the column's goal (on the ``better`` side of it is met), said
    beside each value. ``strong`` puts the value in bold (the column the table is about).
    """

    title: str
    value: Callable[[Any], Any]
    unit: str = ""
    better: Better | None = None
    digits: int | None = 2
    scale: float = 1.0
    target: float | None = None
    strong: bool = False
    align: Literal["left", "right"] = "right"

    def header(self) -> str:
        """The header cell: the title, the unit, the arrow of the better side and the target."""
        text = self.title + (f" ({self.unit})" if self.unit and self.unit != "ratio" else "")
        if self.better:
            text += f" {ARROWS[self.better]}"
        if self.target is not None:
            text += f", target {'<=' if self.better == 'lower' else '>='} {self.target:g}{self._suffix()}"
        return text

    def cell(self, row: Any) -> str:
        """This column's cell of ``row``."""
        value = self.value(row)
        if value is None:
            return "-"
        if isinstance(value, str):
            return value
        spread = ""
        if isinstance(value, dict):  # a stats dict: its median, then its range
            number = value["median"] * self.scale
            low, high = value.get("min", value.get("low")), value.get("max", value.get("high"))
            if low is not None and high is not None:
                spread = f" ({self._number(low * self.scale)}-{self._number(high * self.scale)})"
        else:
            number = value * self.scale
        text = self._number(number) + self._suffix()
        if self.strong:
            text = f"**{text}**"
        text += spread
        if self.target is not None and self.better is not None:
            text += f" ({'met' if self._meets(number) else 'missed'})"
        return text

    def _number(self, number: float) -> str:
        return f"{number:,.0f}" if self.digits is None else f"{number:,.{self.digits}f}"

    def _suffix(self) -> str:
        return "x" if self.unit == "ratio" else ""

    def _meets(self, number: float) -> bool:
        assert self.target is not None
        return number <= self.target if self.better == "lower" else number >= self.target


def ratio_column(title: str, value: Callable[[Any], Any], **options: Any) -> Column:
    """A column of ratios (``1.23x``)."""
    return Column(title, value, unit="ratio", **options)


@dataclass(frozen=True)
class Table:
    """A table: its columns, and the rows it shows of a result (``rows(result)``).

    ``heading`` (a ``###`` title) and ``intro`` (a paragraph, from the result) come before it;
    a table with no rows is left out with them.
    """

    columns: Sequence[Column]
    rows: Callable[[Any], Iterable[Any]]
    heading: str | Callable[[Any], str] | None = None
    intro: Callable[[Any], str] | None = None

    def lines(self, result: Any) -> list[str]:
        """The table in Markdown, with its heading and intro."""
        rows = list(self.rows(result))
        if not rows:
            return []
        out: list[str] = []
        heading = self.heading(result) if callable(self.heading) else self.heading
        if heading:
            out += [f"### {heading}", ""]
        if self.intro:
            out += [self.intro(result), ""]
        out.append("| " + " | ".join(c.header() for c in self.columns) + " |")
        out.append("|" + "|".join("---:" if c.align == "right" else "---" for c in self.columns) + "|")
        out += ["| " + " | ".join(c.cell(row) for c in self.columns) + " |" for row in rows]
        return out + [""]


@dataclass(frozen=True)
class Prose:
    """Paragraphs (or list items, or a fenced chart) built from the result: ``lines(result)``."""

    lines_of: Callable[[Any], Iterable[str]]

    def lines(self, result: Any) -> list[str]:
        """The lines, then a blank line (none when there is nothing to say)."""
        lines = list(self.lines_of(result))
        return lines + [""] if lines else []


@dataclass(frozen=True)
class Each:
    """The same blocks once per item of a result (``items(result)``), e.g. one table per chip."""

    items: Callable[[Any], Iterable[Any]]
    blocks: Sequence["Block"]

    def lines(self, result: Any) -> list[str]:
        """Every item's blocks, in order."""
        return [line for item in self.items(result) for block in self.blocks for line in block.lines(item)]


Block = Union[Table, Prose, Each]


@dataclass(frozen=True)
class SummaryRow:
    """One row of the file's summary table: what, its target, what this run measured, the verdict."""

    what: str
    target: str
    measured: str
    verdict: str


@dataclass(frozen=True)
class Benchmark:
    """What one benchmark module declares (``BENCHMARK``): its section and how its result reads.

    ``files`` are the result files it reads (glob patterns in the results folder; by default its
    name's ``.json``): one file gives its JSON, several a dict by file stem. ``heading`` is the
    section's title (``level`` 2, or 3 for a part of the section before it). ``summary`` and
    ``misses`` feed the file's summary table and its "where the misses come from" section.
    ``in_make_bench``: run by ``make bench`` (else run alone: ``python -m benchmarks.NAME``).
    """

    name: str
    heading: str
    blocks: Sequence[Block]
    files: Sequence[str] = ()
    level: int = 2
    in_make_bench: bool = False
    several: bool = False
    summary: Callable[[Any], list[SummaryRow]] | None = None
    misses: Callable[[Any], list[str]] | None = None
    rerun: str = field(default="")

    def load(self, directory: Path) -> Any | None:
        """This benchmark's results in ``directory`` (None when there are none)."""
        paths = sorted(p for pattern in (self.files or (f"{self.name}.json",)) for p in directory.glob(pattern))
        if not paths:
            return None
        if not self.several:
            return json.loads(paths[0].read_text())
        return {path.stem: json.loads(path.read_text()) for path in paths}

    def lines(self, result: Any | None, failure: str | None = None) -> list[str]:
        """The section: its heading, then its blocks (or why it has no result)."""
        out = ["#" * self.level + f" {self.heading}", ""]
        if failure:
            out += [f"**Failed:** {failure}", ""]
        if result is None:
            if self.in_make_bench:
                return out + [f"No results yet: run `python -m benchmarks.{self.name}`.", ""]
            return []
        for block in self.blocks:
            out += block.lines(result)
        return out


def verdict(met: bool, fraction_of_target: float) -> str:
    """``met``, or by how many percent the target was missed (a summary row's verdict)."""
    return "met" if met else f"**missed** by {(fraction_of_target - 1) * 100:.0f}%"
