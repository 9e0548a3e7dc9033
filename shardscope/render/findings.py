"""Renderings of an :class:`~shardscope.engine.inspection.Inspection`: rich table, plain text, HTML, JSON."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from shardscope.engine.counts import count_text

if TYPE_CHECKING:
    from shardscope.engine.inspection import Inspection

VERDICT_STYLES = {"deferrable": "bold red", "loop_invariant": "bold yellow", "needed": "green"}


def trips_text(counts: tuple) -> str:
    """``2 x 8``, ``? x 4`` for a while loop, ``-`` outside loops."""
    return " x ".join("?" if t is None else str(t) for t in counts) or "-"


def runs_text(c: Any) -> str:
    """Runs per call: ``16``, ``unknown`` (a while loop), ``≤ 8`` inside a ``cond`` branch."""
    text = "unknown" if c.executions is None else f"{c.executions:,}"
    return f"≤ {text}" if c.in_conditional and c.executions is not None else text


def collectives_table(collectives: tuple, title: str | None = None) -> Any:
    """A rich table: one row per collective with its value, loops, runs, bytes and verdict.

    Fits 80 columns; the source lines are listed under it (:func:`notes`).
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in COLUMNS:
        table.add_column(column, justify="right" if column in RIGHT_ALIGNED else "left",
                         no_wrap=column not in ("collective", "value"))
    for row in table_rows(collectives):
        *cells, kind = row
        table.add_row(*map(Text, cells), Text(kind, VERDICT_STYLES.get(kind, "")))
    return table


COLUMNS = ("#", "collective", "value", "loops", "runs/call", "B/call", "verdict")
"""The columns of the findings table, in the text, rich and HTML renderings alike."""
RIGHT_ALIGNED = frozenset({"#", "runs/call", "B/call"})


def table_rows(collectives: tuple) -> list[tuple[str, ...]]:
    """The cells of the findings table, one tuple per collective (the verdict ``-`` outside loops)."""
    return [
        (str(i), f"{c.primitive}[{','.join(c.axes)}]", c.value, trips_text(c.loop_trip_counts), runs_text(c),
         "unknown" if c.bytes_per_call is None else f"{c.bytes_per_call:,}", c.verdict_kind if c.in_loop else "-")
        for i, c in enumerate(collectives, 1)
    ]


def notes(collectives: tuple) -> list[str]:
    """One line per collective inside a loop: where it comes from, its verdict, and the fix."""
    lines = []
    for i, c in enumerate(collectives, 1):
        if not c.in_loop or c.verdict is None:
            continue
        line = f"#{i} {c.primitive} of {c.value} ({c.source or 'no source line'}): {c.verdict.kind}. {c.verdict.reason}"
        lines.append(line + (f" Fix: {c.verdict.fix}" if c.verdict.fix else ""))
    return lines


def summary(inspection: "Inspection") -> str:
    """``step: 2 collective(s) in loops, 2 flagged (8 runs/call)`` in one line."""
    flagged = inspection.flagged
    runs = count_text(inspection.executed_collectives).replace("?", "unknown")
    head = (f"{inspection.function}: {len(inspection.collectives)} collective equation(s), "
            f"{len(inspection.findings)} inside loops, {runs} runs/call")
    if flagged:
        return head + f"; {len(flagged)} run in a loop without needing to."
    return head + "; none runs in a loop without needing to."


def render_inspection(inspection: "Inspection") -> Any:
    """The rich renderable: summary line, the table, the fixes."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = [Text(summary(inspection), style="bold red" if inspection.flagged else "bold green")]
    if inspection.collectives:
        parts.append(collectives_table(inspection.collectives))
    parts += [Text(line, style="bold" if line.split(")", 1)[-1].startswith(": deferrable")
                     or ": loop_invariant." in line else "") for line in notes(inspection.collectives)]
    return Group(*parts)


def to_text(inspection: "Inspection", width: int = 140) -> str:
    """The rendering as plain text (no colours), e.g. for an ``AssertionError``."""
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(render_inspection(inspection))
    return buffer.getvalue()


def collective_json(c: Any) -> dict[str, Any]:
    """The ``check --json`` fields of one collective."""
    return {
        "primitive": c.primitive,
        "axes": list(c.axes),
        "loop_trip_counts": list(c.loop_trip_counts),
        "executions": c.executions,
        "bytes_per_call": c.bytes_per_call,
        "verdict": c.verdict_kind,
        "source": c.source,
        "value": c.value,
        "fix": None if c.verdict is None else c.verdict.fix,
        "in_conditional": c.in_conditional,
        "equation": c.equation_id,
    }


def inspection_json(inspection: "Inspection") -> dict[str, Any]:
    """One program's ``check --json`` object: findings (collectives in loops) and all collectives."""
    return {
        "function": inspection.function,
        "findings": [collective_json(c) for c in inspection.findings],
        "collectives": [collective_json(c) for c in inspection.collectives],
        "flagged": len(inspection.flagged),
    }
