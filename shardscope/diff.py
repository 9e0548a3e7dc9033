"""The diff between two plans' canonical jaxpr texts: unified, and side by side."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardscope.analysis import Analysis


def unified(before: str, after: str, before_name: str = "naive", after_name: str = "deferred") -> list[str]:
    """The unified diff lines (no trailing newlines) between two canonical texts."""
    return list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), fromfile=before_name, tofile=after_name, lineterm=""
        )
    )


def diff_text(analysis: "Analysis") -> str:
    """The export: settings, one summary line per plan, then the unified diff.

    Deterministic (no timings), so the same settings always export the same text.
    """
    naive, deferred = analysis.plans["naive"], analysis.plans["deferred"]
    lines = [f"# {line}" for line in analysis.headline()]
    lines += [f"# {name}: {plan.structure_summary()}" for name, plan in analysis.plans.items()]
    lines += unified(naive.canonical_text, deferred.canonical_text)
    return "\n".join(lines) + "\n"


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
