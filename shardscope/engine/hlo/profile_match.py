"""Which of a profile's executions ran a compiled plan's module: found by what they hold.

A profile groups every instruction run by the execution that ran it
(:mod:`shardscope.measure.profile_read`). :func:`module_calls` groups one module's runs into its
calls (complete ones, in order; a call the trace cut at its start or end is set apart), and
:func:`check_matches` compares what those calls ran with what the module compiled here would
run, so that a profile is put on a plan only when it is that plan's program:

- the devices the program spans (the dispatch's ``num_partitions`` x ``num_replicas``);
- every instruction name that ran is one of the module's;
- each instruction ran as often per call as its loops' trip counts say (a loop run 8 times per
  call is another micro-batch count than one run 4 times);
- every collective of the module outside a conditional ran;
- where the profile prints instructions (an accelerator's ops), their shapes.

A module's name alone (``jit_train_step``) says nothing: two programs compiled from functions of
one name share it. XLA writes no fingerprint of the module into a CPU profile, and an
accelerator's program id is not one shardscope can compute from the module's text, so the
content is the test.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.hlo.shapes import parse_shape
from shardscope.engine.hlo.text import HloModule
from shardscope.measure.profile_read import OpRun, Profile, ProfileError

__all__ = ["Call", "ModuleCalls", "ProfileMismatch", "check_matches", "expected_runs", "module_calls"]


class ProfileMismatch(ProfileError):
    """The profile's module of the plan's name is another program: the message names the difference."""


@dataclass
class Call:
    """One execution of a module: each device's instruction runs in it (time order), and each
    device's module run time where the platform records one (an accelerator's)."""

    key: str
    start_us: float
    lines: dict[str, list[OpRun]] = field(default_factory=dict)
    run_us: dict[str, float] = field(default_factory=dict)

    def count(self, device: str) -> Counter[str]:
        """How often each instruction ran on ``device`` in this call."""
        return Counter(op.name for op in self.lines.get(device, ()))


@dataclass(frozen=True)
class ModuleCalls:
    """One module of a profile: its complete calls in order, how many were cut by the trace's
    start or end (``cut``), the devices the program spans (``devices``: as its dispatch says,
    else as seen) and those the profile holds (``seen``)."""

    name: str
    program_id: str
    calls: tuple[Call, ...]
    cut: int
    devices: int
    seen: int


def module_calls(profile: Profile, name: str) -> list[ModuleCalls]:
    """Every program of the profile named ``name`` (an accelerator's program ids apart), grouped
    into its calls. A call is cut when its dispatch is not in the trace (it began before the trace
    did), it holds fewer devices than the others, or it is the last and ran fewer instructions
    than the calls before it (the trace stopped first)."""
    groups: dict[str, list[OpRun]] = {}
    for op in profile.ops:
        if op.module == name:
            groups.setdefault(op.program_id if profile.platform != "cpu" else "", []).append(op)
    dispatched = {e.call for e in profile.executions if e.module == name}
    # XLA:CPU records each dispatch with the execution's run id: a call without one in the trace
    # began before it (an accelerator's device run ids are not its host's, and are not compared)
    require_dispatch = profile.platform == "cpu" and bool(profile.executions)
    spans = Counter(e.devices for e in profile.executions if e.module == name and e.devices)
    found = []
    for program, ops in groups.items():
        calls: dict[str, Call] = {}
        for op in sorted(ops, key=lambda op: op.start_us):
            call = calls.setdefault(op.call, Call(op.call, op.start_us))
            call.lines.setdefault(op.device, []).append(op)
        for run in profile.module_runs:
            if run.module == name and run.call in calls and (profile.platform == "cpu" or run.program_id == program):
                calls[run.call].run_us[run.device] = run.dur_us
        ordered = sorted(calls.values(), key=lambda c: c.start_us)
        seen = max((len(c.lines) for c in ordered), default=0)
        complete = [c for c in ordered if len(c.lines) == seen and (not require_dispatch or c.key in dispatched)]
        if len(complete) > 2 and _shorter(complete[-1], complete[:-1]):
            complete = complete[:-1]
        devices = spans.most_common(1)[0][0] if spans else seen
        found.append(ModuleCalls(name, program, tuple(complete), len(ordered) - len(complete), devices, seen))
    return found


def _shorter(last: Call, before: list[Call]) -> bool:
    """True when ``last`` ran fewer instructions than every call before it (stopped mid-run)."""
    size = sum(len(line) for line in last.lines.values())
    return size < min(sum(len(line) for line in c.lines.values()) for c in before)


def expected_runs(module: HloModule) -> dict[str, int | None]:
    """How often each instruction that runs on its own (in the entry, a loop's body or condition,
    a called or async computation) runs per call of ``module``: its loops' trip counts multiplied
    (a condition's once more); None where a loop's count is unknown or a conditional may skip it.
    Instructions fused into another are left out: they never run as themselves."""
    counts = LoopCounts(module)
    runs: dict[str, int | None] = {}
    entry = module.entry
    if entry is None:
        return runs
    todo: list[tuple[str, int | None]] = [(entry.name, 1)]
    visited: set[str] = set()
    while todo:
        name, times = todo.pop()
        computation = module.computations.get(name)
        if computation is None or name in visited:
            continue
        visited.add(name)
        for inst in computation.instructions:
            runs[inst.name] = times
            for role, callee in inst.called_computations:
                if inst.opcode == "while":
                    trip = counts.trip_count(inst.name)
                    each = None if times is None or trip is None else times * (trip + (role == "condition"))
                    todo.append((callee, each))
                elif role == "branch" or inst.opcode == "conditional":
                    todo.append((callee, None))
                elif inst.opcode in ("call", "async-start") or role == "calls" and inst.opcode != "fusion":
                    todo.append((callee, times))
    return runs


_SAME_RUN = "profile a run of this program (its settings, mesh and JAX), or check the program the run compiled: " \
    "its dump, with --xla-dump"
_DEVICES_HINT = "check the program on the run's device count (--devices N), or profile a run on this program's mesh"
_LOOP_HINT = "check the program with the settings the run used (its micro-batch count, its lengths), or profile a " \
    "run of this program"


def _difference(plan: CompiledPlan, found: ModuleCalls) -> tuple[str, str]:
    """The first way ``found`` is not ``plan``'s program and what to do about it ("" when none)."""
    module = plan.module
    assert module is not None
    name = found.name
    spans = module.num_partitions * module.replica_count
    if found.devices != spans:
        return (f"its {name} ran on {found.devices} device{'s' if found.devices != 1 else ''}, this program on "
                f"{spans} (another mesh or device count?)", _DEVICES_HINT.replace("N", str(found.devices)))
    if not found.calls:
        return "", ""
    observed = _observed(found.calls)
    unknown = sorted(n for n in observed if module.instruction(n) is None)
    if unknown:
        listed = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        return (f"its {name} ran instructions this program does not have ({listed}): another program compiled "
                "under the same name", _SAME_RUN)
    expected = expected_runs(module)
    loop = _loop_difference(module, expected, observed)
    if loop:
        return loop, _LOOP_HINT if "the loop" in loop else _SAME_RUN
    for collective in plan.collectives:
        start = collective.wrapper or collective.name
        if start not in observed and not collective.in_conditional and expected.get(start):
            return (f"its {name} never ran {start}, which this program runs {expected[start]} "
                    f"time{'s' if expected[start] != 1 else ''} per call: another program compiled under the same name",
                    _SAME_RUN)
    return _shape_difference(module, name, found.calls), _LOOP_HINT


def _observed(calls: Iterable[Call]) -> dict[str, float]:
    """Each instruction's runs per call on one device: the median over the calls and devices."""
    per: dict[str, list[int]] = {}
    calls = list(calls)
    for call in calls:
        for device in call.lines:
            for inst, n in call.count(device).items():
                per.setdefault(inst, []).append(n)
    slots = sum(len(c.lines) for c in calls)
    return {inst: statistics.median(counts + [0] * (slots - len(counts))) for inst, counts in per.items()}


def _loop_difference(module: HloModule, expected: Mapping[str, int | None], observed: Mapping[str, float]) -> str:
    """``the profile's step runs its loop while.12 8 times per call, this program 4``: the first
    instruction whose count differs, said of the loop around it when there is one."""
    counts = LoopCounts(module)
    for inst_name, seen in observed.items():
        want = expected.get(inst_name)
        if want is None or seen == want or seen == 0:
            continue
        loop = _innermost_loop(module, inst_name)
        trip = counts.trip_count(loop) if loop else None
        if loop and trip:
            ran = seen * trip / want
            return (f"its {module.name} runs the loop {loop} {ran:g} times per call, this program {trip} (another "
                    "micro-batch count, or another length?)")
        return (f"its {module.name} ran {inst_name} {seen:g} times per call, this program {want}: another program "
                "compiled under the same name")
    return ""


def _innermost_loop(module: HloModule, inst_name: str) -> str:
    """The while loop whose body (or condition) holds ``inst_name``, directly or through calls ("" for none)."""
    inst = module.instruction(inst_name)
    computation = inst.computation if inst is not None else ""
    seen: set[str] = set()
    while computation and computation not in seen:
        seen.add(computation)
        callers = module.callers.get(computation, ())
        loops = [caller for caller, role in callers if caller.opcode == "while" and role in ("body", "condition")]
        if loops:
            return loops[0].name
        computation = callers[0][0].computation if callers else ""
    return ""


def _shape_difference(module: HloModule, name: str, calls: Iterable[Call]) -> str:
    """Where the profile prints its instructions (an accelerator's ops), the first whose shape
    is not the module's."""
    checked: set[str] = set()
    for call in calls:
        for line in call.lines.values():
            for op in line:
                if not op.text or op.name in checked:
                    continue
                checked.add(op.name)
                inst = module.instruction(op.name)
                ran = _shape_of(op.text)
                if inst is None or ran is None:
                    continue
                ours = str(parse_shape(inst.shape_text))
                if ran != ours:
                    return (f"its {name}'s {op.name} is {ran}, this program's is {ours} (other shapes: another "
                            "batch size?)")
        return ""  # one call shows every instruction's shape
    return ""


def _shape_of(text: str) -> str | None:
    """The shape of ``%name = SHAPE opcode(...)`` without its layout, as the module's parser reads it."""
    _, _, rest = text.partition(" = ")
    depth, end = 0, 0
    for end, char in enumerate(rest):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == " " and depth == 0:
            break
    else:
        return None
    try:
        return str(parse_shape(rest[:end]))
    except (ValueError, IndexError):
        return None


def check_matches(plan: CompiledPlan, profile: Profile) -> ModuleCalls:
    """The profile's calls of ``plan``'s module, or a :class:`ProfileMismatch` naming the
    difference (several programs of the name: the first that matches; none there: a
    ProfileError naming the modules the profile holds)."""
    module = plan.module
    if module is None:
        raise ProfileError("This plan has no module text to find in the profile.")
    held_by_name = module_calls(profile, module.name)
    candidates = [found for found in held_by_name if found.calls]
    if held_by_name and not candidates:
        cut = sum(found.cut for found in held_by_name)
        raise ProfileError(f"The profile at {profile.source} holds {cut} call{'s' if cut != 1 else ''} of {module.name}, "
                           "each cut by the trace's start or end: no whole call to measure.",
                           "start the trace before the calls you profile and block_until_ready before stop_trace")
    differences = []
    for found in candidates:
        said, hint = _difference(plan, found)
        if not said:
            return found
        differences.append((said, hint))
    if differences:
        said, hint = differences[0]
        raise ProfileMismatch(f"The profile at {profile.source} is not of this program: {said}.", hint)
    held = ", ".join(profile.modules) or "none"
    raise ProfileError(f"The profile at {profile.source} holds no run of {module.name}: it holds {held}.",
                       "profile a run that calls this program, or check the function the profile ran (-f)")
