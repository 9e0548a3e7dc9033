"""A layouts ranking as a rich table with its notes and pick, and as the ``layouts --json`` object."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardscope.engine.hlo.roofline import range_words, seconds_words
from shardscope.hardware.fit import gib, size_words

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.table import Table

    from shardscope.engine.hlo.plan import CompiledCollective

    from shardscope.pipeline.layout_ranking import LayoutRanking, RankedLayout

TOP_GROUPS = 2
"""How many of a candidate's costliest collective groups the table names."""


def render_layouts(ranking: "LayoutRanking", console: "Console") -> None:
    """The table, why the candidates without numbers have none, what the sweep took, the notes
    and the pick."""
    console.print(layouts_table(ranking))
    for line in reasons(ranking):
        console.print(line, style="yellow", highlight=False)
    console.print(cost_words(ranking), style="dim", highlight=False)
    for note in ranking.notes:
        console.print(note, style="dim", highlight=False)
    console.print(ranking.why(), style="bold", highlight=False)


def reasons(ranking: "LayoutRanking") -> list[str]:
    """``failed (tensor=8 x 2 options): IndivisibleError: ...``: each reason once, with the
    candidates it is the reason of."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for row in ranking.rows:
        if row.compiled.reason and row.outcome in ("failed", "cut", "refused"):
            grouped.setdefault((row.outcome, row.compiled.reason), []).append(row.label)
    return [f"{outcome} ({'; '.join(labels)}): {reason}" for (outcome, reason), labels in grouped.items()]


def layouts_table(ranking: "LayoutRanking") -> "Table":
    """One row per candidate, in rank order: its mesh, each option's value, then its numbers."""
    from rich.table import Table

    options = [name for name, _ in ranking.rows[0].compiled.candidate.options] if ranking.rows else []
    capacity = next((row.compiled.fit.capacity_bytes for row in ranking.rows
                     if row.compiled.fit is not None and row.compiled.fit.capacity_bytes), None)
    title = f"layouts: {ranking.function} on {ranking.target}"
    if capacity:
        title += f"; memory per device of {gib(capacity)} GiB"
    if ranking.estimated:
        title += "; step from collectives hidden to exposed; shares of the exposed step"
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("mesh")
    for name in options:
        table.add_column(name, justify="right")
    for header in ("memory", "step", f"{ranking.unit}/s/chip", "MFU"):
        table.add_column(header, justify="right")
    table.add_column("top collectives")
    place = 0
    for row in ranking.rows:
        fits = row.outcome in ("fits", "unknown")
        place += fits
        style = "green" if row is ranking.pick else ("" if fits else "dim")
        values = [str(value) for _, value in row.compiled.candidate.options]
        table.add_row(str(place) if fits else "-", row.compiled.candidate.mesh_words, *values, memory_cell(row),
                      step_cell(row), per_chip_cell(row), utilization_cell(row), collectives_cell(row), style=style)
    return table


def memory_cell(row: "RankedLayout") -> str:
    """``10.4 GiB``, ``18.2 GiB: does not fit``, ``cut``, ``refused``, ``failed``."""
    compiled, fit = row.compiled, row.compiled.fit
    if compiled.status in ("failed", "cut", "refused"):
        needed = "" if fit is None or fit.needed_bytes is None else f"{size_words(fit.needed_bytes)}: "
        return f"{needed}{compiled.status}"
    if fit is None or fit.needed_bytes is None:
        return "?"
    return size_words(fit.needed_bytes) + (": does not fit" if fit.fits is False else "")


def step_cell(row: "RankedLayout") -> str:
    """``2.41 .. 2.52 s`` (or ``""`` without an estimate; ``≥`` before a lower bound)."""
    if row.low_s is None or row.high_s is None:
        return ""
    at_least = "≥ " if row.estimate is not None and row.estimate.lower_bound else ""
    return at_least + compact_range(seconds_words(row.low_s), seconds_words(row.high_s))


def compact_range(low: str, high: str) -> str:
    """``188 .. 318 us`` from ``188 us`` and ``318 us`` (one unit written once), ``~2.4 s`` when equal."""
    if low == high:
        return f"~{low}"
    low_number, _, low_unit = low.partition(" ")
    high_number, _, high_unit = high.partition(" ")
    return f"{low_number} .. {high}" if low_unit == high_unit else f"{low} .. {high}"


def per_chip_cell(row: "RankedLayout") -> str:
    """``3.24k .. 3.41k``: the throughput per chip at the slowest and fastest step."""
    found = row.per_chip()
    if found is None:
        return ""
    low, high = (_short(value) for value in found)
    return low if low == high else f"{low} .. {high}"


