"""A target plan costed once, where it is judged: each collective's run on the target's
interconnect, the step estimate with them, and what deferring each finding saves
(:class:`~shardscope.engine.hlo.plan_costs.PlanCosts`, the plan's ``costs``).

:func:`costed` is what the pipeline calls when it makes a target's plan
(:mod:`shardscope.targets.plans`); :func:`weighed` is ``check --min-saving``'s judgement of the
plan's findings against the threshold. Nothing that renders a plan calls these: the text, the
JSON, the GitHub annotations and the explorer read ``plan.costs``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from shardscope.engine.hlo.interconnect_times import CollectiveTime, TargetInterconnect
from shardscope.engine.hlo.plan_costs import MinSaving, PlanCosts, Saving
from shardscope.engine.hlo.roofline import joined_step
from shardscope.errors import SettingsError

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.hlo.roofline import StepEstimate
    from shardscope.engine.hlo.target_plan import TargetPlacement, TargetPlan

__all__ = ["cost_plan", "costed", "interconnect_of", "saving_of", "weighed"]


def interconnect_of(plan: "TargetPlan") -> TargetInterconnect | None:
    """The interconnect of ``plan``'s target with its devices placed; None for a machine without
    an interconnect model (a TPU generation shardscope has no figures for, a GPU from the user's
    file, the CPU) or a plan made without device coordinates."""
    fabric = None if plan.machine is None else plan.machine.fabric
    if fabric is None or not plan.device_coords:
        return None
    return TargetInterconnect(plan.target, fabric, plan.device_coords, plan.machine_shape)


def _per_call(plan: "TargetPlan", times: "tuple[CollectiveTime | None, ...]",
              interconnect: TargetInterconnect | None) -> list[float] | None:
    """Each compiled collective of ``plan``: its runs per call times one run on the target's
    interconnect (None without a model, or when a count is unknown)."""
    if interconnect is None:
        return None
    seconds = []
    for c, timed in zip(plan.compiled.collectives, times, strict=True):
        if timed is None or c.executions is None:
            return None
        seconds.append(c.executions * timed.seconds)
    return seconds


def cost_plan(plan: "TargetPlan") -> PlanCosts:
    """``plan``'s costs on its machine: every figure its renderings show, computed once."""
    interconnect = interconnect_of(plan)
    times = tuple(interconnect.time(c) if interconnect is not None else None for c in plan.compiled.collectives)
    per_call = _per_call(plan, times, interconnect)
    # the step and the interconnect's figure read one pricing of the collectives: a collective
    # matmul loop's two ways round the ring at once, async collective fusions' steps, collectives
    # of one loop on links of their own at once
    step, joined = joined_step(plan.step, None if per_call is None else list(zip(plan.compiled.collectives, per_call)),
                               None if interconnect is None else interconnect.lines)
    seconds = None if per_call is None else sum((s or 0.0 for _, s, _ in joined), 0.0)
    step_s = None if step is None else step.dispatched_upper_s
    savings = {p.collective.name: saving_of(plan, p, interconnect, step_s, step) for p in plan.staying_findings}
    return PlanCosts(interconnect, times, seconds, step, savings)


def costed(plan: "TargetPlan") -> "TargetPlan":
    """``plan`` with its :class:`PlanCosts`."""
    return replace(plan, costs=cost_plan(plan))


def weighed(plan: "TargetPlan", min_saving: MinSaving | None) -> "TargetPlan":
    """``plan`` with its findings weighed against ``check --min-saving`` (``costs.below_min_saving``:
    the CPU collectives whose deferral saves less there, which the check does not fail on).

    A share of the step needs a step estimate: :class:`~shardscope.errors.SettingsError` for a plan
    with a saving to weigh and none (a plan the compiler refused has nothing to weigh)."""
    costs = plan.costs if plan.costs is not None else cost_plan(plan)
    if min_saving is None:
        return replace(plan, costs=replace(costs, min_saving=None, below_min_saving=()))
    if min_saving.share is not None and costs.savings and costs.step_s is None:
        raise SettingsError(
            f"--min-saving {min_saving.text} is a share of the step, and shardscope has no step estimate for "
            f"{plan.target}.", "give a time saved per step instead, e.g. --min-saving 1ms or --min-saving 50us")
    below = tuple(name for name, saving in costs.savings.items() if not min_saving.counts(saving))
    return replace(plan, costs=replace(costs, min_saving=min_saving, below_min_saving=below))


# --------------------------------------------------------------------------- savings


