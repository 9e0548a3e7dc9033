"""A profile put on a compiled plan: each collective's measured time, per run and per step.

:func:`profile_onto` finds the plan's module among the profile's (its name, then the
instruction names that ran: a module compiled otherwise, with other names, is not taken for
it), and for each collective of the plan reads every run of its instruction on every device.
What the collective costs is what the slowest device spends in it (the others wait for it), with
the fastest beside it (the spread). An asynchronous collective (``all-reduce-start`` ...
``all-reduce-done`` on TPU and GPU) runs from its start to the end of its done; the module's
other instructions that ran on the same device meanwhile are the compute it overlapped. A
synchronous one overlaps whatever ran beside it on the same device's timeline (nothing, on
XLA:CPU, whose device runs its program on one thread).

When the module's name is not in the profile, or its instruction names are not those that ran,
the collectives are found by their ``op_name`` and source line in XProf's ``hlo_stats``
(accelerators only): the total time and occurrences, no spread nor overlap. A profile of
another program raises a :class:`~shardscope.measure.profile_read.ProfileError` naming the
modules it holds. :func:`profile_instruction` measures any one instruction the same way.

A plan read from module text (``check``'s, or one a dump of XLA's gives) is measured alike:
``profile_onto(plan, read_profile(DIR))``.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Iterable

from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.hlo.text import HloModule
from shardscope.collective_kinds import NAMES
from shardscope.measure.profile_read import HloStat, ModuleRun, OpRun, Profile, ProfileError

BY_NAME = "instruction names"
BY_OP_NAME = "op_name and source line"

_US = 1e-6


@dataclass(frozen=True)
class MeasuredCollective:
    """One collective of the plan as the profile measured it (seconds).

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
    """A compiled plan's module as a profile measured it: ``calls`` runs of it per device on
    ``devices`` devices, the slowest device's time per call (``step_s``, the fastest's beside
    it), and each collective's times (``missing``: the plan's collectives that never ran)."""

    module: str
    source: str
    calls: int
    devices: int
    step_s: float | None
    fastest_step_s: float | None
    collectives: tuple[MeasuredCollective, ...]
    missing: tuple[str, ...] = ()
    matched_by: str = BY_NAME

    def of(self, name: str) -> MeasuredCollective | None:
        """The measured collective named ``name`` (the plan's instruction name), if it ran."""
        return next((c for c in self.collectives if c.name == name), None)

    @property
    def collectives_s(self) -> float:
        """The collectives' time per step on their slowest devices, summed."""
        return sum(c.per_step_s for c in self.collectives)

    def to_json(self) -> dict[str, object]:
        """Its numbers, in seconds (``docs/reference/json.md``: ``measured``)."""
        return {"module": self.module, "source": self.source, "calls": self.calls, "devices": self.devices,
                "step_s": self.step_s, "fastest_step_s": self.fastest_step_s, "collectives_s": self.collectives_s,
                "matched_by": self.matched_by, "missing": list(self.missing),
                "collectives": [c.to_json() for c in self.collectives]}


def profile_onto(plan: CompiledPlan, profile: Profile) -> MeasuredPlan:
    """``profile``'s times on ``plan``'s collectives (see the module docstring); raises a
    ProfileError when the profile holds no run of the plan's module."""
    module = plan.module
    if module is None:
        raise ProfileError("This plan has no module text to find in the profile.")
    names = {inst.name for inst in module.instructions()}
    ops = _module_ops(profile, module, names)
    if ops:
        return _by_names(plan, module, profile, ops, names)
    stats = _stats_of(plan, profile.stats)
    if stats:
        return _by_op_names(plan, module, profile, stats)
    held = ", ".join(profile.modules) or "none"
    raise ProfileError(f"The profile at {profile.source} is of another program: it holds the modules {held}, "
                       f"not {module.name} as compiled here.",
                       "profile the same program with the same JAX, flags and mesh, or pass the profile of this run")


def profile_instruction(module: HloModule, profile: Profile, name: str) -> MeasuredCollective | None:
    """Any instruction of ``module`` measured as a collective is (an async ``-start`` from its
    start to the end of its done, the compute in between as overlapped); None when it never ran."""
    names = {inst.name for inst in module.instructions()}
    runs = _runs_by_call(_module_ops(profile, module, names))
    return _measured(name, name, module, runs, sorted({call for call, _ in runs}),
                     _devices(profile.module_runs, module.name, runs))


