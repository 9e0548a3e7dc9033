"""The projection as text: one rich table for ``report`` and one list of lines for the app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardscope.engine.counts import count_text
from shardscope.engine.hlo.promotion import compiler_of
from shardscope.costmodel.interconnects import format_bandwidth, format_seconds

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.comparison import Comparison
    from shardscope.costmodel.projection import PlanProjection, Projection


def title(projection: "Projection") -> str:
    """What was projected onto what, in one line: the compiled collectives (what XLA runs), or
    the jaxpr's where a plan was only traced."""
    link = projection.link
    counted = ("the compiled collectives" if all(p.compiled for p in projection.plans.values())
               else "the jaxpr's collectives (not compiled)")
    return (
        f"projected onto {link.name} ({format_bandwidth(link.bandwidth_Bps)} one way, "
        f"{format_seconds(link.latency_s)} per ring step) {_rings(projection)}; "
        f"communication only, {counted} of the analysed per-device program"
    )


def _rings(projection: "Projection") -> str:
    """``with 8 devices`` (one ring over every device), or each collective over its own group."""
    if projection.own_groups:
        return f"with each collective over its own group of the {projection.devices}-device mesh"
    return f"with {projection.devices} devices"


def _crossover_words(projection: "Projection") -> str:
    """``2,400,000 B``, or with rings of several sizes ``1,200,000 B on a ring of 4, 2,400,000 B
    on a ring of 8``."""
    crossovers = projection.crossovers
    if list(crossovers) == [projection.devices]:
        return f"{projection.crossover_bytes:,.0f} B"
    return ", ".join(f"{b:,.0f} B on a ring of {n}" for n, b in crossovers.items())


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


def ratio_sentence(analysis: "Analysis", projection: "Projection", comparison: "Comparison | None" = None) -> str | None:
    """The projected communication ratio of the compared plans, then what was measured here.

    ``comparison`` is the pair the user looks at (the app's ``b``/``c``; default: the
    analysis's). The measured part is that comparison's own sentence
    (:meth:`~shardscope.pipeline.comparison.Comparison.speedup_text`): one statement, from one
    computation, wherever the speedup is printed.
    """
    comparison = comparison or getattr(analysis, "comparison", None)
    if comparison is None or comparison.baseline == comparison.candidate:
        return None
    baseline, candidate = comparison.baseline, comparison.candidate
    projected = projection.ratio(baseline, candidate)
    text = (
        f"projected {baseline}/{candidate} communication time: "
        f"{'?' if projected is None else f'{projected:.2f}x'}"
    )
    measured = comparison.speedup_text()
    if measured is not None:
        text += f"{MEASURED}{measured}"
    return text


MEASURED = "; measured run time here: "
"""Where the measured part of :func:`ratio_sentence` starts (the app hides it with measured times)."""


def lines(analysis: "Analysis", projection: "Projection", comparison: "Comparison | None" = None) -> list[str]:
    """The projection as plain lines (the app's Timings tab shows these, for the comparison shown)."""
    out = [title(projection)]
    for name, plan in projection.plans.items():
        runs = f"{count_text(plan.runs_per_call)} collective run{'' if plan.runs_per_call == 1 else 's'}"
        out.append(
            f"  {name}: {seconds_text(plan)} per call ({runs}), latency {share_text(plan)}, "
            f"{dominated_text(plan)} collectives latency-dominated"
        )
    out.append(f"  payloads under {_crossover_words(projection)} are latency-dominated on this link")
    sentence = ratio_sentence(analysis, projection, comparison)
    if sentence:
        out.append("  " + sentence)
    promoted = promoted_sentence(analysis, projection)
    if promoted:
        out.append("  " + promoted)
    return out


def render_projection(analysis: "Analysis", projection: "Projection", console: "Console") -> None:
    """Print the projection table, the crossover size, the ratios and the source of the numbers."""
    from rich.table import Table

    table = Table(title=title(projection), title_justify="left")
    for column in ("plan", "comm/call", "latency share", "runs/call", "latency-dominated"):
        table.add_column(column, justify="left" if column == "plan" else "right")
    for name, plan in projection.plans.items():
        table.add_row(name, seconds_text(plan), share_text(plan),
                      count_text(plan.runs_per_call), dominated_text(plan))
    console.print(table)
    console.print(
        f"collective payloads under {_crossover_words(projection)} (n·alpha·B) are latency-dominated here.",
        highlight=False,
    )
    sentence = ratio_sentence(analysis, projection)
    if sentence:
        console.print(sentence + ".", highlight=False)
    promoted = promoted_sentence(analysis, projection)
    if promoted:
        console.print(promoted, highlight=False)
    console.print(f"source: {projection.link.source}", highlight=False, style="dim")


def promoted_sentence(analysis: "Analysis", projection: "Projection") -> str | None:
    """What bytes the projection costs where the analysed compiler promoted a sum (XLA:CPU sums
    bf16 in f32): the program's own, what the link's compiler moves; None where none was."""
    promoted = {name: plan.compiled for name, plan in analysis.plans.items()
                if plan.compiled is not None and any(c.promotion is not None for c in plan.compiled.collectives)}
    if not promoted:
        return None
    narrow, wide = next(c.promotion for plan in promoted.values() for c in plan.collectives if c.promotion is not None)
    costed = [f"{name} {count_text(projection.plans[name].bytes_per_call)} B per call"
              for name in promoted if name in projection.plans]
    return (f"{compiler_of(narrow, wide)} sums {narrow} in {wide}; these costs take each sum at the bytes the program "
            f"wrote ({', '.join(costed)}), what a compiler that keeps {narrow} (XLA:GPU's) moves, not the CPU's "
            f"{wide} bytes.")


def projection_json(projection: "Projection") -> dict[str, Any]:  # JSON values
    """The ``report --json`` ``"projection"`` object."""
    link = projection.link
    return {
        "preset": link.name,
        "devices": projection.devices,
        "own_groups": projection.own_groups,
        "bandwidth_Bps": link.bandwidth_Bps,
        "latency_s": link.latency_s,
        "source": link.source,
        "crossover_bytes": projection.crossover_bytes,
        "crossover_bytes_by_ring": {str(n): b for n, b in projection.crossovers.items()},
        "plans": {
            name: {
                "comm_s_per_call": plan.comm_s_per_call,
                "latency_share": plan.latency_share,
                "per_call_is_upper_bound": plan.is_upper_bound,
                "runs_per_call": plan.runs_per_call,
                "bytes_per_call": plan.bytes_per_call,  # as the program wrote them: not a promoted sum's wider type
                "compiled": plan.compiled,
                "latency_dominated_collectives": [c.name for c in plan.collectives if c.latency_dominated],
            }
            for name, plan in projection.plans.items()
        },
    }
