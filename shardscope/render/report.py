"""Renderings of an :class:`~shardscope.pipeline.analysis.Analysis` for the terminal and for scripts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from shardscope.engine.compiler_note import compiler_note
from shardscope.engine.counts import runs_per_call
from shardscope.measure.speedup import CONFIDENCE, HOW as SPEEDUP_HOW
from shardscope.measure.timing import GRADIENT_CHECK
from shardscope.engine.hlo.promotion import compiler_of
from shardscope.render.findings import collective_cell, compiled_json, trips_text
from shardscope.render.measured import render_measured
from shardscope.render.json_values import finite
from shardscope.render.targets import render_targets, targets_json, unavailable_targets_json
from shardscope.render.projection import projection_json as projected, render_projection
from shardscope.render.text import headline, unavailable_lines

if TYPE_CHECKING:
    from shardscope.measure.crosscheck import GradientCheck
    from shardscope.measure.timing import RunTimes
    from shardscope.engine.hlo.plan import CompiledPlan
    from rich.table import Table
    from rich.console import Console

    from shardscope.pipeline.analysis import Analysis, PlanResult
    from shardscope.costmodel.projection import Projection
    from shardscope.targets.registry import UnavailableTarget


def to_json(analysis: "Analysis", projection: "Projection | None" = None,
            target_projections: "dict[str, Projection] | None" = None,
            unavailable: "Sequence[UnavailableTarget]" = ()) -> dict[str, Any]:
    """The ``report --json`` object. Keys are a contract: extend, never rename.

    ``"targets"`` holds each ``--target``'s plans (empty without one), with ``target_projections``
    (its compiled collectives projected, by target) as its ``"projection"``. ``"projection"`` is null unless a projection (``--project``/``--link``) is given.
    ``"unavailable_targets"`` lists each ``--target`` that could not be compiled for beside others
    that were (``{"target", "error", "hint"}``, as ``check --json`` has it).
    Non-finite numbers (a NaN gradient error) become ``null``: bare ``NaN`` is not JSON.
    """
    data = _json(analysis)
    data["projection"] = None if projection is None else projection_json(analysis, projection)
    data["targets"] = targets_json(_named(analysis), target_projections or {})
    data["unavailable_targets"] = unavailable_targets_json(unavailable)
    return finite(data)


def _named(analysis: "Analysis") -> list[tuple[str, str, "PlanResult"]]:
    """``(name, title, plan)`` of every plan, for the targets' renderings."""
    return [(name, f"the {plan.title}", plan) for name, plan in analysis.plans.items()]


def projection_json(analysis: "Analysis", projection: "Projection") -> dict[str, Any]:
    """The ``"projection"`` object, with the projected and measured ratios of the compared plans
    (``measured`` is the comparison's median per-round ratio, the report's ``speedup``)."""
    data = projected(projection)
    comparison = analysis.comparison
    if comparison.baseline != comparison.candidate:
        baseline, candidate = comparison.baseline, comparison.candidate
        data["ratio"] = {
            "baseline": baseline,
            "candidate": candidate,
            "projected": projection.ratio(baseline, candidate),
            "measured": analysis.speedup,
        }
    return data


def _json(analysis: "Analysis") -> dict[str, Any]:
    s = analysis.shapes or _NO_SHAPES  # a program file: no batch, no chunks (null, not made up)
    comparison = analysis.comparison
    speedup = comparison.speedup
    return {
        "function": analysis.function,
        "file": str(analysis.settings.path),
        "backend": analysis.backend,
        "timed_on": None if analysis.timed_on is None else {
            "platform": analysis.timed_on.platform, "device_kind": analysis.timed_on.device_kind,
            "devices": analysis.timed_on.devices, "processes": analysis.timed_on.processes,
            "simulated": analysis.timed_on.simulated,
            "text": analysis.timed_on.meaning()},
        "devices": analysis.settings.devices if analysis.shapes is None else s.devices,
        "axis": analysis.settings.axis if analysis.origin.chunked else None,  # a program file: each program its own mesh
        "mesh": dict(analysis.settings.mesh.axes) if analysis.origin.chunked else None,
        "batch_axes": None if s.batch_axes is None else list(s.batch_axes),
        "batch": s.batch,
        "per_device_batch": s.per_device_batch,
        "chunk_size": s.chunk_size,
        "chunks_per_device": s.chunks_per_device,
        "repeats": analysis.settings.repeats,
        "processes": analysis.processes,
        "collectives_transport": analysis.collectives_transport,
        "speedup": analysis.speedup,
        "speedup_spread": None if speedup is None else [speedup.q1, speedup.q3],
        "speedup_interval": None if speedup is None else [speedup.low, speedup.high],
        "speedup_verdict": comparison.verdict,
        "comparison": {
            "baseline": comparison.baseline,
            "candidate": comparison.candidate,
            "speedup": None if speedup is None else {
                "median": speedup.median, "low": speedup.low, "high": speedup.high, "rounds": speedup.rounds,
                "q1": speedup.q1, "q3": speedup.q3, "confidence": CONFIDENCE,
            },
            "same_work": comparison.same_work,
            "text": comparison.speedup_text(),
        },
        "variants": {name: _plan_json(plan) for name, plan in analysis.plans.items()},
        "compiler_note": compiler_note_of(analysis),
        "unavailable": dict(analysis.unavailable),
        "warnings": analysis.warnings,
        "gradient_checks": [_check_json(c) for c in analysis.gradient_checks],
        "reference": None if analysis.reference is None else {
            "compile_s": analysis.reference.compile_s,
            "compile_from_cache": analysis.reference.compile_from_cache,
            "run_s": _times_json(analysis.reference.run_s),
            "memory": analysis.reference.memory,
        },
        "kind": f"{analysis.origin.noun}s",
        "output_checks": [_check_json(c) for c in analysis.output_checks],
    }


