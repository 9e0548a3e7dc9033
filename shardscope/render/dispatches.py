"""Renderings of a step that is a sequence of dispatches: its calls, each module's collectives,
and the verdicts across the calls (rich, and the ``dispatches`` of ``check --json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shardscope.engine.counts import count_text
from shardscope.engine.jaxpr.model import short_source
from shardscope.render.findings import (
    collectives_run,
    collectives_table,
    compiled_json,
    note_is_flagged,
    noted,
    notes,
    render_inspection,
)
from shardscope.render.targets import render_on_target, shown_plans
from shardscope.render.theme import Themed

if TYPE_CHECKING:
    from shardscope.engine.dispatch.plan import Dispatch, DispatchFinding, DispatchPlan
    from shardscope.engine.joined.inspection import Inspection

DISPATCH_COLUMNS = ("#", "dispatch", "calls/step", "collectives", "runs/call", "runs/step", "B/step", "line")
"""The columns of the table of a step's dispatches."""


def summary(function: str, plan: "DispatchPlan") -> str:
    """``step: 11 dispatches per step (grad_fn x4, apply x1; eager: add x4, ...), 4 compiled
    collective runs per step; 1 collective runs once per call where once per step would do (3 of 4 runs)``."""
    jitted = ", ".join(d.label for d in plan.dispatches if d.jitted)
    eager = ", ".join(_merged_eager(plan))
    runs = count_text(plan.executed_collectives).replace("?", "unknown")
    head = (f"{function}: not jitted, a sequence of {plan.calls} dispatches per step ({jitted}"
            f"{'; eager: ' + eager if eager else ''}), {runs} compiled collective runs per step")
    flagged = plan.flagged
    looped = plan.flagged_in_loops
    if flagged:
        avoidable = sum(f.avoidable or 0 for f in flagged)
        total = sum(f.executions or 0 for f in flagged)
        head += (f"; {collectives_run(len(flagged))} once per call where once per step would "
                 f"do ({avoidable} of its {total} runs per step avoidable)")
    if looped:
        head += f"; {collectives_run(len(looped))} in a loop of a module without needing to"
    return head + ("." if flagged or looped else "; none runs more often than it needs to.")


def _merged_eager(plan: "DispatchPlan") -> list[str]:
    """``add x4``: the eager operations by primitive, however many modules each made."""
    calls: dict[str, int] = {}
    for d in plan.dispatches:
        if not d.jitted:
            calls[d.name] = calls.get(d.name, 0) + d.calls
    return [f"{name} x{n}" for name, n in calls.items()]


def dispatch_rows(plan: "DispatchPlan") -> list[tuple[str, ...]]:
    """The cells of the dispatch table: the jitted calls, and the eager operations that communicate."""
    shown = [d for d in plan.dispatches if d.jitted or d.collectives]
    return [
        (str(i), d.name if d.jitted else f"{d.name} (eager)", str(d.calls), str(d.collectives),
         count_text(d.executed_per_call), count_text(d.executed_per_step),
         "unknown" if d.bytes_per_step is None else f"{d.bytes_per_step:,}", _short(d.source))
        for i, d in enumerate(shown, 1)
    ]


def render_dispatches(function: str, plan: "DispatchPlan") -> Group:
    """The rich renderable of the step ``function``: the summary, the dispatch table, each
    communicating module's collectives (one call), and the verdicts across the calls with their fixes."""
    failing = bool(plan.flagged or plan.flagged_in_loops)
    parts: list[RenderableType] = [Text(summary(function, plan), style="check.failed" if failing else "check.passed")]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in DISPATCH_COLUMNS:
        table.add_column(column, justify="right" if column in ("#", "calls/step", "collectives", "runs/call",
                                                                "runs/step", "B/step") else "left", no_wrap=True)
    for row in dispatch_rows(plan):
        table.add_row(*map(Text, row))
    parts.append(table)
    for d in plan.dispatches:
        paired = d.inspection.paired
        if not paired:
            continue
        parts.append(collectives_table(paired, title=f"{d.name}: one call's collectives (x{d.calls} per step)"))
        explained = [c for c in paired if noted(c)]
        parts += [Text(line, style="bold" if note_is_flagged(c) else "") for c, line in zip(explained, notes(paired))]
    for n, finding in enumerate(plan.findings, 1):
        parts.append(Text(finding_line(n, finding), style="bold" if finding.flagged else ""))
    for d in plan.eager_with_collectives:
        parts.append(Text(f"{d.name} at {_short(d.source)} is an eager operation between the calls: it runs as its "
                          f"own module, with {d.collectives} collective(s), {d.calls} time(s) per step."))
    return Group(*parts)


def finding_line(n: int, f: "DispatchFinding") -> str:
    """``across calls #1: grad_fn x4 (step.py:26): all-reduce[data] of w, 4 runs/step: deferrable. ...``."""
    axes = "?" if f.collective.axes is None else ",".join(f.collective.axes)
    what = f" of {f.value}" if f.value else ""
    line = (f"across calls #{n}: {f.dispatch} x{f.calls} ({_short(f.source)}): {f.kind}[{axes}]{what}, "
            f"{count_text(f.executions)} runs/step: {f.verdict_kind}. {f.reason}")
    return line + (f" Fix: {f.fix}" if f.fix else "")


def dispatches_json(plan: "DispatchPlan") -> list[dict[str, Any]]:
    """``dispatches``: one object per distinct module the step dispatches, in the order of first call."""
    return [_dispatch_json(d, compiled_json(d.inspection.paired)) for d in plan.dispatches]


def _dispatch_json(d: "Dispatch", collectives: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": d.name,
        "jitted": d.jitted,
        "calls": d.calls,
        "source": d.source,
        "counts_per_call": d.counts_per_call(),
        "counts": d.counts(),
        "executed_per_call": d.executed_per_call,
        "executed_per_step": d.executed_per_step,
        "bytes_per_step": d.bytes_per_step,
        "compiled_collectives": collectives,
    }


def dispatch_findings_json(plan: "DispatchPlan") -> list[dict[str, Any]]:
    """``dispatch_findings``: each collective of a module the step calls more than once, with
    its verdict across the calls."""
    return [
        {"dispatch": f.dispatch, "calls": f.calls, "kind": f.kind, "value": f.value,
         "axes": None if f.collective.axes is None else list(f.collective.axes),
         "executions": f.executions, "avoidable": f.avoidable, "summed": f.summed, "verdict": f.verdict_kind,
         "flagged": f.flagged, "reason": f.reason, "fix": f.fix, "source": f.source}
        for f in plan.findings
    ]


def _short(source: str) -> str:
    """``step.py:26 (step)`` from a full path."""
    return short_source(source) if source else "-"


def rich_inspection(inspection: "Inspection") -> Themed:
    """An inspection's rich rendering: a step's dispatches, or the findings table (for one
    made for a target, that target's plan and verdict first, then the CPU's, each labelled),
    with the theme's named styles on any console."""
    if inspection.dispatches is not None:
        return Themed(render_dispatches(inspection.function, inspection.dispatches))
    plans = shown_plans(inspection)
    if plans:
        return Themed(render_on_target(inspection, plans))
    return render_inspection(inspection)