class _Line:
    """One device's instruction runs in one call, in time order, indexed by name and start (a
    slice's profile holds millions: each collective looks up its own runs and its window's)."""

    def __init__(self, ops: list[OpRun]) -> None:
        self.ops = sorted(ops, key=lambda op: op.start_us)
        self.starts = [op.start_us for op in self.ops]
        self.longest = max((op.dur_us for op in self.ops), default=0.0)
        self.by_name: dict[str, list[OpRun]] = {}
        for op in self.ops:
            self.by_name.setdefault(op.name, []).append(op)

    def within(self, lo: float, hi: float) -> list[OpRun]:
        """The runs that may overlap ``(lo, hi)``: those that start before ``hi`` and not longer
        before ``lo`` than the longest run lasts."""
        first = bisect.bisect_left(self.starts, lo - self.longest)
        last = bisect.bisect_left(self.starts, hi)
        return self.ops[first:last]


def _runs_by_call(ops: list[OpRun]) -> dict[tuple[int, str], _Line]:
    """Each device's instruction runs in each call of the module."""
    runs: dict[tuple[int, str], list[OpRun]] = {}
    for op in ops:
        if op.call >= 0:
            runs.setdefault((op.call, op.device), []).append(op)
    return {key: _Line(line) for key, line in runs.items()}


def _module_ops(profile: Profile, module: HloModule, names: set[str]) -> list[OpRun]:
    """The profile's instruction runs of ``module``: those of the modules of its name (an
    accelerator's program ids apart) whose instructions are all the module's own."""
    groups: dict[tuple[str, str], list[OpRun]] = {}
    for op in profile.ops:
        if op.module == module.name:
            groups.setdefault((op.module, op.program_id), []).append(op)
    for ops in groups.values():
        ran = [op for op in ops if op.name in names]
        # XLA:CPU's threads also show the runtime's own events (Rendezvous, waits): only the
        # names that are instructions count, and most of what ran must be the module's
        if ran and _is_the_module(ops, ran, profile):
            return ran
    return []


def _is_the_module(ops: list[OpRun], ran: list[OpRun], profile: Profile) -> bool:
    """True when the instruction names that ran are this module's: every one on an accelerator's
    ops line; on the CPU's threads, where the runtime's own events mix in under a dispatch that
    names the module, some of them."""
    on_device = any(run.dur_us is not None for run in profile.module_runs)
    return len(ran) == len(ops) if on_device else bool(ran)


def _by_names(plan: CompiledPlan, module: HloModule, profile: Profile, ops: list[OpRun],
              names: set[str]) -> MeasuredPlan:
    """The plan measured from its instructions' runs: call by call, device by device."""
    runs = _runs_by_call(ops)
    calls = sorted({call for call, _ in runs})
    devices = _devices(profile.module_runs, module.name, runs)
    steps = _step_times(profile.module_runs, module.name, runs, calls, devices)
    measured, missing = [], []
    for collective in plan.collectives:
        found = _measured(collective.name, collective.wrapper or collective.name, module, runs, calls, devices)
        if found is None:
            missing.append(collective.name)
        else:
            measured.append(found)
    return MeasuredPlan(module.name, profile.source, len(calls), devices,
                        _mean([max(s) for s in steps]), _mean([min(s) for s in steps]), tuple(measured), tuple(missing))


def _devices(runs: Iterable[ModuleRun], module: str, ops: dict[tuple[int, str], _Line]) -> int:
    """How many devices ran the module: those its runs (or dispatches) name."""
    named = {run.device for run in runs if run.module == module}
    return len(named) or len({device for _, device in ops})


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _step_times(module_runs: Iterable[ModuleRun], module: str, runs: dict[tuple[int, str], _Line],
                calls: list[int], devices: int) -> list[list[float]]:
    """Each call's time on each device: an accelerator's module run; on the CPU, the time its
    thread spent in the program's instructions, over the devices' runs it hosted (its share of
    the call's instruction runs)."""
    timed: dict[str, list[float]] = {}
    for run in module_runs:
        if run.module == module and run.dur_us is not None:
            timed.setdefault(run.device, []).append(run.dur_us * _US)
    if timed:
        count = min(len(durs) for durs in timed.values())
        return [[durs[k] for durs in timed.values()] for k in range(count)]
    steps = []
    for call in calls:
        lines = [line for (c, _), line in runs.items() if c == call]
        per_device = sum(len(line.ops) for line in lines) / max(devices, 1)
        steps.append([_busy_us(line.ops) / max(1, round(len(line.ops) / per_device)) * _US for line in lines])
    return steps


def _busy_us(line: list[OpRun]) -> float:
    """The time covered by ``line``'s events (sorted by start), nested ones counted once."""
    total, end = 0.0, float("-inf")
    for op in line:
        if op.start_us >= end:
            total += op.dur_us
            end = op.end_us
        elif op.end_us > end:
            total += op.end_us - end
            end = op.end_us
    return total


