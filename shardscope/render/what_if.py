"""``check --what-if``'s output: each rewrite of a program with what it fixes, whether it was
verified, what it buys (compiled runs, bytes, memory, the measured speedup, the projection) and
the change as code; as plain text lines and as the ``"what_if"`` JSON of each program."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from shardscope.costmodel.interconnects import format_bandwidth, format_seconds
from shardscope.engine.hlo.paired import paired_collectives
from shardscope.measure.speedup import speedup_text
from shardscope.pipeline.what_if import ORIGINAL, REWRITTEN, MeasuredRewrite, PlanTotals
from shardscope.render.findings import compiled_collective_json, compiled_json
from shardscope.whatif.what_if import ROUTE_NAMES

if TYPE_CHECKING:
    from shardscope.costmodel.projection import CompiledProjection
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.whatif.what_if import Rewrite

MEMORY_SHOWN = (("arguments", "argument_size_in_bytes"), ("outputs", "output_size_in_bytes"),
                ("temporaries", "temp_size_in_bytes"))
"""The compiled memory fields shown per device, with their words."""

NOT_A_PROGRAM = ("a demo's plans are not rewritten: its deferred plan is its naive plan with the sum moved out of "
                 "the loop (`shardscope report FILE` times both)")
"""Why a demo plan has no what-if."""


@dataclass(frozen=True)
class Block:
    """Lines of the what-if's text: prose (wrapped to the terminal) or ``verbatim`` code (a
    patch: never wrapped, so it applies as printed)."""

    lines: tuple[str, ...]
    verbatim: bool = False


def lines(inspection: "Inspection", measured: tuple[MeasuredRewrite, ...] | None) -> list[str]:
    """The what-if of one program as plain lines (``measured`` None: a demo plan, not rewritten)."""
    return [line for block in blocks(inspection, measured) for line in block.lines]


def blocks(inspection: "Inspection", measured: tuple[MeasuredRewrite, ...] | None) -> list[Block]:
    """The what-if of one program: a header, then each rewrite's prose and patch."""
    head = f"what if: {inspection.function}"
    if measured is None:
        return [Block((f"{head}: {NOT_A_PROGRAM}",))]
    if not measured:
        return [Block((f"{head}: no collective runs in a loop without needing to; nothing to rewrite",))]
    out = [Block((f"{head}: {len(measured)} rewrite{'s' if len(measured) > 1 else ''}",))]
    for k, m in enumerate(measured, 1):
        out += _rewrite_blocks(k, m)
    return out


def _rewrite_blocks(k: int, m: MeasuredRewrite) -> list[Block]:
    r = m.rewrite
    out = [f"  {k}. {r.summary()}"]
    fixed = ", ".join(f"{c.name}{f' of {c.value}' if c.value else ''} ({c.runs.badge()}, {c.verdict_kind})"
                      for c in r.findings) or "-"
    out.append(f"     fixes: {fixed}")
    out.append(f"     status: {r.status}" + (f" ({r.reason})" if r.reason else ""))
    out.append(f"     route: {_route_text(r)}")
    out.append(f"     outputs match: {_outputs_text(r)}")
    if m.after is not None:
        out.append(f"     compiled collective runs per call: {m.before.runs.text()} -> {m.after.runs.text()}; "
                   f"bytes per call: {m.before.bytes.text('B')} -> {m.after.bytes.text('B')}")
        out.append(f"     memory per device: {_memory_text(m.before, m.after)}")
    if r.memory_bytes:
        out.append(f"     the hoisted result stays alive through the loop: {r.memory_bytes:,} B per device")
    out.append(f"     measured here: {_measured_text(m)}")
    if m.projected is not None:
        out.append(f"     {_projected_text(m)}")
    if r.patch is None:
        return [Block(tuple(out))]
    out.append("     patch:" if r.patch.is_diff else "     snippet (apply by hand):")
    code = Block(tuple(f"       {line}".rstrip() for line in r.patch.text.rstrip("\n").splitlines()), verbatim=True)
    notes = Block(tuple(f"     note: {note}" for note in r.patch.notes))
    return [Block(tuple(out)), code] + ([notes] if notes.lines else [])


def _route_text(r: "Rewrite") -> str:
    """The route the rewrite took, and those it tried first (a jit program's Explicit-axes
    rewrite, before its step ran per device inside ``jax.shard_map``)."""
    if r.tried and not r.verified:
        return ", then ".join(ROUTE_NAMES.get(a.route, a.route) for a in r.tried) + ": neither verified (see status)"
    first = "".join(f"; tried first: {a.text()}" for a in r.tried)
    name = "shard_map, the step run per device inside jax.shard_map" if r.tried else ROUTE_NAMES.get(r.route, r.route)
    return name + first


def _outputs_text(r: "Rewrite") -> str:
    """``yes (largest difference 4.8e-07 in out[0]['W']; its tolerance 1.1e-03 = sqrt(eps) of float32
    (3.5e-04) x 3.2e+00, the largest |entry| of [0]['W'])``, ``no (...)``,
    or ``-`` when not run: the leaf that differs most relative to its own tolerance."""
    if r.outputs_match is None:
        return "-"
    answer = "yes" if r.outputs_match else "no"
    check = r.output_check
    if check is None:
        return f"{answer} (no outputs to compare)"
    if check.non_finite_mismatch:
        return f"{answer} ({check.non_finite_mismatch})"
    where = f" in out{check.leaf}" if check.leaf else ""  # entries not finite in both: the status says so
    return (f"{answer} (largest difference {check.max_abs_diff:.1e}{where}; its tolerance "
            f"{check.tolerance_text()})")


