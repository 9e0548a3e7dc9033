"""Per-call counts that may be unknown (``None``: a loop with no static trip count).

Dependency-free, so the app can use it before JAX or numpy are imported.
"""

from __future__ import annotations

from typing import Iterable


def total_executions(collectives: Iterable) -> int | None:
    """The sum of the collectives' ``executions`` per call; ``None`` if any is unknown."""
    runs = [c.executions for c in collectives]
    return None if None in runs else sum(runs)


def count_text(value: int | None) -> str:
    """``1,024``, or ``?`` for a count that is not known statically."""
    return "?" if value is None else f"{value:,}"
