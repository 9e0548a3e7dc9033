"""The sweep as a rich table with the pick, and as the ``sweep --json`` object.

With ``hidden`` (the app's ``measurements_hidden``, for screenshots that must not change) the run
times show as ``···``, and so does the pick: which plan and chunk size is the fastest is a measured
result. Memory and communication are computed, not measured, and stay. The ``sweep`` command
never hides anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardscope.engine.counts import count_text
from shardscope.engine.hlo.roofline import seconds_words
from shardscope.render.text import plans_unavailable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from shardscope.pipeline.sweep import Sweep, SweepPoint
    from shardscope.pipeline.comparison import WorkDifference

HIDDEN = "···"
"""What a measured time, or the pick made from one, shows while measurements are hidden."""


def mib(n: int) -> str:
    """Bytes in binary units: ``512 B``, ``16.3 KiB``, ``1.25 MiB``, ``2 GiB``, ``1 PiB``."""
    for scale, unit in ((2**60, "EiB"), (2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def pick_sentence(sweep: "Sweep", hidden: bool = False) -> str:
    """Which (plan, chunk size) to use, or that none fits and what the smallest footprint is.

    With ``hidden`` a pick shows as ``···``: it is the fastest point, a measured result."""
    pick = sweep.pick
    budget = "" if sweep.memory_budget_bytes is None else f" within the budget of {mib(sweep.memory_budget_bytes)}"
    if budget and sweep.target is not None:
        budget += f" per device on {sweep.target}"
    if pick is not None and hidden:
        return f"pick: {HIDDEN} (the fastest{budget})."
    if pick is not None:
        where = "" if sweep.target is None else f" on {sweep.target}"
        timed = "" if sweep.target is None else " on the CPU"
        same = sweep.same_program
        if len(same) > 1:  # one program under several names: no winner among them
            text = (f"pick: chunk size {pick.chunk_size}, the fastest{budget}, where {_listed(same)} compile to the "
                    f"same collectives and memory: one program, their times differ by noise only (medians "
                    f"{_medians(same)}{timed}, {mib(sweep.budgeted_bytes(pick))} per device{where}).")
        else:
            text = (f"pick: {pick.plan} at chunk size {pick.chunk_size}: the fastest{budget} (median "
                    f"{pick.run_s.median * 1e3:.3f} ms{timed}, {mib(sweep.budgeted_bytes(pick))} per device{where}).")
        return text + _other_programs(same, sweep.same_collectives)
    small = sweep.smallest_footprint
    where = "" if sweep.target is None else f" on {sweep.target}"
    return (f"nothing fits{budget}: the smallest footprint is {mib(sweep.budgeted_bytes(small))} per device{where} "
            f"({small.plan} at chunk size {small.chunk_size}).")


_FIGURES = {"argument_size_in_bytes": "arguments", "output_size_in_bytes": "outputs",
            "temp_size_in_bytes": "temporaries", "alias_size_in_bytes": "aliases",
            "generated_code_size_in_bytes": "code", "flops": "XLA's flops", "bytes_accessed": "XLA's bytes accessed"}
"""How the pick's sentence names the memory figures and XLA counts two programs differ in."""


def _other_programs(same: "tuple[SweepPoint, ...]",
                    alike: "tuple[tuple[SweepPoint, tuple[WorkDifference, ...]], ...]") -> str:
    """`` naive runs the same collectives as deferred and reduced but compiles to another program
    (temporaries 7,184 B against 7,168 B; XLA's bytes accessed 29,200 against 29,192): timed
    apart.``: the points of the pick's chunk size the table may show alike, grouped by what differs."""
    groups: dict[tuple["WorkDifference", ...], list["SweepPoint"]] = {}
    for point, differences in alike:
        groups.setdefault(differences, []).append(point)
    pick = _listed(same) if len(same) > 1 else same[0].plan
    text = ""
    for differences, points in groups.items():
        unit = [" B" if name.endswith("_in_bytes") else "" for name, _, _ in differences]
        figures = "; ".join(f"{_FIGURES.get(name, name)} {theirs:,.0f}{u} against {mine:,.0f}{u}"
                            for (name, mine, theirs), u in zip(differences, unit))
        verb = "" if len(points) > 1 else "s"
        text += (f" {_listed(tuple(points)) if len(points) > 1 else points[0].plan} run{verb} the same collectives "
                 f"as {pick} but compile{verb} to another program ({figures}): timed apart.")
    return text


def _listed(points: "tuple[SweepPoint, ...]") -> str:
    """``naive, deferred and reduced``: the plans of ``points``, with their chunk sizes when they differ."""
    sizes = {p.chunk_size for p in points}
    names = [p.plan if len(sizes) == 1 else f"{p.plan} at chunk size {p.chunk_size}" for p in points]
    return ", ".join(names[:-1]) + f" and {names[-1]}"


def _medians(points: "tuple[SweepPoint, ...]") -> str:
    """``0.119-0.122 ms``: the lowest and highest median run time of ``points``."""
    medians = sorted(p.run_s.median * 1e3 for p in points)
    return f"{medians[0]:.3f}-{medians[-1]:.3f} ms"


def render_sweep(sweep: "Sweep", console: "Console") -> None:
    """Print one row per (chunk size, plan), the plans that could not be swept, the budget and the pick."""
    console.print(sweep_table(sweep))
    for line in plans_unavailable(sweep.unavailable):
        console.print(line, style="yellow", highlight=False)
    console.print(pick_sentence(sweep), highlight=False)
    if sweep.timed_on is not None:
        console.print(sweep.timed_on.meaning(), style="dim", highlight=False)


