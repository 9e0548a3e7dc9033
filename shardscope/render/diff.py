"""The diff between two plans' canonical jaxpr texts: unified, and side by side."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from shardscope.pipeline.comparison import unified

__all__ = ["Row", "side_by_side", "unified"]


@dataclass(frozen=True)
class Row:
    """One row of a side-by-side diff; ``tag`` is equal, replace, delete or insert."""

    tag: str
    left: str | None
    right: str | None


def side_by_side(before: str, after: str) -> list[Row]:
    """Align two texts line by line, as a two-column diff view shows them."""
    a, b = before.splitlines(), after.splitlines()
    rows: list[Row] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        left, right = a[i1:i2], b[j1:j2]
        for k in range(max(len(left), len(right))):
            rows.append(Row(tag, left[k] if k < len(left) else None, right[k] if k < len(right) else None))
    return rows
