"""A comparison of two plans: the baseline, the candidate, the speedup and the diff between them.

By default the baseline is the ``baseline`` plan (naive) and the candidate the best plan that
defers the reduction: the fewest collective runs per call, then the fewest bytes, then registry
order. The choice uses structure only, never timings, so the same settings always compare the
same two plans (and export the same diff). The speedup itself is :mod:`shardscope.measure.speedup`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from shardscope.measure.speedup import Speedup, speedup_of, speedup_text


@dataclass(frozen=True)
class Comparison:
    """Two plans of one analysis side by side: which, how much faster, and what changed.

    ``diff`` is the unified diff of the canonical jaxpr texts, baseline to candidate (no
    trailing newlines); ``speedup`` is None when the plans were not timed.
    """

    baseline: str
    candidate: str
    speedup: Speedup | None
    diff: tuple[str, ...]

    def speedup_text(self) -> str | None:
        """The speedup in the one wording, or None when not measured."""
        return None if self.speedup is None else speedup_text(self.speedup, self.baseline, self.candidate)


def unified(before: str, after: str, before_name: str, after_name: str) -> list[str]:
    """The unified diff lines (no trailing newlines) between two canonical texts."""
    return list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), fromfile=before_name, tofile=after_name, lineterm=""
        )
    )


def default_pair(plans: Mapping[str, Any], roles: Mapping[str, str], candidate: str | None = None,
                 group: Callable[[str], Any] = lambda name: ()) -> tuple[str, str]:  # Any: a group's key
    """``(baseline, candidate)``: the baseline plan and the best candidate, by structure only.

    ``plans`` maps names to plan results (in display order); ``roles`` maps names to roles. A
    ``candidate`` that names one of them (``--function`` naming a program) is compared with the
    first other one of its ``group``. Without candidate plans (a program file's programs) the
    first is compared with the next one of its group (programs that take the same arguments: two
    ways to write one step, not a train step and an eval step); a plan with no other in its
    group, with itself (no speedup, no diff).
    """
    names = list(plans)
    if candidate is not None and candidate in plans:
        return next((n for n in names if n != candidate and group(n) == group(candidate)), candidate), candidate
    baseline = next((n for n in names if roles.get(n) == "baseline"), names[0])
    candidates = [n for n in names if roles.get(n) == "candidate"]
    if not candidates:
        return baseline, next((n for n in names if n != baseline and group(n) == group(baseline)), baseline)

    def cost(name: str) -> tuple:
        plan = plans[name]
        runs, moved = plan.jaxpr_runs.value, plan.jaxpr_bytes.value
        return (runs is None, runs or 0, moved is None, moved or 0, names.index(name))

    return baseline, min(candidates, key=cost)


def compare(plans: Mapping[str, Any], baseline: str, candidate: str) -> Comparison:
    """The :class:`Comparison` of two plan results (``PlanResult``) by name; a plan compared with
    itself (a program file's lone program) has no speedup and no diff."""
    if baseline == candidate:
        return Comparison(baseline, candidate, None, ())
    before, after = plans[baseline], plans[candidate]
    speedup = None
    if before.run_s is not None and after.run_s is not None:
        speedup = speedup_of(before.run_s.samples, after.run_s.samples)
    diff = unified(before.canonical_text, after.canonical_text, baseline, candidate)
    return Comparison(baseline, candidate, speedup, tuple(diff))
