"""A profile's times on a program's plan, as text: each collective's measured time per call and
per run (per iteration in a loop) on its slowest device, the spread, the compute it overlapped,
and the step's measured time beside its estimate where the chip is known (``--profile``,
``--profile-dir``). Every figure is a median over the calls after the first, which is shown
apart; what the profile could not give is said in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.hlo.roofline import seconds_words
from shardscope.engine.hlo.measured import MeasuredCollective, MeasuredPlan

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.engine.joined.inspection import Inspection

COLUMNS = ("collective", "loops", "runs/call", "per run", "per call", "spread", "overlapped")
"""The measured table's columns: per run is per iteration in a loop; per call and spread are the
slowest device's time in one call and how much faster the fastest device was."""


def plural(count: int, noun: str) -> str:
    """``1 call``, ``5 calls``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def measured_plan_of(ins: "Inspection") -> CompiledPlan | None:
    """The plan the profile was put on: a ``--target``'s whose compiler ran the profiled run, else
    the plan compiled here."""
    measured = ins.measured
    if measured is not None and measured.on_target:
        return next((t.compiled for t in ins.targets if t.target == measured.on_target), ins.compiled)
    return ins.compiled


def measured_table(ins: "Inspection", label: str = "") -> Table | None:
    """The measured times of ``ins``'s collectives (None without a profile, or for a step with no
    collective: its step line says it); ``label`` names the plan in the title."""
    measured, plan = ins.measured, measured_plan_of(ins)
    if measured is None or plan is None or not plan.collectives:
        return None
    title = f"{label}: {title_words(measured)}" if label else title_words(measured)
    table = Table(title=title, title_justify="left", show_edge=False)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("collective", "loops") else "right")
    for collective in plan.collectives:
        found = measured.of(collective.name)
        loops = " > ".join(f"x{n}" if n is not None else "x?" for n in collective.loop_trip_counts) or "-"
        table.add_row(collective.name, loops, *_cells(found))
    return table


def _cells(found: MeasuredCollective | None) -> tuple[str, ...]:
    """The numbers of one row ("not run" when the profile has no run of it)."""
    if found is None:
        return ("not run", "", "", "", "")
    overlapped = "n/a" if found.overlapped_s is None else seconds_words(found.overlapped_s)
    return (f"{found.runs_per_call:g}", seconds_words(found.per_run_s), seconds_words(found.per_step_s),
            seconds_words(found.spread_s), overlapped)


def title_words(measured: MeasuredPlan) -> str:
    """``measured: 5 calls of jit_step on 8 CPU devices (medians of the 4 after the first)``."""
    on = f" of {measured.on_target}'s plan" if measured.on_target else ""
    if measured.program_devices and measured.devices < measured.program_devices:
        devices = (f"{measured.devices} of the program's {plural(measured.program_devices, device_noun(measured))} "
                   "(the other hosts' files were not read)")
    else:
        devices = plural(measured.devices, device_noun(measured))
    median = f"; medians of the {measured.median_calls} after the first" if measured.first_call_s is not None else ""
    return f"measured: {plural(measured.calls, 'call')} of {measured.module}{on} on {devices}{median}"


def device_noun(measured: MeasuredPlan) -> str:
    """``CPU device``, ``TPU v5 Lite device``: what the profile says ran the program."""
    return f"{measured.machine} device" if measured.machine else "device"


def step_line(ins: "Inspection") -> str:
    """``step measured 1.30 ms per call (slowest device; fastest 1.06 ms), collectives 0.41 ms
    (the device longest in them); estimated 1.21 ms on v5e: measured 1.07x the estimate``: the
    collectives' time is :attr:`MeasuredPlan.collectives_s`, never more than the step."""
    measured = ins.measured
    if measured is None or measured.step_s is None:
        return ""
    plan = measured_plan_of(ins)
    collectives = (f", collectives {seconds_words(measured.collectives_s)} (the device longest in them)"
                   if plan is not None and plan.collectives else ", no collectives")
    devices = ("one device" if measured.devices == 1 else
               f"slowest device; fastest {seconds_words(measured.fastest_step_s or 0.0)}")
    line = f"step measured {seconds_words(measured.step_s)} per call ({devices}){collectives}"
    if measured.estimate is not None and measured.device_estimate_s:
        line += (f"; estimated {seconds_words(measured.device_estimate_s)} on {measured.estimate.chip} (its "
                 f"instructions and loops on the device, no launch): measured {measured.estimate_ratio:.2f}x the "
                 "estimate")
    return line


def notes(ins: "Inspection") -> list[str]:
    """What the figures leave out or were chosen from, one line each: the first call, calls the
    trace cut, collectives that never ran, which run of a folder was read, a target's estimate
    that is another plan's, why there are no times."""
    measured = ins.measured
    if measured is None:
        return [ins.profile_note] if ins.profile_note else []
    said = []
    if measured.first_call_s is not None:
        said.append(f"the first call took {seconds_words(measured.first_call_s)}: shown apart, not in the medians "
                    "(a trace's first call can pay for the profiler's start)")
    elif measured.calls == 1:
        said.append("one call in the profile: its figures are that call's, the profiler's start maybe included")
    if measured.cut_calls:
        said.append(f"{plural(measured.cut_calls, 'call')} cut by the trace's start or end, not counted")
    if measured.missing:
        said.append(f"not run in the profile: {', '.join(measured.missing)}")
    others = [t for t in ins.targets if t.target != measured.on_target and t.step is not None]
    if others and measured.platform == "cpu":
        said.append(f"measured on the CPU's plan; {', '.join(t.target for t in others)}'s estimate is of its own plan, "
                    "another compiler's program (in the targets' table)")
    if measured.note:
        said.append(measured.note)
    return said


def render_measured(ins: "Inspection", console: "Console", label: str = "") -> None:
    """The measured table, step line and notes of ``ins`` (nothing without a profile)."""
    lines = notes(ins)
    if ins.measured is None:
        for line in lines:
            console.print(Text(f"{label}: {line}" if label else line, style="dim"))
        if lines:
            console.print()
        return
    table = measured_table(ins, label)
    if table is not None:
        console.print(table)
    else:
        title = title_words(ins.measured)
        console.print(Text(f"{label}: {title}" if label else title))
    line = step_line(ins)
    if line:
        console.print(Text(line))
    for note in lines:
        console.print(Text(note, style="dim"))
    console.print()
