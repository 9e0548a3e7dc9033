"""Plain-text renderings of an :class:`~shardscope.pipeline.analysis.Analysis` shared by every output:
the headline, one-line plan summaries and the diff export.

Renderings live here, with the renderers, not on the analysis value; the report, the diff
export and the app all read the same words from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from shardscope.engine.counts import runs_per_call

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import Analysis, PlanResult
    from shardscope.pipeline.comparison import Comparison


def headline(analysis: "Analysis") -> list[str]:
    """The settings in words, as every rendering heads its output (the origin says them)."""
    return analysis.origin.headline(analysis)


def structure_summary(plan: "PlanResult") -> str:
    """``20 runs/call, 3 of 3 collective equations in loops, 17,024 B/call`` (deterministic).

    Runs per call: how many times one call executes the plan's collectives; collective equations:
    how many the jaxpr holds. Totals over ``cond`` branches print as ``≤ 8``.
    """
    equations, in_loops = len(plan.collectives), plan.collectives_in_loops
    where = (
        f"{in_loops} of {equations} collective equations in loops" if in_loops
        else f"all {equations} collective equations once per call" if equations
        else "no collective equations"
    )
    return f"{runs_per_call(plan.jaxpr_runs.text())}, {where}, {plan.jaxpr_bytes.text('B')}/call"


def summary(plan: "PlanResult") -> str:
    """One line: the structure summary plus run time and gradient error when measured."""
    if plan.run_s is None:
        return structure_summary(plan)
    text = f"{structure_summary(plan)}, run median {plan.run_s.median * 1e3:.3f} ms"
    return text if plan.max_abs_err is None else f"{text}, max_abs_err {plan.max_abs_err:.2e}"


def unavailable_lines(analysis: "Analysis") -> list[str]:
    """``reduced: unavailable (reason)`` for every plan that could not be built."""
    return plans_unavailable(analysis.unavailable)


def plans_unavailable(unavailable: Mapping[str, str]) -> list[str]:
    """``reduced: unavailable (reason)`` for each plan in ``unavailable`` (the report's and the sweep's)."""
    return [f"{name}: unavailable ({reason})" for name, reason in unavailable.items()]


def diff_text(analysis: "Analysis", comparison: "Comparison | None" = None) -> str:
    """The export: settings, one summary line per plan, then the unified diff baseline -> candidate.

    Deterministic (no timings), so the same settings always export the same text.
    """
    comparison = comparison or analysis.comparison
    lines = [f"# {line}" for line in headline(analysis)]
    lines += [f"# {name}: {structure_summary(plan)}" for name, plan in analysis.plans.items()]
    lines += [f"# {line}" for line in unavailable_lines(analysis)]
    lines += list(comparison.diff)
    return "\n".join(lines) + "\n"
