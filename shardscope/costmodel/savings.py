"""What deferring a finding saves on a target: its bytes per run, and the time its runs in the
loop cost on the target's interconnect beyond the runs the deferral leaves.

A finding a target still runs in a loop (``TargetPlan.staying_findings``) is carried by a
target collective inside that loop. Deferred, its values are summed (or gathered) once per run
of the loops it may not leave instead of once per iteration of those it may. The saving per
step (one call of the program) is then:

- when the instruction carries only the finding's values: ``(runs now - runs after) x t(S)``;
- when every value it carries belongs to such a finding (a combined sum of gradients), deferring
  them all takes it out of the loop: each finding's part is ``(runs now - runs after) x t(T) x S/T``;
- when it also carries values that must stay: ``runs now x (t(T) - t(T - S)) - runs after x t(S)``
  (the instruction keeps running with the others, one smaller; the deferred values run after),
  never below zero;

where ``S`` are the finding's bytes per run, ``T`` the instruction's and ``t`` one run's time
on the target (:mod:`shardscope.costmodel.collective_times`). With a step estimate the saving
is also a share of the step: of its serialized upper bound (compute, memory and communication one
after another, :data:`SHARE_IS`), so a share is never overstated, and a saving the scheduler
would hide behind compute may save nothing: the text and the JSON say so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from shardscope.costmodel.collective_times import TargetInterconnect, collectives_seconds_per_call, interconnect_of
from shardscope.costmodel.interconnects import format_seconds
from shardscope.costmodel.quantities import number_and_unit
from shardscope.errors import SettingsError

if TYPE_CHECKING:
    from shardscope.engine.hlo.roofline import StepEstimate
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.hlo.target_plan import TargetPlacement, TargetPlan


SHARE_IS = ("of the step's serialized upper bound back to back (compute, memory and communication one after "
            "another, one call among calls dispatched as a training loop does); overlap may hide the saving")
"""What a saving's share of the step is taken against, in the words the text and the JSON give."""

SHARE_WORDS = "of the step's upper bound back to back (serialized; overlap may hide it)"
"""The same, short, for the sentence of a finding."""


@dataclass(frozen=True)
class Saving:
    """What deferring one finding saves on one target, per step (one call of the program).

    ``bytes_per_run`` are the finding's bytes in each run the target keeps in the loop;
    ``runs_per_call`` those runs now and ``runs_after`` after the deferral (None when a trip count
    is unknown); ``seconds_per_run`` one such run on the interconnect and ``seconds_per_step``
    the time saved (None without an interconnect model or a count); ``step_s`` the estimated
    step, when there is one, of which ``share_of_step`` is the saving's part.
    """

    target: str
    collective: str
    kind: str
    values: str
    bytes_per_run: int
    runs_per_call: int | None
    runs_after: int | None
    seconds_per_run: float | None = None
    seconds_per_step: float | None = None
    algorithm: str = ""
    step_s: float | None = None
    parts: tuple[tuple[str, int, int | None], ...] = ()
    step_lower_bound: bool = False
    """True when the step estimate is a lower bound (it holds instructions the model cannot
    time): the share is then at most what it says."""
    """``(target collective, bytes per run, runs per call)`` of each target instruction that
    keeps the finding's values in a loop: with more than one (a combined sum the target split
    over two instructions of different runs), ``bytes_per_run`` is their sum and no single run
    moves it."""

    @property
    def share_of_step(self) -> float | None:
        """The saving as a fraction of the estimated step (None without an estimate)."""
        if self.step_s is None or not self.step_s or self.seconds_per_step is None:
            return None
        return self.seconds_per_step / self.step_s

    def words(self) -> str:
        """``4 B per run, 4 runs per call; deferring it saves ~12 us per step on gpu:h100:8``."""
        if len(self.parts) > 1:  # runs of different sizes: each instruction's own
            text = " and ".join(f"{size:,} B per run, {_runs_words(runs)} per call ({name})"
                                for name, size, runs in self.parts)
        else:
            text = f"{self.bytes_per_run:,} B per run, {_runs_words(self.runs_per_call)} per call"
        if self.seconds_per_step is None:
            return text + f"; shardscope has no interconnect figures for {self.target} to say what deferring it saves"
        text += f"; deferring it saves ~{format_seconds(self.seconds_per_step)} per step on {self.target}"
        share = self.share_of_step
        if share is None:
            return text
        at_most = "at most " if self.step_lower_bound else ""
        return text + f", {at_most}{share:.0%} {SHARE_WORDS}"

    def to_json(self) -> dict[str, object]:
        """The ``saving`` object of a finding in ``--json``."""
        return {"target": self.target, "collective": self.collective, "kind": self.kind, "values": self.values,
                "bytes_per_run": self.bytes_per_run, "runs_per_call": self.runs_per_call, "runs_after": self.runs_after,
                "seconds_per_run": self.seconds_per_run, "seconds_per_step": self.seconds_per_step,
                "algorithm": self.algorithm or None, "step_s": self.step_s, "share_of_step": self.share_of_step,
                "share_is": SHARE_IS if self.share_of_step is not None else None,
                "parts": [{"collective": name, "bytes_per_run": size, "runs_per_call": runs}
                          for name, size, runs in self.parts], "step_lower_bound": self.step_lower_bound}


def _runs_words(runs: int | None) -> str:
    """``4 runs``, ``1 run``, ``? runs``."""
    return f"{'?' if runs is None else f'{runs:,}'} run{'' if runs == 1 else 's'}"


