"""The app's colours for what a count means, in the team's words, and the status line's summary of a run.

"runs per call" (``runs/call``) is how many times one call executes a collective;
"collective equations" is how many collectives the jaxpr holds. Red when collectives run
inside a loop (they run once per chunk), green when each runs once per call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from shardscope.engine.counts import runs_per_call

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import Analysis, PlanResult
    from shardscope.pipeline.comparison import Comparison

IN_LOOP = "bold red"
ONCE = "bold green"


def loop_style(in_loop: object) -> str:
    """:data:`IN_LOOP` when ``in_loop`` is true (a count of collectives in loops, or a flag), else :data:`ONCE`."""
    return IN_LOOP if in_loop else ONCE


def plan_line(plan: PlanResult) -> Text:
    """``20 runs/call, 3 of 3 collective equations in loops, 17,024 B/call``, coloured by meaning."""
    in_loops = plan.collectives_in_loops
    style = loop_style(in_loops)
    equations = len(plan.collectives)
    where = f"{in_loops} of {equations} collective equations in loops" if in_loops else (
        f"all {equations} collective equations once per call" if equations else "no collective equations")
    text = Text.assemble((runs_per_call(plan.jaxpr_runs.text()), style), ", ", (where, style))
    text.append(f", {plan.jaxpr_bytes.text('B')}/call")
    return text


def done_text(analysis: Analysis, comparison: Comparison | None, hide_measurements: bool) -> Text:
    """``done: compiled runs/call: naive 18, deferred 1; deferred is 2.22x faster than
    naive (...)``: each plan's compiled collectives' runs per call (what XLA runs: a combined
    all-reduce once, the partitioner's collectives too), red when collectives run in a loop, green
    when once per call, then the speedup of ``comparison`` (``···x`` with ``hide_measurements``)
    and any warning. Traced-only results count the jaxpr's collective equations and say so by
    leaving out "compiled": the plan headers' jaxpr counts may differ from the compiled ones."""
    plans = list(analysis.plans.items())
    compiled = all(plan.compiled is not None for _, plan in plans)
    targets = analysis.target_names if compiled else []
    if targets:  # the user picked a target: its plan leads, the CPU's follows
        text = _target_runs(analysis, targets[0])
        text.append(" (on the CPU: ")
    else:
        text = Text("done: compiled runs/call: " if compiled else "done: collective runs/call: ")
    for k, (name, plan) in enumerate(plans):
        if k:
            text.append(", ")
        if compiled:  # what runs: a jit with shardings has no collective in its jaxpr
            assert plan.compiled is not None and plan.compiled_runs is not None  # ``compiled``: every plan was
            text.append(f"{name} {plan.compiled_runs.text()}", IN_LOOP if plan.compiled.findings else ONCE)
        else:
            text.append(f"{name} {plan.jaxpr_runs.text()}", IN_LOOP if plan.collectives_in_loops else ONCE)
    if targets:
        text.append(")")
    timed = SIMULATED if targets else ""  # a timing beside a target's plan is not that target's
    if comparison is not None and comparison.speedup is not None:
        if hide_measurements:
            text.append(f"; {timed}{comparison.candidate} vs {comparison.baseline}: ···x")
        else:
            text.append(f"; {timed}{comparison.speedup_text()}")
    if analysis.not_timed is not None:
        text.append("; not run or timed: the example arguments do not fit in memory here (see Timings)", "bold yellow")
    if analysis.warnings:
        what = ("a gradient is not finite" if analysis.has_non_finite_gradient
                else f"the {analysis.origin.noun}s' {analysis.origin.checked} differ")
        text.append(f"; warning: {what} (see Timings)", "bold yellow")
    said = what_if_summary(analysis)
    if said:
        text.append(f"; {said}", "bold yellow")
    return text


SIMULATED = "timed on simulated CPU devices here: "
"""What the status line says before a speedup when a target was picked: nothing ran on it."""


def _target_runs(analysis: Analysis, target: str) -> Text:
    """``done: compiled runs/call on gpu:h100:8: naive 1, deferred 1``: each plan's runs per
    call in the target compiler's plan, red where it keeps collectives in loops."""
    text = Text(f"done: compiled runs/call on {target}: ")
    for k, (plan, on) in enumerate(analysis.on_target(target)):
        text.append(", " if k else "")
        runs = on.compiled.executed_collectives
        text.append(f"{plan.name} {'?' if runs is None else f'{runs:,}'}", IN_LOOP if on.compiled.findings else ONCE)
    return text


def what_if_summary(analysis: Analysis) -> str | None:
    """What the what-if (``w``) left out, in a few words; None when it is off, or every rewrite shows.

    A rewrite that was refused or failed a check is no program to compare, so without this
    line a what-if with none verified would look like no what-if at all.
    """
    if not analysis.settings.what_if or analysis.origin.chunked:
        return None
    shown = analysis.what_if_shown
    left = len(analysis.what_if_notes)
    if not shown and not left:
        return "what-if: no collective runs in a loop without needing to; nothing to rewrite"
    if not left:
        return None
    rewrites = f"{left} rewrite{'s' if left > 1 else ''}"
    if not shown:
        return f"what-if: no rewrite verified, {rewrites} left out (see Timings)"
    return f"what-if: {rewrites} left out (see Timings)"
