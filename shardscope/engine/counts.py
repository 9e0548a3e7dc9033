"""Per-call counts that may be unknown (``None``: a loop with no static trip count) or upper bounds.

Dependency-free, so the app can use it before JAX or numpy are imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Iterable, Protocol


class Runs(Protocol):
    """A collective's runs per call, as the jaxpr's and the compiled module's collectives both say them."""

    @property
    def executions(self) -> int | None: ...

    @property
    def in_conditional(self) -> bool: ...


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


def known_sum(counts: Iterable[int | None]) -> int | None:
    """The sum of ``counts``; ``None`` if any is unknown."""
    values = list(counts)
    known = [c for c in values if c is not None]
    return sum(known) if len(known) == len(values) else None


def known_product(counts: Iterable[int | None]) -> int | None:
    """The product of ``counts`` (the trip counts of nested loops); ``None`` if any is unknown."""
    values = list(counts)
    known = [c for c in values if c is not None]
    return prod(known) if len(known) == len(values) else None


def total_executions(collectives: Iterable) -> int | None:
    """The sum of the collectives' ``executions`` per call; ``None`` if any is unknown."""
    return known_sum(c.executions for c in collectives)


def total_runs(collectives: Iterable) -> Count:
    """The collectives' runs per call as a :class:`Count`: an upper bound when one sits in a ``cond`` branch."""
    found = list(collectives)
    return Count(total_executions(found), any(getattr(c, "in_conditional", False) for c in found))


class PerCall:
    """Per-call totals of a collective that says how often one call runs it (``executions``,
    None when a loop's trip count is unknown), how many per-device bytes one run moves
    (``bytes_per_execution``) and whether it sits in a conditional's branch (``in_conditional``):
    the jaxpr's, the compiled module's and the two paired share these."""

    if TYPE_CHECKING:  # what the class using it has, as a field or a property (no attribute here:
        # a dataclass would take a class attribute as its field's default)
        @property
        def executions(self) -> int | None: ...

        @property
        def bytes_per_execution(self) -> int: ...

        @property
        def in_conditional(self) -> bool: ...

    @property
    def bytes_per_call(self) -> int | None:
        """Per-device bytes of one call (None when the runs are unknown)."""
        runs = self.executions
        return None if runs is None else runs * self.bytes_per_execution

    @property
    def runs(self) -> Count:
        """:attr:`executions` as a :class:`Count`: in a conditional's branch it runs at most that often."""
        return Count(self.executions, self.in_conditional)

    @property
    def bytes_count(self) -> Count:
        """:attr:`bytes_per_call` as a :class:`Count`: in a conditional's branch, at most that many (as its runs)."""
        return Count(self.bytes_per_call, self.in_conditional)


def runs_per_call(runs: str) -> str:
    """``1 run/call``, ``4 runs/call``, ``≤ 4 runs/call``: a count's text with its unit."""
    return f"{runs} run/call" if runs.removeprefix("≤ ") == "1" else f"{runs} runs/call"


def count_text(value: int | None) -> str:
    """``1,024``, or ``?`` for a count that is not known statically."""
    return "?" if value is None else f"{value:,}"
