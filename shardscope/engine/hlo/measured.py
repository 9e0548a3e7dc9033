"""A profile put on a compiled plan: each collective's measured time, per run and per step.

:func:`profile_onto` finds the plan's module among the profile's executions by what they ran
(:mod:`shardscope.engine.hlo.profile_match`: the devices, the instruction names, each one's
runs per call, the collectives, the shapes), never by the module's name alone, and reads every
run of each collective on every device, call by call (each op belongs to the execution that ran
it, however far ahead the loop dispatched). What a collective costs in a call is what the slowest
device spends in it (the others wait for it), with the fastest beside it (the spread). An
asynchronous collective (``all-reduce-start`` ... ``all-reduce-done`` on TPU and GPU) runs from
its start to the end of its done; the module's other instructions that ran on the same device
meanwhile are the compute it overlapped. A synchronous one overlaps whatever ran beside it on
the same device's timeline (nothing, on XLA:CPU, whose device runs its program on one thread).

The step's collectives together (:attr:`MeasuredPlan.collectives_s`) are not the sum of those
per-collective figures: each is another device's, and collectives in flight at once (async
pairs overlapping, on TPU and GPU) would be counted twice. In each call, each device's time in
collectives is the union of its collectives' runs (a run from start to done, for a pair),
never more than that device's step; the call's figure is the device that spent the most, and
the compute it overlapped is that device's. So it never exceeds the step it is shown beside.

Every per-call figure is the median over the calls after the first: the first call in a trace
pays for the profiler's start and for first-run allocations (16 ms against 9 ms seen on the
CPU), so it is kept apart (:attr:`MeasuredPlan.first_call_s`); with one call there is nothing
else to take. A call the trace cut at its start or end is not counted (:attr:`MeasuredPlan.cut_calls`).

:func:`profile_instruction` measures any one instruction the same way. A plan read from module
text (``check``'s, or one a dump of XLA's gives) is measured alike:
``profile_onto(plan, read_profile(DIR))``.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass

from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.hlo.profile_match import Call, ModuleCalls, check_matches, module_calls
from shardscope.engine.hlo.roofline import StepEstimate
from shardscope.engine.hlo.text import HloModule
from shardscope.measure.profile_read import OpRun, Profile

__all__ = ["BY_NAME", "MeasuredCollective", "MeasuredPlan", "profile_instruction", "profile_onto"]

BY_NAME = "instruction names"
"""How the profile's runs were found on the plan: by the names of the module's own instructions."""

_US = 1e-6


@dataclass(frozen=True)
class MeasuredCollective:
    """One collective of the plan as the profile measured it (seconds, medians over the calls
    after the first).

    ``per_step_s`` is the slowest device's time in it per call of the module, ``fastest_step_s``
    the fastest device's; ``per_run_s`` the slowest device's per run (per iteration, in a loop);
    ``overlapped_s`` the module's other instructions that ran on that device while it was in
    flight, per call; ``runs_per_call`` how often it ran per call on each device.
    """

    name: str
    runs_per_call: float
    devices: int
    per_step_s: float
    fastest_step_s: float
    per_run_s: float
    overlapped_s: float | None
    matched_by: str = BY_NAME

    @property
    def exposed_s(self) -> float | None:
        """Per step, the part no compute hid (None without overlap measured)."""
        return None if self.overlapped_s is None else max(self.per_step_s - self.overlapped_s, 0.0)

    @property
    def spread_s(self) -> float:
        """The slowest device's time per step less the fastest's."""
        return self.per_step_s - self.fastest_step_s

    def to_json(self) -> dict[str, object]:
        """Its numbers, in seconds (``docs/reference/json.md``: ``measured``)."""
        return {"name": self.name, "runs_per_call": self.runs_per_call, "devices": self.devices,
                "per_step_s": self.per_step_s, "fastest_step_s": self.fastest_step_s, "spread_s": self.spread_s,
                "per_run_s": self.per_run_s, "overlapped_s": self.overlapped_s, "exposed_s": self.exposed_s,
                "matched_by": self.matched_by}


@dataclass(frozen=True)
class MeasuredPlan:
    """A compiled plan's module as a profile measured it.

    ``calls`` complete calls of it were in the profile, on ``devices`` devices (of the
    ``program_devices`` the program spans: fewer when only some hosts' files were read);
    ``step_s`` is the slowest device's time per call and ``fastest_step_s`` the fastest's, both
    medians over the calls after the first, whose own time is ``first_call_s`` (None with one
    call: then it is the median). ``collectives_s`` is the time a device spent in collectives
    per call, on the device that spent the most: in each call, the union of its collectives'
    runs on each device (overlapping ones counted once), at most that device's step, the most
    of any device, then the median over the calls; it never exceeds ``step_s``.
    ``collectives_overlapped_s`` is the compute that ran on that device while they were in
    flight. ``cut_calls`` were cut by the trace's start or end and are not counted.
    ``missing`` are the plan's collectives that never ran (a conditional's).
    ``machine`` is what ran it, as the profile says (``TPU v5 Lite``, ``CPU``); ``note`` which
    run of a folder was read, when there was a choice. ``on_target`` is the ``--target`` whose
    plan the run executed ("" for the plan compiled here), ``estimate`` the step's estimate on
    the profile's chip (None where the chip is not known: the CPU).
    """

    module: str
    source: str
    calls: int
    devices: int
    step_s: float | None
    fastest_step_s: float | None
    collectives: tuple[MeasuredCollective, ...]
    missing: tuple[str, ...] = ()
    matched_by: str = BY_NAME
    first_call_s: float | None = None
    cut_calls: int = 0
    program_devices: int = 0
    machine: str = ""
    platform: str = "cpu"
    note: str = ""
    on_target: str = ""
    estimate: StepEstimate | None = None
    collectives_s: float = 0.0
    collectives_overlapped_s: float = 0.0

    def of(self, name: str) -> MeasuredCollective | None:
        """The measured collective named ``name`` (the plan's instruction name), if it ran."""
        return next((c for c in self.collectives if c.name == name), None)

    @property
    def device_estimate_s(self) -> float | None:
        """The estimate of what a profile measures of a step on the device: its instructions'
        rooflines and loop overheads, no call's launch (a module run starts when the device
        does), collectives included where the estimate has them."""
        if self.estimate is None:
            return None
        return self.estimate.roofline_s + self.estimate.iteration_s + (self.estimate.collectives_s or 0.0)

    @property
    def estimate_ratio(self) -> float | None:
        """The measured step over its estimate (None without either)."""
        estimate = self.device_estimate_s
        return None if not estimate or self.step_s is None else self.step_s / estimate

    @property
    def median_calls(self) -> int:
        """How many calls the medians are over: all but the first, or the one."""
        return self.calls - 1 if self.first_call_s is not None else self.calls

    def to_json(self) -> dict[str, object]:
        """Its numbers, in seconds (``docs/reference/json.md``: ``measured``)."""
        return {"module": self.module, "source": self.source, "calls": self.calls, "devices": self.devices,
                "program_devices": self.program_devices, "step_s": self.step_s, "fastest_step_s": self.fastest_step_s,
                "first_call_s": self.first_call_s, "median_of_calls": self.median_calls, "cut_calls": self.cut_calls,
                "collectives_s": self.collectives_s, "collectives_overlapped_s": self.collectives_overlapped_s,
                "machine": self.machine, "note": self.note,
                "matched_by": self.matched_by, "missing": list(self.missing), "on_target": self.on_target or None,
                "estimate": None if self.estimate is None else {
                    "chip": self.estimate.chip, "device_s": self.device_estimate_s, "ratio": self.estimate_ratio},
                "collectives": [c.to_json() for c in self.collectives]}


def profile_onto(plan: CompiledPlan, profile: Profile) -> MeasuredPlan:
    """``profile``'s times on ``plan``'s collectives (see the module docstring); raises a
    :class:`~shardscope.engine.hlo.profile_match.ProfileMismatch` naming how the profile's
    module of the plan's name differs, or a
    :class:`~shardscope.measure.profile_files.ProfileError` when the profile holds none."""
    found = check_matches(plan, profile)
    module = plan.module
    assert module is not None
    calls = list(found.calls)
    counted = calls[1:] if len(calls) > 1 else calls
    steps = [_step_times(call) for call in calls]
    measured, missing = [], []
    for collective in plan.collectives:
        one = _measured(collective.name, collective.wrapper or collective.name, module, counted, found.seen)
        if one is None:
            missing.append(collective.name)
        else:
            measured.append(one)
    counted_steps = steps[1:] if len(steps) > 1 else steps
    pairs = {start: _done_of(module, start) for start in (c.wrapper or c.name for c in plan.collectives)}
    together = [_collectives_time(call, pairs) for call in counted]
    return MeasuredPlan(
        module.name, profile.source, len(calls), found.seen,
        _median([max(s) for s in counted_steps if s]), _median([min(s) for s in counted_steps if s]),
        tuple(measured), tuple(missing), first_call_s=max(steps[0]) if len(steps) > 1 and steps[0] else None,
        cut_calls=found.cut, program_devices=found.devices, machine=profile.machine(), platform=profile.platform,
        note=profile.note, collectives_s=(_median([busy for busy, _ in together]) or 0.0) * _US,
        collectives_overlapped_s=(_median([overlap for _, overlap in together]) or 0.0) * _US)


def profile_instruction(module: HloModule, profile: Profile, name: str) -> MeasuredCollective | None:
    """Any instruction of ``module`` measured as a collective is (an async ``-start`` from its
    start to the end of its done, the compute in between as overlapped), over the calls of the
    module of its name after the first; None when it never ran."""
    found: list[ModuleCalls] = [m for m in module_calls(profile, module.name) if m.calls]
    if not found:
        return None
    calls = list(found[0].calls)
    return _measured(name, name, module, calls[1:] if len(calls) > 1 else calls, found[0].seen)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _step_times(call: Call) -> list[float]:
    """Each device's time in ``call`` (seconds)."""
    return [us * _US for us in _device_steps_us(call).values()]


def _device_steps_us(call: Call) -> dict[str, float]:
    """Each device's time in ``call`` (microseconds): an accelerator's module run; on the CPU,
    from its first instruction's start to its last one's end."""
    if call.run_us:
        return dict(call.run_us)
    return {device: max(op.end_us for op in line) - min(op.start_us for op in line)
            for device, line in call.lines.items() if line}


def _collectives_time(call: Call, pairs: dict[str, str]) -> tuple[float, float]:
    """The collectives' time in ``call`` on the device that spent the most in them, and the
    compute that ran there meanwhile (microseconds): on each device, the union of every
    collective's runs (``pairs``: each collective's start and its done, "" for a synchronous
    one), at most the device's own step."""
    steps = _device_steps_us(call)
    own = set(pairs) | {done for done in pairs.values() if done}
    most = (0.0, 0.0)
    for device, ops in call.lines.items():
        line = _Line(ops)
        merged = _union([w for start, done in pairs.items() for w in _windows(line, start, done)])
        busy = min(sum(hi - lo for lo, hi in merged), steps.get(device, float("inf")))
        if busy > most[0]:
            most = (busy, min(sum(_overlap(line, lo, hi, own) for lo, hi in merged), busy))
    return most


class _Line:
    """One device's instruction runs in one call, in time order, indexed by name and start."""

    def __init__(self, ops: list[OpRun]) -> None:
        self.ops = ops  # sorted by start already
        self.starts = [op.start_us for op in ops]
        self.longest = max((op.dur_us for op in ops), default=0.0)
        self.by_name: dict[str, list[OpRun]] = {}
        for op in ops:
            self.by_name.setdefault(op.name, []).append(op)

    def within(self, lo: float, hi: float) -> list[OpRun]:
        """The runs that may overlap ``(lo, hi)``: those that start before ``hi`` and not longer
        before ``lo`` than the longest run lasts."""
        first = bisect.bisect_left(self.starts, lo - self.longest)
        last = bisect.bisect_left(self.starts, hi)
        return self.ops[first:last]


def _measured(name: str, start: str, module: HloModule, calls: list[Call], devices: int) -> MeasuredCollective | None:
    """One instruction's times (``start``: it, or the async start that wraps it; its done found in
    the module): in each call, on its slowest device and its fastest; medians over ``calls``."""
    done = _done_of(module, start)
    slowest, fastest, overlapped, runs = [], [], [], []
    seen = 0
    for call in calls:
        per_device = []
        for ops in call.lines.values():
            line = _Line(ops)
            windows = _windows(line, start, done)
            runs.append(len(windows))
            if windows:
                busy = sum(hi - lo for lo, hi in windows)
                overlap = sum(_overlap(line, lo, hi, {start, done}) for lo, hi in windows)
                per_device.append((busy, overlap))
        if per_device:
            worst = max(per_device)
            slowest.append(worst[0])
            overlapped.append(worst[1])
            fastest.append(min(busy for busy, _ in per_device))
            seen = max(seen, len(per_device))
    if not slowest:
        return None
    runs_per_call = statistics.median(runs)
    per_step = statistics.median(slowest)
    return MeasuredCollective(
        name, runs_per_call, devices or seen, per_step * _US, statistics.median(fastest) * _US,
        per_step / max(runs_per_call, 1) * _US, statistics.median(overlapped) * _US)


def _done_of(module: HloModule, start: str) -> str:
    """The ``-done`` (or ``async-done``) instruction that ends ``start``, "" for a synchronous one."""
    for inst in module.instructions():
        if inst.opcode.endswith("-done") and start in inst.operands:
            return inst.name
    return ""


def _windows(line: _Line, start: str, done: str) -> list[tuple[float, float]]:
    """Each run of the collective on one device: from its start's beginning to its done's end
    (each start paired with the first done after it)."""
    starts = line.by_name.get(start, [])
    if not done:
        return [(op.start_us, op.end_us) for op in starts]
    dones = line.by_name.get(done, [])
    windows, k = [], 0
    for begin in starts:
        while k < len(dones) and dones[k].start_us < begin.start_us:
            k += 1
        if k < len(dones):
            windows.append((begin.start_us, dones[k].end_us))
            k += 1
    return windows


def _overlap(line: _Line, lo: float, hi: float, own: set[str]) -> float:
    """The time in ``(lo, hi)`` that other instructions ran on the device: events that do not
    enclose the window (a loop around it) and are not the collective's own, counted once."""
    inside = [(max(op.start_us, lo), min(op.end_us, hi)) for op in line.within(lo, hi)
              if op.name not in own and op.end_us > lo and op.start_us < hi
              and not (op.start_us <= lo and op.end_us >= hi)]
    return sum(finish - begin for begin, finish in _union(inside))


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``intervals`` merged where they overlap or touch: disjoint, in time order."""
    merged: list[tuple[float, float]] = []
    for begin, finish in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], finish))
        else:
            merged.append((begin, finish))
    return merged

