"""Renderings of an :class:`~shardscope.analysis.Analysis` for the terminal and for scripts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from shardscope.counts import count_text

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.analysis import Analysis, PlanResult


def to_json(analysis: "Analysis") -> dict[str, Any]:
    """The ``report --json`` object. Keys are a contract: extend, never rename.

    Non-finite numbers (a NaN gradient error) become ``null``: bare ``NaN`` is not JSON.
    """
    return _finite(_json(analysis))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _json(analysis: "Analysis") -> dict[str, Any]:
    s = analysis.shapes
    return {
        "function": analysis.function,
        "file": str(analysis.settings.path),
        "backend": analysis.backend,
        "devices": s.devices,
        "axis": analysis.settings.axis,
        "batch": s.batch,
        "per_device_batch": s.per_device_batch,
        "chunk_size": s.chunk_size,
        "chunks_per_device": s.chunks_per_device,
        "repeats": analysis.settings.repeats,
        "speedup": analysis.speedup,
        "variants": {name: _plan_json(plan) for name, plan in analysis.plans.items()},
        "warnings": analysis.warnings,
        "gradient_checks": [
            {"baseline": c.baseline, "candidate": c.candidate, "max_abs_diff": c.max_abs_diff,
             "tolerance": c.tolerance, "dtype": c.dtype, "agree": c.agree}
            for c in analysis.gradient_checks
        ],
        "reference": {
            "compile_s": analysis.reference.compile_s,
            "run_s": _times_json(analysis.reference.run_s),
            "memory": analysis.reference.memory,
        },
    }


def _plan_json(plan: "PlanResult") -> dict[str, Any]:
    return {
        "collectives": [
            {
                "primitive": c.primitive,
                "axes": list(c.axes),
                "loop_trip_counts": list(c.loop_trip_counts),
                "executions": c.executions,
                "bytes": c.bytes_per_execution,
                "bytes_per_call": c.bytes_per_call,
                "equation": c.equation_id,
                "in_conditional": c.in_conditional,
                "value": c.value,
                "source": c.source,
                "verdict": c.verdict_kind,
                "fix": None if c.verdict is None else c.verdict.fix,
            }
            for c in plan.collectives
        ],
        "collectives_in_loops": plan.collectives_in_loops,
        "executed_collectives": plan.executed_collectives,
        "bytes_per_call": plan.bytes_per_call,
        "per_call_is_upper_bound": plan.per_call_is_upper_bound,
        "equations": plan.program.equation_count,
        "hlo": None
        if plan.hlo is None
        else {
            "backend": plan.hlo.backend,
            "collectives": plan.hlo.count,
            "collectives_in_loops": plan.hlo.in_loops,
            "instructions": [
                {"opcode": c.opcode, "shape": c.shape, "in_loop": c.in_loop, "while_trip_counts": list(c.while_trip_counts)}
                for c in plan.hlo.collectives
            ],
        },
        "trace_s": plan.trace_s,
        "compile_s": plan.compile_s,
        "run_s": _times_json(plan.run_s),
        "memory": plan.memory,
        "max_abs_err": plan.max_abs_err,
    }


def _times_json(times: Any) -> dict[str, float] | None:
    if times is None:
        return None
    return {"median": times.median, "min": times.min, "max": times.max, "samples": len(times.samples)}


def render(analysis: "Analysis", console: "Console") -> None:
    """Print the human report: headline, the plans side by side, every collective, a verdict."""
    from rich.table import Table

    for i, line in enumerate(analysis.headline()):
        console.print(line, style="bold" if i == 0 else None, highlight=False)
    naive, deferred = analysis.plans["naive"], analysis.plans["deferred"]

    table = Table(title="plans", title_justify="left")
    table.add_column("")
    table.add_column("naive", justify="right")
    table.add_column("deferred", justify="right")
    for label, fn in _ROWS:
        table.add_row(label, fn(naive), fn(deferred))
    ref = analysis.reference
    console.print(table)

    coll = Table(title="collectives (bytes per device)", title_justify="left", pad_edge=False)
    for column in ("plan", "primitive", "axes", "value", "loops", "runs/call", "B/call"):
        coll.add_column(column, justify="right" if column[0] in "rB" else "left", no_wrap=True)
    for plan in (naive, deferred):
        for c in plan.collectives:
            loops = " x ".join("?" if t is None else str(t) for t in c.loop_trip_counts) or "-"
            style = "bold red" if c.in_loop else None
            coll.add_row(plan.name, c.primitive, ",".join(c.axes), c.value, loops, count_text(c.executions),
                         count_text(c.bytes_per_call), style=style)
    console.print(coll)
    if ref.run_s is not None:
        console.print(f"reference (unchunked VJP): compile {ref.compile_s:.3f} s, run median {_ms(ref.run_s.median)}")
    console.print(verdict(analysis), highlight=False)
    for warning in analysis.warnings:
        console.print(f"warning: {warning}", style="bold yellow", highlight=False)


def verdict(analysis: "Analysis") -> str:
    """One sentence on what the deferred plan saves."""
    naive, deferred = analysis.plans["naive"], analysis.plans["deferred"]
    text = (
        f"naive: {_upto(naive, count_text(naive.executed_collectives))} collective runs/call "
        f"({naive.collectives_in_loops} inside loops); "
        f"deferred: {_upto(deferred, count_text(deferred.executed_collectives))} "
        f"({deferred.collectives_in_loops} inside loops)"
    )
    if analysis.speedup is not None:
        text += f"; deferred is {analysis.speedup:.2f}x the speed of naive (median run time)"
    return text + "."


def _upto(plan: "PlanResult", text: str) -> str:
    """``≤ 8`` when collectives sit in ``cond`` branches: only one branch runs per call."""
    return f"≤ {text}" if plan.per_call_is_upper_bound else text


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _hlo(plan: "PlanResult") -> str:
    return "-" if plan.hlo is None else f"{plan.hlo.count} ({plan.hlo.in_loops} in while)"


def _mem(plan: "PlanResult") -> str:
    if not plan.memory:
        return "-"
    return f"{plan.memory.get('temp_size_in_bytes', 0):,} B"


_ROWS = (
    ("collectives (equations)", lambda p: str(len(p.collectives))),
    ("  inside loops", lambda p: str(p.collectives_in_loops)),
    ("  runs per call", lambda p: _upto(p, count_text(p.executed_collectives))),
    ("  bytes per call", lambda p: _upto(p, count_text(p.bytes_per_call))),
    ("HLO collectives", _hlo),
    ("equations", lambda p: f"{p.program.equation_count:,}"),
    ("compile", lambda p: "-" if p.compile_s is None else f"{p.compile_s:.3f} s"),
    ("run median", lambda p: _ms(p.run_s and p.run_s.median)),
    ("run min / max", lambda p: "-" if p.run_s is None else f"{_ms(p.run_s.min)} / {_ms(p.run_s.max)}"),
    ("temp memory", _mem),
    ("max_abs_err vs reference", lambda p: "-" if p.max_abs_err is None else f"{p.max_abs_err:.2e}"),
)