def step_estimate_of(plan: "TargetPlan") -> "StepEstimate | None":
    """``plan``'s step estimate on its target with its collectives' time on the target's
    interconnect joined (the bounds: hidden behind compute, or not at all); without an
    interconnect model, the compute and memory estimate alone (it says so)."""
    if plan.step is None:
        return None
    seconds = collectives_seconds_per_call(plan)
    return plan.step if seconds is None else plan.step.with_collectives(seconds)


def step_seconds(plan: "TargetPlan") -> float | None:
    """The estimated step time of ``plan`` on its target, the share of which a saving is: one
    call among calls dispatched back to back, as a training loop runs them (not the waited-on
    call's overhead), at its upper bound (communication not hidden behind compute)."""
    estimate = step_estimate_of(plan)
    return None if estimate is None else estimate.dispatched_upper_s


def savings_of(plan: "TargetPlan", step_s: float | None = None) -> dict[str, Saving]:
    """Each finding ``plan``'s target keeps in a loop, by CPU collective name, with its saving."""
    interconnect = interconnect_of(plan)
    step = step_s if step_s is not None else step_seconds(plan)
    return {p.collective.name: saving_of(plan, p, interconnect, step) for p in plan.staying_findings}


def saving_of(plan: "TargetPlan", p: "TargetPlacement", interconnect: TargetInterconnect | None,
              step_s: float | None = None) -> Saving:
    """What deferring ``p`` (a finding ``plan``'s target keeps in a loop) saves there."""
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
        moved = _moved_bytes(plan, p, t, {op.value for op in staying}, sum(op.bytes for op in staying))
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
                  plan.step is not None and plan.step.lower_bound)


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
    carry them by name; all of it when it carries nothing else; else the CPU operands' bytes."""
    named = [op.bytes for op in t.operands if op.value and op.value in values]
    if named:
        return sum(named)
    if all(q is p for q in plan.placements_of(t)) and not p.values_left:
        return t.bytes_per_execution
    return min(cpu_bytes, t.bytes_per_execution)


# --------------------------------------------------------------------------- --min-saving


@dataclass(frozen=True)
class MinSaving:
    """``check --min-saving``: a time per step (``seconds``) or a share of the step (``share``)."""

    text: str
    seconds: float | None = None
    share: float | None = None

    def counts(self, saving: Saving) -> bool:
        """True when ``saving`` reaches the threshold (a saving shardscope cannot cost counts:
        the check never passes a finding it could not size). A share needs a step estimate:
        :class:`SettingsError` without one."""
        if self.seconds is not None:
            return saving.seconds_per_step is None or saving.seconds_per_step >= self.seconds
        if saving.seconds_per_step is None:
            return True
        share = saving.share_of_step
        if share is None:
            raise SettingsError(
                f"--min-saving {self.text} is a share of the step, and shardscope has no step estimate for "
                f"{saving.target}.", "give a time instead, e.g. --min-saving 1ms or --min-saving 50us")
        assert self.share is not None  # one of the two is set
        return share >= self.share


_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_min_saving(text: str) -> MinSaving:
    """``1ms``, ``50us``, ``0.2s`` (a time saved per step) or ``1%`` (a share of the step)."""
    hint = "write a time saved per step, e.g. --min-saving 1ms or 50us (units s, ms, us, ns), or a share: 1%"
    stripped = text.strip()
    percent = re.fullmatch(r"(.*?)\s*%", stripped)
    found = number_and_unit(percent.group(1) if percent else stripped, "--min-saving", hint)
    if found is None or (percent and found[1]):
        raise SettingsError(f"--min-saving {stripped!r} is not a time or a percentage.", hint)
    number, unit = found
    if number < 0:
        raise SettingsError(f"--min-saving {stripped!r} is negative.", hint)
    if percent:
        if number > 100:
            raise SettingsError(f"--min-saving {stripped!r} is more than the whole step.", hint)
        return MinSaving(stripped, share=number / 100)
    if not unit:
        if number == 0:  # no time to name: every finding saves at least nothing
            return MinSaving(stripped, seconds=0.0)
        raise SettingsError(f"--min-saving {stripped!r} has no unit: a time saved per step needs one, a share a %.",
                            f"write --min-saving {stripped}ms, {stripped}us or {stripped}% (units s, ms, us, ns)")
    scale = _TIME_UNITS.get(unit.lower() if unit != "µs" else unit)
    if scale is None:
        raise SettingsError(f"--min-saving {stripped!r}: {unit!r} is not a unit of time.", hint)
    return MinSaving(stripped, seconds=number * scale)


def saving_filter(min_saving: MinSaving) -> "Callable[[TargetPlan, TargetPlacement], bool]":
    """Whether a finding a target keeps in a loop saves at least ``min_saving`` there (what
    ``check --min-saving`` fails on)."""

    def counts(plan: "TargetPlan", p: "TargetPlacement") -> bool:
        return min_saving.counts(saving_of(plan, p, interconnect_of(plan), step_seconds(plan)))

    return counts


def require_step_estimates(min_saving: MinSaving, plans: "Sequence[TargetPlan]") -> None:
    """:class:`SettingsError` when ``min_saving`` is a share of the step and a plan with a finding
    to weigh has no step estimate to take it of (a plan without one, such as a step the target's
    compiler refused for memory, has nothing to weigh: its other findings stand)."""
    missing = sorted({plan.target for plan in plans if plan.staying_findings and step_seconds(plan) is None})
    if min_saving.share is not None and missing:
        raise SettingsError(
            f"--min-saving {min_saving.text} is a share of the step, and shardscope has no step estimate for "
            f"{', '.join(missing)}.", "give a time saved per step instead, e.g. --min-saving 1ms or --min-saving 50us")
