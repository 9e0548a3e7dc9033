"""A layouts ranking as a rich table with its notes and pick, and as the ``layouts --json`` object."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardscope.engine.hlo.roofline import range_words, seconds_words
from shardscope.hardware.fit import gib, size_words

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from shardscope.costmodel.layout_ranking import LayoutRanking, RankedLayout

TOP_GROUPS = 2
"""How many of a candidate's costliest collective groups the table names."""


def render_layouts(ranking: "LayoutRanking", console: "Console") -> None:
    """The table, what the sweep took, the notes and the pick."""
    console.print(layouts_table(ranking))
    console.print(cost_words(ranking), style="dim", highlight=False)
    for note in ranking.notes:
        console.print(note, style="dim", highlight=False)
    console.print(ranking.why(), style="bold", highlight=False)


def layouts_table(ranking: "LayoutRanking") -> "Table":
    """One row per candidate, in rank order."""
    from rich.table import Table

    unit = ranking.unit
    table = Table(title=f"layouts: {ranking.function} on {ranking.target}", title_justify="left")
    for header, justify in (("#", "right"), ("layout", "left"), ("memory per device", "left"),
                            ("step (hidden .. exposed)", "right"), (f"{unit}/s/chip", "right"),
                            ("MFU", "right"), ("top collectives (share of step)", "left")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]  # rich's literal
    place = 0
    for row in ranking.rows:
        fits = row.outcome in ("fits", "unknown")
        place += fits
        style = "green" if row is ranking.pick else ("" if fits else "dim")
        table.add_row(str(place) if fits else "-", row.label, memory_cell(row), step_cell(row), per_chip_cell(row),
                      utilization_cell(row), collectives_cell(row), style=style)
    return table


def memory_cell(row: "RankedLayout") -> str:
    """``10.4 of 15.75 GiB``, ``does not fit: 18.2 GiB of 15.75``, ``cut: ...``, ``failed: ...``."""
    compiled, fit = row.compiled, row.compiled.fit
    if compiled.status == "failed":
        return f"failed: {compiled.reason}"
    if compiled.status == "cut":
        assert fit is not None  # a cut is made against the chip's capacity
        return f"cut: arguments {size_words(fit.needed_bytes or 0)} of {gib(fit.capacity_bytes or 0)} GiB"
    if fit is None:
        return "?"
    if compiled.status == "refused":
        needed = "?" if fit.needed_bytes is None else size_words(fit.needed_bytes)
        return f"refused by the compiler: {needed}" + (f" of {gib(fit.capacity_bytes)} GiB" if fit.capacity_bytes else "")
    needed = "?" if fit.needed_bytes is None else size_words(fit.needed_bytes)
    if fit.capacity_bytes is None:
        return needed
    said = f"{needed} of {gib(fit.capacity_bytes)} GiB"
    return said if fit.fits is not False else f"does not fit: {said}"


def step_cell(row: "RankedLayout") -> str:
    """``2.41 s .. 2.52 s`` (or ``""`` without an estimate)."""
    if row.low_s is None or row.high_s is None:
        return ""
    at_least = "≥ " if row.estimate is not None and row.estimate.lower_bound else ""
    return at_least + range_words(row.low_s, row.high_s).replace(" to ", " .. ")


def per_chip_cell(row: "RankedLayout") -> str:
    """``3,240 .. 3,410``: the throughput per chip at the slowest and fastest step."""
    found = row.per_chip()
    if found is None:
        return ""
    low, high = found
    return f"{low:,.0f}" if f"{low:,.0f}" == f"{high:,.0f}" else f"{low:,.0f} .. {high:,.0f}"


def utilization_cell(row: "RankedLayout") -> str:
    """``41% .. 44%`` (``HFU`` marks the compiled flops' utilization, rematerialization counted)."""
    found = row.utilization()
    if found is None:
        return ""
    low, high, kind = found
    text = f"{low:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%} .. {high:.0%}"
    return text if kind == "model" else f"{text} HFU"


def collectives_cell(row: "RankedLayout") -> str:
    """``all-gathers over fsdp in loops 24%, reduce-scatters over fsdp in loops 9%``."""
    parts = []
    for group in row.groups[:TOP_GROUPS]:
        share = row.share(group)
        if share is not None:
            parts.append(f"{group.words} {share:.0%}")
        elif group.bytes is not None:
            parts.append(f"{group.words} {size_words(group.bytes)}")
        else:
            parts.append(group.words)
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