def _check_json(check: "GradientCheck") -> dict:
    """One cross-check: the largest difference over entries finite in both, its tolerance, and
    the entries not finite in both (``non_finite``) or in only one (``non_finite_mismatch``, words)."""
    return {"baseline": check.baseline, "candidate": check.candidate, "max_abs_diff": check.max_abs_diff,
            "tolerance": check.tolerance, "dtype": check.dtype, "agree": check.agree,
            "non_finite": check.non_finite, "non_finite_mismatch": check.non_finite_mismatch or None}


class _NoShapes:
    """What ``report --json`` says about the batch of a program file: nothing (null)."""

    batch_axes = batch = per_device_batch = chunk_size = chunks_per_device = devices = None


_NO_SHAPES = _NoShapes()


def _plan_json(plan: "PlanResult") -> dict[str, Any]:
    return {
        "description": plan.description,
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
                "auto_axes": [name for name, _ in c.auto_axes],
                "value": c.value,
                "source": c.source,
                "verdict": c.verdict_kind,
                "fix": None if c.verdict is None else c.verdict.fix,
            }
            for c in plan.collectives
        ],
        "collectives_in_loops": plan.collectives_in_loops,
        "executed_collectives": plan.jaxpr_runs_per_call,
        "bytes_per_call": plan.jaxpr_bytes_per_call,
        "per_call_is_upper_bound": plan.per_call_is_upper_bound,
        "equations": plan.program.equation_count,
        "hlo": _hlo_json(plan),
        "compiled_collectives": None if plan.compiled is None else compiled_json(plan.paired),
        "compiled_executed_collectives": None if plan.compiled is None else plan.compiled.executed_collectives,
        "compiled_bytes_per_call": None if plan.compiled_bytes is None else plan.compiled_bytes.value,
        # the same in the program's own types: less where the compiler promoted a sum (XLA:CPU's bf16 in f32)
        "compiled_bytes_per_call_as_written": None if plan.compiled_written_bytes is None else plan.compiled_written_bytes.value,
        # as check counts them: a step of dispatches' by its calls' modules (what runs), not the one jit's
        "flagged": len(plan.flagged) if plan.dispatches is None else plan.dispatches.flagged_count,
        "trace_s": plan.trace_s,
        "compile_s": plan.compile_s,
        "compile_from_cache": plan.compile_from_cache,
        "run_s": _times_json(plan.run_s),
        "memory": plan.memory,
        "mesh": plan.mesh,
        "max_abs_err": plan.max_abs_err,
        "cost_analysis": plan.cost_analysis,
        "measured": None if plan.inspection.measured is None else plan.inspection.measured.to_json(),
    }


def _hlo_json(plan: "PlanResult") -> dict[str, Any] | None:
    """The ``"hlo"`` object (its keys are a contract), read from the compiled plan: every collective
    instruction with its opcode, result shape and the trip counts of the while loops around it."""
    compiled = plan.compiled
    if compiled is None:
        return None
    return {
        "backend": compiled.backend,
        "collectives": len(compiled.collectives),
        "collectives_in_loops": len(compiled.findings),
        "instructions": [
            {"opcode": c.opcode, "shape": _result_shape(compiled, c.name), "in_loop": c.in_loop,
             "while_trip_counts": list(c.loop_trip_counts)}
            for c in compiled.collectives
        ],
    }


def _result_shape(compiled: CompiledPlan, name: str) -> str:
    """The printed result shape of the instruction ``name`` (``f32[16,16]{1,0}``)."""
    inst = compiled.module.instruction(name) if compiled.module is not None else None
    return "" if inst is None else inst.shape_text


