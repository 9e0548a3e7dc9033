"""Per-call counts that may be unknown (``None``: a loop with no static trip count) or upper bounds.

Dependency-free, so the app can use it before JAX or numpy are imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Count:
    """A per-call count: ``value`` (``None`` when not known statically) and whether it is an upper
    bound (collectives inside ``cond`` branches: only one branch runs, the largest is counted).

    Every rendering formats it with :meth:`text` or :meth:`badge`, so a count reads the same in
    the report, the JSON-adjacent text, the trees, the Graph tab and the diff export.
    """

    value: int | None
    upper_bound: bool = False

    def text(self, unit: str = "") -> str:
        """``1,024``, ``≤ 8``, or ``?``; ``unit`` is appended after a space (``8 B``)."""
        body = count_text(self.value)
        if unit:
            body = f"{body} {unit}"
        return f"≤ {body}" if self.upper_bound and self.value is not None else body

    def badge(self) -> str:
        """``x16/call`` (``x≤8/call`` for an upper bound, ``x?/call`` when unknown)."""
        bound = "≤" if self.upper_bound and self.value is not None else ""
        return f"x{bound}{count_text(self.value)}/call"

    def __str__(self) -> str:
        return self.text()


def total_executions(collectives: Iterable) -> int | None:
    """The sum of the collectives' ``executions`` per call; ``None`` if any is unknown."""
    runs = [c.executions for c in collectives]
    return None if None in runs else sum(runs)


def total_runs(collectives: Iterable) -> Count:
    """The collectives' runs per call as a :class:`Count`: an upper bound when one sits in a ``cond`` branch."""
    found = list(collectives)
    return Count(total_executions(found), any(getattr(c, "in_conditional", False) for c in found))


def count_text(value: int | None) -> str:
    """``1,024``, or ``?`` for a count that is not known statically."""
    return "?" if value is None else f"{value:,}"