def _short(value: float) -> str:
    """``3.24k``, ``201k``, ``1.2M``, ``850``: three figures at most."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def utilization_cell(row: "RankedLayout") -> str:
    """``41% .. 44%`` (``HFU`` marks the compiled flops' utilization, rematerialization counted)."""
    found = row.utilization()
    if found is None:
        return ""
    low, high, kind = found
    low_text, high_text = _percent(low), _percent(high)
    text = low_text if low_text == high_text else f"{low_text} .. {high_text}"
    return text if kind == "model" else f"{text} HFU"


def _percent(share: float) -> str:
    """``44%``, ``0.4%``: whole percents from 10% up, one decimal below."""
    return f"{share:.0%}" if share >= 0.1 else f"{share:.1%}"


def collectives_cell(row: "RankedLayout") -> str:
    """``all-gather fsdp 24%, reduce-scatter fsdp 9%`` (the bytes per step without times)."""
    parts = []
    for group in row.groups[:TOP_GROUPS]:
        name = f"{group.kind} {' x '.join(group.axes)}".strip()
        share = row.share(group)
        if share is not None:
            parts.append(f"{name} {_percent(share)}")
        elif group.bytes is not None:
            parts.append(f"{name} {size_words(group.bytes)}")
        else:
            parts.append(name)
    return ", ".join(parts)


def cost_words(ranking: "LayoutRanking") -> str:
    """``12 of 45 candidates compiled in 3 min 20 s on 2 worker processes (their compiles: 410 s
    of CPU, 380 s of wall in all); 30 cut before compiling, 3 failed``."""
    counts = ranking.counts()
    done = len(ranking.rows)
    head = f"{done} of {ranking.total} candidates" if ranking.interrupted else f"{done} candidates"
    cost = ranking.cost
    if cost is not None:
        workers = f"{cost.workers} worker process{'es' if cost.workers != 1 else ''}" if cost.workers > 1 \
            else "this process"
        head += (f" in {seconds_words(cost.wall_s)} on {workers} (their builds, traces and compiles: "
                 f"{seconds_words(cost.compile_cpu_s)} of CPU, {seconds_words(cost.compile_s)} of wall in all)")
    tail = [f"{counts[key]} {words}" for key, words in (("cut", "cut before compiling: their arguments alone do "
                                                         "not fit"), ("refused", "refused by the compiler for memory"),
                                                        ("does not fit", "compiled but do not fit"),
                                                        ("failed", "failed")) if counts.get(key)]
    interrupted = "; interrupted: the rows done are shown" if ranking.interrupted else ""
    return head + ("; " + ", ".join(tail) if tail else "") + interrupted


def layouts_json(ranking: "LayoutRanking") -> dict[str, object]:
    """The ``layouts --json`` object: every candidate, ranked, with the pick and why."""
    pick = ranking.pick
    return {
        "function": ranking.function, "target": ranking.target, "unit": ranking.unit, "candidates": ranking.total,
        "interrupted": ranking.interrupted, "pick": None if pick is None else pick.compiled.candidate.to_json(),
        "why": ranking.why(), "notes": list(ranking.notes), "counts": ranking.counts(),
        "cost": None if ranking.cost is None else ranking.cost.to_json(),
        "rows": [_row_json(row, rank) for rank, row in enumerate(ranking.rows, 1)],
    }


def _row_json(row: "RankedLayout", rank: int) -> dict[str, object]:
    compiled = row.compiled
    per_chip = row.per_chip()
    utilization = row.utilization()
    return {
        "rank": rank, "candidate": compiled.candidate.to_json(), "outcome": row.outcome,
        "reason": compiled.reason or None,
        "fit": None if compiled.fit is None else compiled.fit.to_json(), "argument_bytes": compiled.argument_bytes,
        "step": None if row.estimate is None else {"low_s": row.low_s, "high_s": row.high_s,
                                                    "estimate": row.estimate.to_json()},
        "per_step": compiled.per_step, "per_chip_per_s": None if per_chip is None else list(per_chip),
        "utilization": None if utilization is None else {"low": utilization[0], "high": utilization[1],
                                                          "flops": utilization[2]},
        "communicated_bytes": row.communicated_bytes,
        "collectives": [group.to_json() | {"share_of_step": row.share(group)} for group in row.groups],
        "compile_s": compiled.compile_s, "compile_cpu_s": compiled.compile_cpu_s,
    }


def step_words(row: "RankedLayout") -> str:
    """``2.41 s to 2.52 s per step`` for prose."""
    if row.low_s is None or row.high_s is None:
        return "no estimate"
    return f"{range_words(row.low_s, row.high_s)} per step ({seconds_words(row.collectives_s or 0.0)} of collectives)"


def candidate_plan(row: "RankedLayout", target: str) -> "Group":
    """One candidate's compiled plan: its memory, step estimate, and each compiled collective with
    its loops, runs and bytes per step and its time on the target's interconnect (costliest first)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    compiled = row.compiled
    parts: list[object] = [Text(f"{row.label} on {target}: {row.outcome}", style="bold")]
    if compiled.reason:
        parts.append(Text(compiled.reason, style="yellow"))
    if compiled.fit is not None:
        parts.append(Text(f"memory: {compiled.fit.line()}"))
    if row.estimate is not None:
        parts.append(Text(row.estimate.line()))
    plan = compiled.plan
    if plan is not None:
        table = Table(title=f"{len(plan.collectives)} compiled collectives", title_justify="left")
        for header in ("collective", "kind", "axes", "loops", "runs/step", "bytes/run", "time/step"):
            table.add_column(header, justify="right" if header in ("runs/step", "bytes/run", "time/step") else "left")
        for c, seconds in row.timed:
            loops = " > ".join(f"{loop.name} x{'?' if loop.trip_count is None else loop.trip_count}" for loop in c.loops)
            table.add_row(c.name, c.kind, " x ".join(c.axes or ()) or "-", loops or "-",
                          "?" if c.executions is None else f"{c.executions:,}", size_words(c.bytes_per_execution),
                          "" if seconds is None else seconds_words(seconds))
        parts.append(table)
    return Group(*parts)  # type: ignore[arg-type]  # rich's renderables