def _times_json(times: RunTimes | None) -> dict[str, float] | None:
    if times is None:
        return None
    return {"median": times.median, "min": times.min, "max": times.max, "samples": len(times.samples)}


def render(analysis: "Analysis", console: "Console", projection: "Projection | None" = None,
           target_projections: "dict[str, Projection] | None" = None) -> None:
    """Print the human report: headline, the plans side by side, every collective, a verdict.

    With a ``projection``, a table of each plan's communication on that interconnect follows.
    """
    from rich.table import Table

    for i, line in enumerate(headline(analysis)):
        console.print(line, style="bold" if i == 0 else None, highlight=False)
    plans = list(analysis.plans.values())

    table = Table(title=f"{analysis.origin.noun}s", title_justify="left")
    table.add_column("")
    for plan in plans:
        table.add_column(plan.name, justify="right")
    for label, fn in _ROWS:
        if analysis.reference is None and label.startswith("max_abs_err"):
            continue  # a program file's programs have no reference gradient
        table.add_row(label, *(fn(plan) for plan in plans))
    ref = analysis.reference
    console.print(table)
    for line in unavailable_lines(analysis):
        console.print(line, style="dim", highlight=False)

    coll = Table(title="collectives (bytes per device)", title_justify="left", pad_edge=False)
    for column in (analysis.origin.noun, "primitive", "axes", "value", "loops", "runs/call", "B/call"):
        coll.add_column(column, justify="right" if column[0] in "rB" else "left", no_wrap=True)
    for plan in plans:
        for c in plan.collectives:
            loops = " x ".join("?" if t is None else str(t) for t in c.loop_trip_counts) or "-"
            style = "bold red" if c.in_loop else None
            coll.add_row(plan.name, c.primitive, ",".join(c.axes), c.value, loops, c.runs.text(),
                         c.bytes_count.text(), style=style)
    console.print(coll)
    if any(plan.compiled is not None for plan in plans):
        console.print(compiled_table(analysis))
        promoted = promotion_note(plans)
        if promoted:
            console.print(promoted, style="dim", highlight=False)
    for plan in plans:  # --profile, --profile-dir: each plan's measured times
        render_measured(plan.inspection, console, label=plan.name)
    if ref is not None and ref.run_s is not None:
        cached = FROM_CACHE if ref.compile_from_cache else ""
        console.print(f"reference (unchunked VJP): compile {ref.compile_s:.3f} s{cached}, run median {_ms(ref.run_s.median)}")
        console.print(GRADIENT_CHECK, style="dim", highlight=False)
    if analysis.timed_on is not None:
        console.print(analysis.timed_on.meaning(), style="dim", highlight=False)
    if analysis.comparison.speedup is not None:
        console.print(SPEEDUP_HOW, style="dim", highlight=False)
    if any(p.compile_from_cache for p in plans) or (ref is not None and ref.compile_from_cache):
        console.print(CACHE_NOTE, style="dim", highlight=False)
    if any(p.cost_analysis for p in analysis.plans.values()):
        console.print("XLA's cost_analysis() counts a loop body once and all memory traffic, not the bytes "
                      "collectives move per call: compare it with 'bytes per call'.", style="dim", highlight=False)
    console.print(verdict(analysis), highlight=False)
    if any(plan.targets for plan in plans):
        render_targets(_named(analysis), console, analysis.origin.noun, target_projections or {})
    for warning in analysis.warnings:
        console.print(f"warning: {warning}", style="bold yellow", highlight=False)
    note = compiler_note_of(analysis)
    if note:
        if any(plan.targets for plan in plans):
            note += " The tables above show what the compiler of each --target does."
        console.print(note, style="dim", highlight=False)
    if projection is not None:
        render_projection(analysis, projection, console)


def compiled_table(analysis: "Analysis") -> Table:
    """Every compiled collective instruction of every plan: what XLA runs, and what it comes from."""
    from rich.table import Table

    noun = analysis.origin.noun
    table = Table(title="compiled collectives (bytes per device)", title_justify="left", pad_edge=False)
    for column in (noun, "collective", "value", "loops", "runs/call", "B/call", "by", "from"):
        table.add_column(column, justify="right" if column[0] in "rB" else "left", no_wrap=True)
    for plan in analysis.plans.values():
        for c in plan.paired:
            if c.compiled is None:
                continue
            written = ", ".join(c.primitives) if c.equations else "-"
            if len(c.equations) > 1:
                written = f"{len(c.equations)} x {written}"
            table.add_row(plan.name, collective_cell(c), c.value, trips_text(c.loop_trip_counts), c.runs.text(),
                          c.bytes_count.text(), c.written_by, written, style="bold red" if c.in_loop else None)
    return table


