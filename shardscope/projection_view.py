"""The projection as text: one rich table for ``report`` and one list of lines for the app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardscope.counts import count_text
from shardscope.interconnects import format_bandwidth, format_seconds

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.analysis import Analysis
    from shardscope.projection import PlanProjection, Projection


def title(projection: "Projection") -> str:
    """What was projected onto what, in one line."""
    link = projection.link
    return (
        f"projected onto {link.name} ({format_bandwidth(link.bandwidth_Bps)} one way, "
        f"{format_seconds(link.latency_s)} per ring step) with {projection.devices} devices; "
        "communication only, the analysed per-device program"
    )


def seconds_text(plan: "PlanProjection") -> str:
    """``≤ 12.5 us`` / ``12.5 us`` / ``?``."""
    if plan.comm_s_per_call is None:
        return "?"
    return ("≤ " if plan.is_upper_bound else "") + format_seconds(plan.comm_s_per_call)


def share_text(plan: "PlanProjection") -> str:
    """The latency share as a percentage, ``-`` when there is no communication."""
    return "-" if plan.latency_share is None else f"{plan.latency_share:.0%}"


def dominated_text(plan: "PlanProjection") -> str:
    """``1 of 2`` collectives whose payload is under the crossover size."""
    dominated = sum(c.latency_dominated for c in plan.collectives)
    return f"{dominated} of {len(plan.collectives)}"


def compared_pair(analysis: "Analysis") -> tuple[str, str] | None:
    """The analysis' comparison (baseline, candidate), as the measured speedup uses it."""
    comparison = getattr(analysis, "comparison", None)
    if comparison is not None:
        return comparison.baseline, comparison.candidate
    names = list(analysis.plans)
    return (names[0], names[1]) if len(names) >= 2 else None


def ratio_sentence(analysis: "Analysis", projection: "Projection") -> str | None:
    """The projected communication ratio of the first two plans next to the measured run-time one."""
    pair = compared_pair(analysis)
    if pair is None:
        return None
    baseline, candidate = pair
    projected = projection.ratio(baseline, candidate)
    text = (
        f"projected {baseline}/{candidate} communication time: "
        f"{'?' if projected is None else f'{projected:.2f}x'}"
    )
    if analysis.speedup is not None:
        text += f"; measured {baseline}/{candidate} run time here: {analysis.speedup:.2f}x"
    return text


def lines(analysis: "Analysis", projection: "Projection") -> list[str]:
    """The projection as plain lines (the app's Timings tab shows these)."""
    out = [title(projection)]
    for name, plan in projection.plans.items():
        runs = count_text(analysis.plans[name].executed_collectives)
        out.append(
            f"  {name}: {seconds_text(plan)} per call ({runs} collective runs), latency {share_text(plan)}, "
            f"{dominated_text(plan)} collectives latency-dominated"
        )
    out.append(f"  payloads under {projection.crossover_bytes:,.0f} B are latency-dominated on this link")
    sentence = ratio_sentence(analysis, projection)
    if sentence:
        out.append("  " + sentence)
    return out


def render_projection(analysis: "Analysis", projection: "Projection", console: "Console") -> None:
    """Print the projection table, the crossover size, the ratios and the source of the numbers."""
    from rich.table import Table

    table = Table(title=title(projection), title_justify="left")
    for column in ("plan", "comm/call", "latency share", "runs/call", "latency-dominated"):
        table.add_column(column, justify="left" if column == "plan" else "right")
    for name, plan in projection.plans.items():
        table.add_row(name, seconds_text(plan), share_text(plan),
                      count_text(analysis.plans[name].executed_collectives), dominated_text(plan))
    console.print(table)
    console.print(
        f"collective payloads under {projection.crossover_bytes:,.0f} B (n·alpha·B) are latency-dominated here.",
        highlight=False,
    )
    sentence = ratio_sentence(analysis, projection)
    if sentence:
        console.print(sentence + ".", highlight=False)
    console.print(f"source: {projection.link.source}", highlight=False, style="dim")
