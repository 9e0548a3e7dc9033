"""Plain-text renderings of an :class:`~shardscope.pipeline.analysis.Analysis` shared by every output:
the headline, one-line plan summaries and the diff export.

Renderings live here, with the renderers, not on the analysis value; the report, the diff
export and the app all read the same words from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import Analysis, PlanResult
    from shardscope.pipeline.comparison import Comparison


def mesh_text(analysis: "Analysis") -> str:
    """``mesh s=2 (cpu)`` or ``mesh data=4,model=2 (cpu), batch over data``.

    For a program file, each program's own mesh: ``mesh batch=8 (cpu, 8 devices started)``.
    """
    if analysis.is_programs:
        meshes = {plan.mesh or "no shard_map" for plan in analysis.plans.values()}
        started = f"{analysis.backend}, {analysis.settings.devices} devices started"
        if len(meshes) == 1:
            return f"mesh {meshes.pop()} ({started})"
        return "meshes " + ", ".join(f"{n}: {p.mesh or 'no shard_map'}" for n, p in analysis.plans.items()) + f" ({started})"
    mesh = analysis.settings.mesh
    text = f"mesh {mesh.text()} ({analysis.backend})"
    if len(mesh.axes) > 1:
        text += f", batch over {','.join(analysis.shapes.batch_axes)}"
    return text


def headline(analysis: "Analysis") -> list[str]:
    """The settings in words, as every rendering heads its output."""
    if analysis.is_programs:
        count = len(analysis.plans)
        return [
            f"shardscope: {analysis.settings.path.name}: {count} program{'s' if count > 1 else ''} "
            f"({', '.join(analysis.plans)})",
            f"{mesh_text(analysis)}; each program runs on its own example arguments: no batch, no chunks",
        ]
    s = analysis.shapes
    return [
        f"shardscope: {analysis.settings.path.name}::{analysis.function}",
        f"{mesh_text(analysis)}, batch N={s.batch}, "
        f"{s.per_device_batch}/device, chunk size {s.chunk_size} -> {s.chunks_per_device} chunks/device",
    ] + ([] if analysis.processes == 1 else [
        f"across {analysis.processes} processes (jax.distributed), collectives over {analysis.collectives_transport}"
    ])


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
    return f"{plan.executed.text()} runs/call, {where}, {plan.bytes.text('B')}/call"


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