def promotion_note(plans: "list[PlanResult]") -> str | None:
    """Why ``compiled bytes per call`` exceeds ``bytes per call`` where the compiler carries a sum
    in a wider type than the program wrote (XLA:CPU sums bf16 in f32), with each plan's bytes as
    written; None when no plan's compiler promoted one."""
    promoted = [plan for plan in plans if plan.compiled is not None
                and any(c.promotion is not None for c in plan.compiled.collectives)]
    if not promoted:
        return None
    assert promoted[0].compiled is not None
    narrow, wide = next(c.promotion for c in promoted[0].compiled.collectives if c.promotion is not None)
    compiler = compiler_of(narrow, wide)
    per_plan = []
    for plan in promoted:
        here, written = plan.compiled_bytes, plan.compiled_written_bytes
        if here is not None and written is not None:
            per_plan.append(f"{plan.name} {here.text()} B here, {written.text()} B as written")
    return (f"compiled bytes per call: {compiler} sums {narrow} in {wide} (its AllReducePromotion pass), so its "
            f"{narrow} sums move {wide} bytes ({'; '.join(per_plan)}); a compiler that keeps "
            f"{narrow} (XLA:GPU's) moves the bytes as written.")


def compiler_note_of(analysis: "Analysis") -> str | None:
    """The HLO note (what other compilers would do), or None when the plans were not compiled."""
    compiled = {name: plan.compiled for name, plan in analysis.plans.items() if plan.compiled is not None}
    if not compiled:
        return None
    backend = next(iter(compiled.values())).backend
    return compiler_note(backend, {name: (analysis.plans[name].collectives_in_loops, len(plan.findings))
                                   for name, plan in compiled.items()},
                         {name: len(plan.collectives) for name, plan in compiled.items()})


FROM_CACHE = " (cache)"
"""After a compile time that JAX's persistent compilation cache served: the time is its read."""

CACHE_NOTE = ("(cache): a cache served the executable, not the compiler: JAX's persistent compilation cache (an "
              "earlier run compiled the same program) or JAX's memory (this process did): the time is reading it "
              "back, not compiling; --no-cache compiles afresh.")
"""What ``(cache)`` means, under the tables that show it."""


def verdict(analysis: "Analysis") -> str:
    """One sentence: every plan's runs per call, then the comparison's speedup."""
    text = "; ".join(
        f"{plan.name}: {runs_per_call(plan.jaxpr_runs.text())} "
        f"({plan.collectives_in_loops} of {len(plan.collectives)} collective equations in loops"
        + ("" if plan.compiled_runs is None else f"; compiled: {runs_per_call(plan.compiled_runs.text())}") + ")"
        for plan in analysis.plans.values()
    )
    speedup = analysis.comparison.speedup_text()
    if speedup is not None:
        text += f"; {speedup}"
    return text + "."


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _compiled(plan: "PlanResult") -> str:
    compiled = plan.compiled
    return "-" if compiled is None else f"{len(compiled.collectives)} ({len(compiled.findings)} in while)"


def _cost_bytes(plan: "PlanResult") -> str:
    """XLA's ``bytes accessed`` (a loop body counted once), beside shardscope's bytes per call."""
    return "-" if not plan.cost_analysis else f"{plan.cost_analysis['bytes_accessed']:,.0f}"


def _mem(plan: "PlanResult", key: str) -> str:
    if not plan.memory:
        return "-"
    return f"{plan.memory.get(key, 0):,} B"


_ROWS = (
    ("collective equations", lambda p: str(len(p.collectives))),
    ("  inside loops", lambda p: str(p.collectives_in_loops)),
    ("  runs per call", lambda p: p.jaxpr_runs.text()),
    ("  bytes per call", lambda p: p.jaxpr_bytes.text()),
    ("  XLA cost_analysis bytes", _cost_bytes),
    ("compiled collectives", _compiled),
    ("  compiled runs per call", lambda p: "-" if p.compiled_runs is None else p.compiled_runs.text()),
    ("  compiled bytes per call", lambda p: "-" if p.compiled_bytes is None else p.compiled_bytes.text()),
    ("equations", lambda p: f"{p.program.equation_count:,}"),
    ("compile", lambda p: "-" if p.compile_s is None else f"{p.compile_s:.3f} s{FROM_CACHE if p.compile_from_cache else ''}"),
    ("run median", lambda p: _ms(p.run_s and p.run_s.median)),
    ("run min / max", lambda p: "-" if p.run_s is None else f"{_ms(p.run_s.min)} / {_ms(p.run_s.max)}"),
    ("memory/device: arguments", lambda p: _mem(p, "argument_size_in_bytes")),
    ("memory/device: temporaries", lambda p: _mem(p, "temp_size_in_bytes")),
    ("max_abs_err vs reference", lambda p: "-" if p.max_abs_err is None else f"{p.max_abs_err:.2e}"),
)