def sweep_table(sweep: "Sweep", hidden: bool = False) -> "Table":
    """One row per (chunk size, plan): run time, memory per device, communication, fit; the pick in green.

    With ``hidden`` the run times show as ``···`` and no row is marked as the pick."""
    from rich.table import Table

    mesh = ",".join(f"{name}={size}" for name, size in sweep.mesh.items())
    where = f"mesh {mesh}" if len(sweep.mesh) > 1 or sweep.mesh.keys() - {"s"} else f"{sweep.devices} devices"
    title = (f"sweep: {sweep.function}, {where}, {sweep.per_device_batch}/device, "
             f"{sweep.repeats} timed runs per point; runs = collective runs per call")
    if sweep.processes > 1:
        title += f", {sweep.processes} processes ({sweep.collectives_transport})"
    if hidden:
        title += "; measured times hidden"
    if sweep.target is not None:
        title += f"; compiled for {sweep.target} too (never run there): fits = its memory there"
    table = Table(title=title, title_justify="left")
    columns = ["chunk", "plan", "run ms (min-max)", "mem/dev", "runs", "B/call", "fits"]
    if sweep.target is not None:
        columns.insert(4, f"mem/dev on {sweep.target}")
    profiled = any(p.measured is not None for p in sweep.points)
    if profiled:  # --profile: the profile's step per call (slowest device) and collectives (MeasuredPlan.collectives_s)
        columns += ["step (profile)", "collectives (profile)"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("plan", "fits") else "right", no_wrap=True)
    picked = () if hidden else sweep.same_program  # the pick, and the plans that are the same program
    for p in sweep.points:
        style = "bold green" if any(p is q for q in picked) else ("dim" if not sweep.fits(p) else None)
        on_target = [] if sweep.target is None else [
            "-" if p.target_footprint_bytes is None else mib(p.target_footprint_bytes)]
        table.add_row(
            str(p.chunk_size), p.plan,
            HIDDEN if hidden else f"{p.run_s.median * 1e3:.3f} ({p.run_s.min * 1e3:.2f}-{p.run_s.max * 1e3:.2f})",
            mib(p.footprint_bytes), *on_target, count_text(p.executed_collectives),
            count_text(p.bytes_per_call), "yes" if sweep.fits(p) else "no", *_measured_cells(p, profiled, hidden),
            style=style,
        )
    return table


def _measured_cells(p: "SweepPoint", profiled: bool, hidden: bool) -> list[str]:
    """The point's measured step and collectives per call (``--profile``), or nothing."""
    if not profiled:
        return []
    if hidden:
        return [HIDDEN, HIDDEN]
    if p.measured is None or p.measured.step_s is None:
        return ["-", "-"]
    return [seconds_words(p.measured.step_s), seconds_words(p.measured.collectives_s)]


def sweep_json(sweep: "Sweep") -> dict[str, Any]:
    """The ``sweep --json`` object: ``points`` and ``pick`` (null when nothing fits; its
    ``same_program``: the pick's and every point's ``[plan, chunk_size]`` that compiles to the same
    work, the pick's alone when none does); with a
    ``target``, each point's ``target_memory`` and the footprint there, which ``fits`` and
    ``smallest_footprint`` read."""
    pick = sweep.pick
    return {
        "function": sweep.function,
        "devices": sweep.devices,
        "mesh": dict(sweep.mesh),
        "per_device_batch": sweep.per_device_batch,
        "repeats": sweep.repeats,
        "processes": sweep.processes,
        "collectives_transport": sweep.collectives_transport,
        "memory_budget_bytes": sweep.memory_budget_bytes,
        "target": sweep.target,
        "points": [_point_json(sweep, p) for p in sweep.points],
        "unavailable": dict(sweep.unavailable),
        "pick": None if pick is None else {"plan": pick.plan, "chunk_size": pick.chunk_size,
                                           "same_program": [[p.plan, p.chunk_size] for p in sweep.same_program],
                                           "same_collectives": [
                                               {"plan": p.plan, "chunk_size": p.chunk_size,
                                                "differences": {name: [mine, theirs] for name, mine, theirs in differences}}
                                               for p, differences in sweep.same_collectives]},
        "smallest_footprint": {"plan": sweep.smallest_footprint.plan,
                               "chunk_size": sweep.smallest_footprint.chunk_size,
                               "footprint_bytes": sweep.budgeted_bytes(sweep.smallest_footprint)},
    }


def _point_json(sweep: "Sweep", p: "SweepPoint") -> dict[str, Any]:
    return {
        "plan": p.plan,
        "chunk_size": p.chunk_size,
        "chunks_per_device": p.chunks_per_device,
        "memory": p.memory,
        "footprint_bytes": p.footprint_bytes,
        "target_memory": p.target_memory,
        "target_footprint_bytes": p.target_footprint_bytes,
        "fits": sweep.fits(p),
        "run_s": {"median": p.run_s.median, "min": p.run_s.min, "max": p.run_s.max, "samples": len(p.run_s.samples)},
        "executed_collectives": p.executed_collectives,
        "bytes_per_call": p.bytes_per_call,
        "max_abs_err": p.max_abs_err,
        "measured": None if p.measured is None else p.measured.to_json(),
    }