def saving_of(plan: "TargetPlan", p: "TargetPlacement", interconnect: TargetInterconnect | None,
              step_s: float | None = None, step: "StepEstimate | None" = None) -> Saving:
    """What deferring ``p`` (a finding ``plan``'s target keeps in a loop) saves there
    (:mod:`shardscope.engine.hlo.plan_costs` says how)."""
    # the values the target keeps in a loop that need not run there (by name where the CPU names them)
    staying = ([op for op in p.collective.operands if op.value and op.value in p.staying_values]
               or [op for op in p.collective.operands if op.value not in p.values_left] or list(p.collective.operands))
    in_loops = list(p.staying_in) or [t for t in p.target if t.in_loop] or list(p.target[:1])
    leave = math.prod(loop.trip_count or 0 for loop in p.stays_in if loop.name in p.collective.verdict.loop_ids)
    total_bytes, seconds_per_run, saved = 0, 0.0, 0.0
    runs_now: int | None = 0
    known = interconnect is not None
    algorithm = ""
    parts = []
    for t in in_loops:
        moved = _moved_bytes(plan, p, t, {op.value for op in staying}, sum(op.written_bytes for op in staying))
        total_bytes += moved
        parts.append((t.name, moved, t.executions))
        if t.executions is None or runs_now is None:
            runs_now = None
        else:
            runs_now += t.executions
        # deferred, its values run once per run of the loops they may not leave; an instruction
        # that already left some of the loops they may leave still runs at least once
        after = None if t.executions is None or not leave else max(1, t.executions // leave)
        if interconnect is None or after is None or t.executions is None:
            known = False
            continue
        timed = _instruction_saving(plan, t, moved, after, interconnect)
        if timed is None:
            known = False
            continue
        algorithm, per_run, instruction_saved = timed
        seconds_per_run += per_run
        saved += instruction_saved
    runs_after = None if runs_now is None or not leave else max(1, runs_now // leave)
    return Saving(plan.target, p.collective.name, p.collective.kind,
                  ", ".join(dict.fromkeys(op.value for op in staying if op.value)), total_bytes, runs_now, runs_after,
                  seconds_per_run if known else None, saved if known else None, algorithm, step_s, tuple(parts),
                  step is not None and step.lower_bound)


def _instruction_saving(plan: "TargetPlan", t: "CompiledCollective", moved: int, after: int,
                        interconnect: TargetInterconnect) -> tuple[str, float, float] | None:
    """``(algorithm, seconds of one run of the moved bytes, seconds saved per step)`` for
    ``moved`` bytes of the target's ``t`` deferred to ``after`` runs per call.

    When every value ``t`` carries belongs to a finding the target keeps in the loop, deferring
    them all removes ``t`` from the loop: each finding's part of that saving is its share of
    ``t``'s bytes (so the parts add up to the instruction's). Otherwise ``t`` keeps running with
    the values the loop needs, smaller by ``moved``, and the moved bytes run after the loop."""
    assert t.executions is not None  # the caller knows the runs
    whole, part = interconnect.time(t), interconnect.time(t, moved)
    if whole is None or part is None:
        return None
    if moved >= t.bytes_per_execution or _all_values_leave(plan, t):
        share = min(1.0, moved / t.bytes_per_execution) if t.bytes_per_execution else 1.0
        return part.algorithm, part.seconds, (t.executions - after) * whole.seconds * share
    rest = interconnect.time(t, t.bytes_per_execution - moved)
    assert rest is not None  # the same groups as ``whole``
    return part.algorithm, part.seconds, max(0.0, t.executions * (whole.seconds - rest.seconds) - after * part.seconds)


def _all_values_leave(plan: "TargetPlan", t: "CompiledCollective") -> bool:
    """True when every value ``t`` carries is one a finding kept in the loop may take out of it."""
    leaving = {op.value for q in plan.staying_findings for op in q.collective.operands if op.value not in q.values_left}
    names = [op.value for op in t.operands]
    if all(names):
        return all(name in leaving for name in names)
    return all(any(q is f for f in plan.staying_findings) for q in plan.placements_of(t))


def _moved_bytes(plan: "TargetPlan", p: "TargetPlacement", t: "CompiledCollective", values: set[str],
                 cpu_bytes: int) -> int:
    """The bytes of ``p``'s staying values in each run of the target's ``t``: its operands that
    carry them by name; all of it when it carries nothing else; else the CPU operands' bytes as
    the program wrote them (``cpu_bytes``: XLA:CPU sums bf16 in f32, a target's compiler may not)."""
    named = [op.bytes for op in t.operands if op.value and op.value in values]
    if named:
        return sum(named)
    if all(q is p for q in plan.placements_of(t)) and not p.values_left:
        return t.bytes_per_execution
    return min(cpu_bytes, t.bytes_per_execution)

