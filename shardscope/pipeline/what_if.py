"""What a checked rewrite buys, measured: both programs timed interleaved on the same arguments,
their compiled memory per device and collective runs and bytes per call, and both projected
onto an interconnect.

``check --what-if`` asks for it per program (:func:`what_ifs`). The rewrite itself (built, compiled, planned, its outputs checked against the original's) is
:mod:`shardscope.whatif.what_if`'s; only a ``verified`` rewrite is timed: one that failed a
check is no saving, whatever it measures. The speedup is :mod:`shardscope.measure.speedup`'s,
the rule ``report`` uses (a spread of per-round ratios that contains 1 is "no measurable
difference").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from shardscope.costmodel.projection import CompiledProjection, project_compiled_plan
from shardscope.engine.counts import Count, total_runs
from shardscope.measure.timed_on import TimedOn, timed_on_compiled
from shardscope.measure.speedup import Speedup, speedup_of
from shardscope.measure.timing import RunTimes, memory, time_interleaved
from shardscope.pipeline.gc_pause import paused

if TYPE_CHECKING:
    import jax
    from shardscope.costmodel.interconnects import Link
    from shardscope.engine.hlo.plan import CompiledPlan
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.whatif.what_if import Rewrite, WhatIf

ORIGINAL, REWRITTEN = "original", "rewrite"
"""The two programs' names in the speedup's wording (``rewrite is 1.40x faster than original``)."""


@dataclass(frozen=True)
class PlanTotals:
    """One compiled plan's collective runs and per-device bytes per call, and its compiled memory
    per device (``memory_analysis()``'s fields, empty when the backend has none)."""

    runs: Count
    bytes: Count
    memory: dict[str, int]


@dataclass(frozen=True)
class MeasuredRewrite:
    """A rewrite with what it buys: both plans' totals, the interleaved run times and speedup
    (None when the rewrite is not verified, so not timed), and both projected (None without
    ``--project``)."""

    rewrite: "Rewrite"
    before: PlanTotals
    after: PlanTotals | None
    times: dict[str, RunTimes] | None = None
    speedup: Speedup | None = None
    projected: tuple[CompiledProjection, CompiledProjection] | None = None
    timed_on: TimedOn | None = None
    """The devices both programs were timed on (None when not timed)."""

    @property
    def projected_ratio(self) -> float | None:
        """Projected communication time per call, original over rewrite (None when unknown)."""
        if self.projected is None:
            return None
        before, after = (p.comm_s_per_call for p in self.projected)
        return None if before is None or after is None or after == 0 else before / after


def measure_what_if(what_if: "WhatIf", repeats: int, link: "Link | None" = None,
                    devices: int | None = None) -> tuple[MeasuredRewrite, ...]:
    """Every rewrite of ``what_if`` with its totals; the verified ones timed ``repeats`` rounds
    (after warm-up) against the original, and all projected onto ``link`` when given."""
    subject = what_if.subject
    before = plan_totals(subject.plan, subject.compiled)
    return tuple(_measured(what_if, rewrite, before, repeats, link, devices) for rewrite in what_if.rewrites)


def _measured(what_if: "WhatIf", rewrite: "Rewrite", before: PlanTotals, repeats: int, link: "Link | None",
              devices: int | None) -> MeasuredRewrite:
    program = rewrite.program
    if program is None:
        return MeasuredRewrite(rewrite, before, None)
    after = plan_totals(program.plan, program.compiled)
    projected = None
    if link is not None:
        projected = (project_compiled_plan(what_if.subject.plan, link, devices),
                     project_compiled_plan(program.plan, link, devices))
    if not rewrite.verified:
        return MeasuredRewrite(rewrite, before, after, projected=projected)
    times = time_interleaved(_calls(what_if, rewrite), (), repeats)
    speedup = speedup_of(times[ORIGINAL].samples, times[REWRITTEN].samples)
    return MeasuredRewrite(rewrite, before, after, times, speedup, projected, timed_on_compiled(what_if.subject.compiled))


def plan_totals(plan: "CompiledPlan", compiled: "jax.stages.Compiled") -> PlanTotals:
    """The runs and bytes per call of ``plan``'s collectives and ``compiled``'s memory per device."""
    per_call = [c.bytes_per_call for c in plan.collectives]
    conditional = any(c.in_conditional for c in plan.collectives)
    return PlanTotals(total_runs(plan.collectives), Count(None if None in per_call else sum(n or 0 for n in per_call), conditional),
                      memory(compiled))


def _calls(what_if: "WhatIf", rewrite: "Rewrite") -> dict[str, Callable[[], Any]]:
    """The original and the rewritten compiled programs as calls without arguments, each on the
    same run arguments placed once beforehand (only the call is timed), under the mesh each needs."""
    subject, program = what_if.subject, rewrite.program
    assert program is not None  # only a verified rewrite, which has its program, is timed
    args, kwargs = subject.run_arguments
    placed_args, placed_kwargs = program.place(args, kwargs)

    def original() -> object:  # the program's output, only timed
        with subject.context():
            return subject.compiled(*args, **kwargs)

    def rewritten() -> object:
        with program.function.context():
            return program.compiled(*placed_args, **placed_kwargs)

    return {ORIGINAL: original, REWRITTEN: rewritten}


@dataclass(frozen=True)
class ProgramWhatIf:
    """``check --what-if`` of one program: its measured rewrites (None for a demo plan, which is
    not rewritten), or why shardscope could not rewrite it at all (``failure``)."""

    measured: tuple[MeasuredRewrite, ...] | None
    failure: str = ""


NOT_REWRITTEN_DISPATCHES = ("a step of dispatches is not rewritten: the fix across calls changes what the jitted "
                            "functions return (the findings name it)")
"""Why a step that is not jitted has no what-if."""


def what_ifs(inspections: "list[Inspection]", repeats: int, link: "Link | None" = None,
             devices: int | None = None) -> list[ProgramWhatIf]:
    """The what-if of each inspection, in order: its rewrites checked, the verified ones timed
    ``repeats`` rounds against the original, all projected onto ``link`` when given."""
    return [_what_if(ins, repeats, link, devices) for ins in inspections]


def _what_if(inspection: "Inspection", repeats: int, link: "Link | None", devices: int | None) -> ProgramWhatIf:
    if inspection.dispatches is not None:
        return ProgramWhatIf((), NOT_REWRITTEN_DISPATCHES)
    if inspection.call is None:
        return ProgramWhatIf(None)
    from shardscope.whatif.what_if import what_if_of  # the rewriter imports JAX: not on render.check's import

    with paused():
        try:
            what_if = what_if_of(inspection)
        except Exception as exc:  # the rewrite engine met a program it cannot read: the check still stands
            first = next((line for line in str(exc).splitlines() if line.strip()), "")
            return ProgramWhatIf((), f"shardscope could not rewrite it ({type(exc).__name__}: {first})")
    return ProgramWhatIf(measure_what_if(what_if, repeats, link, devices))