def _measured(name: str, start: str, module: HloModule, runs: dict[tuple[int, str], _Line],
              calls: list[int], devices: int) -> MeasuredCollective | None:
    """One instruction's times (``start``: it, or the async start that wraps it; its done found in
    the module): in each call, on its slowest device and its fastest.

    Its runs per call are every run in the call over the ``devices`` that ran the module. A
    device's time in a call is its mean run times those runs: on XLA:CPU a thread of the pool
    can host two devices' runs in one call (one waits at a rendezvous while the other runs), and
    its per-run mean is still one device's.
    """
    done = _done_of(module, start)
    by_call: dict[int, list[_Line]] = {}
    for (c, _), line in runs.items():
        by_call.setdefault(c, []).append(line)
    slowest: list[float] = []  # per call, the slowest device's time in it; its overlapped time; the fastest's
    overlapped: list[float] = []
    fastest: list[float] = []
    executions = 0
    lanes = 0
    for call in calls:
        per_lane = []
        for line in by_call.get(call, ()):
            windows = _windows(line, start, done)
            if windows:
                busy = sum(hi - lo for lo, hi in windows)
                overlap = sum(_overlap(line, lo, hi, {start, done}) for lo, hi in windows)
                per_lane.append((busy / len(windows), overlap / len(windows), len(windows)))
        if not per_lane:
            continue
        total = sum(n for _, _, n in per_lane)
        per_device = total / max(devices, 1)
        worst = max(per_lane)
        slowest.append(worst[0] * per_device)
        overlapped.append(worst[1] * per_device)
        fastest.append(min(mean for mean, _, _ in per_lane) * per_device)
        executions += total
        lanes = max(lanes, len(per_lane))
    if not slowest:
        return None
    count = len(calls)
    runs_per_call = executions / count / max(devices, 1)
    per_step = sum(slowest) / count
    return MeasuredCollective(
        name, runs_per_call, devices or lanes, per_step * _US, sum(fastest) / count * _US,
        per_step / runs_per_call * _US, sum(overlapped) / count * _US)


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
    inside = [op for op in line.within(lo, hi) if op.name not in own and op.end_us > lo and op.start_us < hi
              and not (op.start_us <= lo and op.end_us >= hi)]
    clipped = [OpRun(op.device, op.module, op.program_id, op.call, op.name, max(op.start_us, lo),
                     min(op.end_us, hi) - max(op.start_us, lo)) for op in inside]
    return _busy_us(sorted(clipped, key=lambda op: op.start_us))


def _stats_of(plan: CompiledPlan, stats: Iterable[HloStat]) -> dict[str, HloStat]:
    """hlo_stats rows of the plan's collectives, found by op_name and source line (``file.py:14``)."""
    rows = [row for row in stats if _COLLECTIVE_ROW.search(row.name) or _COLLECTIVE_ROW.search(row.category)]
    found = {}
    for collective in plan.collectives:
        line = _file_line(collective.source)
        for row in rows:
            if collective.op_name and row.op_name == collective.op_name and (not line or not row.source
                                                                             or row.source == line):
                found[collective.name] = row
                break
    return found


_COLLECTIVE_ROW = re.compile("|".join(map(re.escape, NAMES)) + "|collective")
"""A profile row of a collective: named after one of the kinds' opcodes, or in a collective category."""
_FILE_LINE = re.compile(r"([^/\s(]+\.py:\d+)")


def _file_line(source: str) -> str:
    """``prog.py:14`` from a collective's source (``prog.py:14 (step)``), "" when it has none."""
    found = _FILE_LINE.search(source)
    return found.group(1) if found else ""


def _by_op_names(plan: CompiledPlan, module: HloModule, profile: Profile, stats: dict[str, HloStat]) -> MeasuredPlan:
    """The plan measured from hlo_stats rows found by op_name: totals over the profiled devices."""
    runs = [r for r in profile.module_runs if r.dur_us is not None]
    devices = len({r.device for r in runs}) or 1
    calls = max(1, len(runs) // devices)
    measured = tuple(
        MeasuredCollective(name, row.occurrences / devices / calls, devices, row.total_us / devices / calls * _US,
                           row.total_us / devices / calls * _US, row.total_us / max(row.occurrences, 1) * _US, None,
                           BY_OP_NAME)
        for name, row in stats.items())
    missing = tuple(c.name for c in plan.collectives if c.name not in stats)
    steps = [r.dur_us * _US for r in runs if r.dur_us is not None]
    return MeasuredPlan(module.name, profile.source, calls, devices, max(steps) if steps else None,
                        min(steps) if steps else None, measured, missing, BY_OP_NAME)