def _memory_text(before: PlanTotals, after: PlanTotals) -> str:
    if not before.memory or not after.memory:
        return "- (this backend reports no memory analysis)"
    return ", ".join(f"{words} {before.memory.get(key, 0):,} B -> {after.memory.get(key, 0):,} B"
                     for words, key in MEMORY_SHOWN)


def _measured_text(m: MeasuredRewrite) -> str:
    if m.speedup is None or m.times is None:
        return "not timed: only a verified rewrite is a saving"
    before, after = m.times[ORIGINAL], m.times[REWRITTEN]
    where = "" if m.timed_on is None else f", {m.timed_on.where()}"
    return (f"{speedup_text(m.speedup, ORIGINAL, REWRITTEN)}; median run {before.median * 1e3:.3f} ms -> "
            f"{after.median * 1e3:.3f} ms over {m.speedup.rounds} interleaved rounds{where}")


def _projected_text(m: MeasuredRewrite) -> str:
    assert m.projected is not None  # drawn only when there is one
    before, after = m.projected
    link = before.link
    where = f"{link.name} ({format_bandwidth(link.bandwidth_Bps)} one way, {format_seconds(link.latency_s)} per ring step"
    where += f", {before.devices} devices)" if before.devices else ", each collective's own group)"
    ratio = m.projected_ratio
    return (f"projected onto {where}: communication {_seconds(before)} -> {_seconds(after)} per call"
            f" ({'?' if ratio is None else f'{ratio:.2f}x'}; communication only, compute not projected)")


def _seconds(p: "CompiledProjection") -> str:
    if p.comm_s_per_call is None:
        return "?"
    return ("≤ " if p.is_upper_bound else "") + format_seconds(p.comm_s_per_call)


def to_json(inspection: "Inspection", measured: tuple[MeasuredRewrite, ...]) -> list[dict[str, Any]]:
    """``"what_if"`` of one program: one object per rewrite (see :func:`rewrite_json`)."""
    return [rewrite_json(inspection, m) for m in measured]


def rewrite_json(inspection: "Inspection", m: MeasuredRewrite) -> dict[str, Any]:
    """One rewrite: the ``findings`` it fixes (the program's compiled collectives, same fields as
    its ``compiled_collectives``), ``status`` (``verified`` or why not, with ``reason``),
    ``outputs_match``, the rewritten program's ``compiled_collectives``, runs and bytes per call and
    memory per device of both, ``speedup`` with ``speedup_spread`` and ``speedup_verdict`` as the
    report has them (null when not timed), ``projection`` (null without ``--project``) and
    ``patch`` (the unified diff, else null, with ``snippet``)."""
    r = m.rewrite
    fixed = {c.name for c in r.findings}
    program = r.program
    speedup = m.speedup
    return {
        "kind": r.kind,
        "route": r.route,
        "loop": r.loop_words,
        "values": list(r.values),
        "axes": list(r.axes),
        "summary": r.summary(),
        "findings": [compiled_collective_json(p, p.compiled) for p in inspection.paired
                     if p.compiled is not None and p.compiled.name in fixed],
        "status": r.status,
        "reason": r.reason,
        "tried": [{"route": a.route, "status": a.status, "reason": a.reason} for a in r.tried],
        "outputs_match": r.outputs_match,
        "max_abs_diff": None if r.output_check is None else r.output_check.max_abs_diff,
        "max_abs_diff_leaf": None if r.output_check is None else f"out{r.output_check.leaf}",
        "outputs_non_finite": None if r.output_check is None else r.output_check.non_finite,
        "outputs_non_finite_mismatch": None if r.output_check is None else r.output_check.non_finite_mismatch or None,
        "compiled_collectives": None if program is None else compiled_json(
            paired_collectives(program.jaxpr_collectives, program.plan)),
        "executed_collectives": _before_after(m, lambda t: t.runs.value),
        "bytes_per_call": _before_after(m, lambda t: t.bytes.value),
        "memory_per_device": {"original": m.before.memory, "rewrite": None if m.after is None else m.after.memory},
        "hoisted_bytes_per_device": r.memory_bytes,
        "speedup": None if speedup is None else speedup.median,
        "speedup_spread": None if speedup is None else [speedup.q1, speedup.q3],
        "speedup_interval": None if speedup is None else [speedup.low, speedup.high],
        "speedup_verdict": None if speedup is None else speedup.verdict,
        "run_s": None if m.times is None else {name: {"median": t.median, "min": t.min, "max": t.max}
                                                for name, t in m.times.items()},
        "projection": _projection_json(m),
        "patch": r.patch.text if r.patch is not None and r.patch.is_diff else None,
        "snippet": r.patch.text if r.patch is not None and not r.patch.is_diff else None,
    }


def _before_after(m: MeasuredRewrite, read: Callable[[PlanTotals], int | None]) -> dict[str, int | None]:
    return {"original": read(m.before), "rewrite": None if m.after is None else read(m.after)}


def _projection_json(m: MeasuredRewrite) -> dict[str, Any] | None:
    if m.projected is None:
        return None
    before, after = m.projected
    return {"preset": before.link.name, "devices": before.devices, "comm_s_per_call": {
        "original": before.comm_s_per_call, "rewrite": after.comm_s_per_call}, "ratio": m.projected_ratio,
        "per_call_is_upper_bound": before.is_upper_bound or after.is_upper_bound}
