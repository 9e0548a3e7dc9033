"""The app's one-line summaries of a plan and of an analysis, in the team's words.

"runs per call" (``runs/call``) is how many times one call executes a collective;
"collective equations" is how many collectives the jaxpr holds. Colours say what a number
means: red when collectives run inside a loop, green when each runs once per call.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from shardscope.counts import count_text

IN_LOOP = "bold red"
ONCE = "bold green"
HIDDEN_SPEEDUP = "deferred vs naive: ···"
"""What the speedup shows while measurements are hidden (screenshots, snapshots)."""


def bounded(plan: Any, text: str) -> str:
    """``≤ 8`` when the plan's per-call totals are upper bounds (collectives in ``cond`` branches)."""
    return f"≤ {text}" if plan.per_call_is_upper_bound else text


def runs_per_call(plan: Any) -> str:
    """``20`` (or ``≤ 8``, or ``?``): the collective runs of one call of ``plan``."""
    return bounded(plan, count_text(plan.executed_collectives))


def plan_line(plan: Any) -> Text:
    """``20 runs/call, 3 of 3 collective equations in loops, 17,024 B/call``, coloured by meaning."""
    in_loops = plan.collectives_in_loops
    style = IN_LOOP if in_loops else ONCE
    equations = len(plan.collectives)
    where = f"{in_loops} of {equations} collective equations in loops" if in_loops else (
        f"all {equations} collective equations once per call" if equations else "no collective equations")
    text = Text.assemble((f"{runs_per_call(plan)} runs/call", style), ", ", (where, style))
    text.append(f", {bounded(plan, count_text(plan.bytes_per_call))} B/call")
    return text


def hottest(plan: Any) -> Any:
    """The collective that runs most often per call (unknown counts first: they may be the most)."""
    if not plan.collectives:
        return None
    return max(plan.collectives, key=lambda c: float("inf") if c.executions is None else c.executions)


def speedup_text(analysis: Any, hidden: bool = False) -> Text:
    """``deferred is 2.22x faster than naive (median run time)``; empty when not measured."""
    speedup = analysis.speedup
    if speedup is None:
        return Text()
    if hidden:
        return Text(HIDDEN_SPEEDUP)
    if speedup >= 1:
        return Text(f"deferred is {speedup:.2f}x faster than naive (median run time)")
    return Text(f"deferred is {1 / speedup:.2f}x slower than naive (median run time)")


def done_text(analysis: Any, hidden: bool = False) -> Text:
    """The status line after a run: each plan's runs per call, then the speedup."""
    text = Text("done: ")
    for k, (name, plan) in enumerate(analysis.plans.items()):
        if k:
            text.append(", ")
        text.append(f"{name} {runs_per_call(plan)} runs/call", IN_LOOP if plan.collectives_in_loops else ONCE)
    speedup = speedup_text(analysis, hidden)
    if speedup:
        text.append("; ")
        text.append_text(speedup)
    if analysis.warnings:
        text.append("; warning: the plans' gradients differ (see Timings)", "bold yellow")
    return text
