"""A profile's times on a program's plan, as text: each collective's measured time per step and
per run (per iteration in a loop) on its slowest device, the spread, the compute it overlapped,
and the step's measured time beside its estimate (``--profile``, ``--profile-dir``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from shardscope.engine.hlo.roofline import seconds_words
from shardscope.engine.hlo.measured import BY_OP_NAME, MeasuredCollective, MeasuredPlan

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.engine.inspection import Inspection

COLUMNS = ("collective", "loops", "runs/step", "per run", "per step", "spread", "overlapped")
"""The measured table's columns: per run is per iteration in a loop; per step and spread are the
slowest device's time and how much faster the fastest was."""


def measured_table(ins: "Inspection", label: str = "") -> Table | None:
    """The measured times of ``ins``'s collectives (None without a profile); ``label`` names the
    plan in the title."""
    measured = ins.measured
    if measured is None or ins.compiled is None:
        return None
    title = f"{label}: {_title(measured)}" if label else _title(measured)
    table = Table(title=title, title_justify="left", show_edge=False)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("collective", "loops") else "right")
    for collective in ins.compiled.collectives:
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


def _title(measured: MeasuredPlan) -> str:
    """``measured: 5 calls of jit_step on 8 devices``."""
    how = " (found by op_name: totals, no spread)" if measured.matched_by == BY_OP_NAME else ""
    return f"measured: {measured.calls} calls of {measured.module} on {measured.devices} device(s){how}"


def step_line(ins: "Inspection") -> str:
    """``step measured 1.30 ms per call (slowest device; fastest 1.06 ms); estimate ...``."""
    measured = ins.measured
    if measured is None or measured.step_s is None:
        return ""
    line = (f"step measured {seconds_words(measured.step_s)} per call (slowest device; fastest "
            f"{seconds_words(measured.fastest_step_s or 0.0)}), collectives {seconds_words(measured.collectives_s)}")
    estimates = [plan.costs.step for plan in ins.targets if plan.costs is not None and plan.costs.step is not None]
    if estimates:
        line += f"; estimated {seconds_words(estimates[0].seconds)} on {estimates[0].chip}"
    return line


def render_measured(ins: "Inspection", console: "Console", label: str = "") -> None:
    """The measured table and step line of ``ins`` (nothing without a profile)."""
    table = measured_table(ins, label)
    if table is None:
        return
    console.print(table)
    line = step_line(ins)
    if line:
        console.print(Text(line))
    if ins.measured is not None and ins.measured.missing:
        console.print(Text(f"not in the profile: {', '.join(ins.measured.missing)}", style="dim"))
    console.print()
