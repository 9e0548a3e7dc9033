"""Whether a rewritten program does what its rewrite claims, before anything reports it as a saving.

Two checks, each independent of the rewrite's own reasoning:

- the compiled plan: the collectives the rewrite moves run no more often than it says once
  compiled (a sum deferred out of a loop of 4 iterations: 4 runs per call become 1), counted per
  value a collective carries (XLA's combiner may merge the sums after the loop, or not; two sums
  of one parameter, an embedding used twice, accumulate into one buffer and are summed once),
  and no other kind of collective runs more often than before;
- the outputs: on the same arguments, the rewritten program's outputs match the original's
  within the dtype's rounding (:func:`shardscope.measure.crosscheck.compare_results`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from shardscope.engine.counts import Count

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledPlan


@dataclass(frozen=True)
class PlanCheck:
    """Runs per call of one kind of collective, counted per value carried: before the rewrite,
    what the rewrite predicts, and what the rewritten program's compiled plan runs; and the
    other kinds whose runs grew (kind -> before, after)."""

    kind: str
    runs_before: int | None
    runs_expected: int | None
    runs_after: int | None
    grew: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    instruction_runs: tuple[int | None, int | None] = (None, None)  # runs per call of the instructions themselves
    in_loops: tuple[int, int, int] = (0, 0, 0)  # values of this kind inside loops: before, at most after, after

    @property
    def ok(self) -> bool:
        """True when the plan runs no more than the rewrite predicts and nothing else grew
        (fewer is the rewrite doing better: two sums that add into one accumulator, deferred
        together, are one value after the loop, not two)."""
        fewer = (self.runs_expected is None or self.runs_after is None  # a while loop's count may be unknown
                 or self.runs_after <= self.runs_expected)
        return fewer and not self.grew and self.in_loops[2] <= self.in_loops[1]

    @property
    def saves(self) -> bool:
        """True when the rewrite predicts fewer runs than the original's (with a trip count
        unknown, fewer values inside loops)."""
        if self.runs_before is not None and self.runs_expected is not None:
            return self.runs_expected < self.runs_before
        return self.in_loops[1] < self.in_loops[0]

    def reason(self) -> str:
        """Why the check failed, in words (empty when it passed)."""
        if self.ok:
            return ""
        if self.in_loops[2] > self.in_loops[1]:
            return (f"the rewritten program still carries {self.in_loops[2]} value(s) in {self.kind}s inside loops, "
                    f"where the rewrite leaves at most {self.in_loops[1]}")
        if self.runs_expected is not None and self.runs_after is not None and self.runs_after > self.runs_expected:
            return (f"the rewritten program still runs {self.kind} {_runs(self.runs_after)} times per call (counted per "
                    f"value carried), not the {_runs(self.runs_expected)} the rewrite predicts (the original runs "
                    f"{_runs(self.runs_before)})")
        grown = ", ".join(f"{kind} {_runs(a)} -> {_runs(b)}" for kind, (a, b) in self.grew.items())
        return f"the rewritten program runs other collectives more often: {grown} runs per call"


def value_runs(collectives: Iterable["CompiledCollective"]) -> int | None:
    """Runs per call, each value a combined collective carries counted once per run (None when
    a trip count is unknown)."""
    total = 0
    for c in collectives:
        if c.executions is None:
            return None
        total += c.executions * max(1, len(c.operands))
    return total


def runs_by_kind(plan: "CompiledPlan") -> dict[str, int | None]:
    """:func:`value_runs` of every kind of collective in ``plan``."""
    kinds: dict[str, list[CompiledCollective]] = {}
    for c in plan.collectives:
        kinds.setdefault(c.kind, []).append(c)
    return {kind: value_runs(group) for kind, group in kinds.items()}


def plan_check(before: "CompiledPlan", after: "CompiledPlan", kind: str,
               moved: Iterable[tuple["CompiledCollective", int | None]]) -> PlanCheck:
    """The check of a rewrite that makes each collective of ``moved`` run ``runs_after`` times
    per call (``(collective, runs_after)``; None: unknown) instead of its own count."""
    runs_before = runs_by_kind(before)
    runs_after = runs_by_kind(after)
    expected = runs_before.get(kind, 0)
    for c, runs in moved:
        if expected is None or c.executions is None or runs is None:
            expected = None
            break
        expected -= (c.executions - runs) * max(1, len(c.operands))
    grew = {k: (runs_before.get(k, 0), n) for k, n in runs_after.items()
            if k != kind and _grew(runs_before.get(k, 0), n, _in_loops(before, k), _in_loops(after, k))}
    instructions = (before.counts().get(kind, 0), after.counts().get(kind, 0))
    left = sum(max(1, len(c.operands)) for c, runs in moved if runs is None or c.executions is None or runs < c.executions)
    in_loops = (_in_loops(before, kind), max(0, _in_loops(before, kind) - left), _in_loops(after, kind))
    return PlanCheck(kind, runs_before.get(kind, 0), expected, runs_after.get(kind, 0), grew, instructions, in_loops)


def _in_loops(plan: "CompiledPlan", kind: str) -> int:
    """The values ``kind`` collectives carry inside loops."""
    return sum(max(1, len(c.operands)) for c in plan.collectives if c.kind == kind and c.in_loop)


def _grew(before: int | None, after: int | None, in_loops_before: int, in_loops_after: int) -> bool:
    """Whether a kind's runs per call grew: by their counts where both are known; a known count
    that became unknown grew (a collective moved into a loop of unknown trips); from an unknown
    count (a loop of unknown trips), by the values the kind carries inside loops."""
    if before is None:
        return in_loops_after > in_loops_before
    return after is None or after > before


def _runs(count: int | None) -> str:
    return Count(count, False).text() if count is not None else "an unknown number of"
