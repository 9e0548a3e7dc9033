"""A demo function's plans as a :class:`Workload`: the programs shardscope generates for it.

Each plan (:mod:`shardscope.plans.registry`) is a ``shard_map`` + ``scan`` VJP of the demo's
``f`` over the settings' mesh, traced on ``(params, x, v)`` and checked against the reference,
the unchunked VJP. The baseline (naive) plan failing to trace is the model's fault; a candidate
plan that fails where the baseline traced is shardscope's plan meeting a limit of the installed
JAX, listed as unavailable with JAX's reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from shardscope import failures
from shardscope.engine.joined.inspection import Inspection, pytree_names
from shardscope.engine.pytree_paths import gradient_label
from shardscope.errors import ShardscopeError
from shardscope.pipeline.workload import PipelineProgram, Workload
from shardscope.plans import bodies, registry
from shardscope.config.settings import Settings
from shardscope.sources.demos import DemoFunction

if TYPE_CHECKING:
    from shardscope.engine.jaxpr.model import Site
    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.comparison import Comparison


@dataclass(frozen=True)
class DemoPlans:
    """The origin of an analysis of a demo's plans: chunked by shardscope, checked against the
    unchunked reference."""

    path: Path
    function: str
    description: str
    noun = "plan"
    chunked = True
    checked = "gradients"

    @property
    def name(self) -> str:
        """The demo function."""
        return self.function

    def headline(self, analysis: "Analysis") -> list[str]:
        """``shardscope: rnn.py::rnn`` and the mesh, batch and chunks."""
        s = analysis.shapes
        assert s is not None  # a demo's plans always have their sizes
        mesh = analysis.settings.mesh
        where = f"mesh {mesh.text()} ({analysis.backend})"
        if len(mesh.axes) > 1:
            where += f", batch over {','.join(s.batch_axes)}"
        lines = [
            f"shardscope: {self.path.name}::{self.function}",
            f"{where}, batch N={s.batch}, {s.per_device_batch}/device, chunk size {s.chunk_size} -> "
            f"{s.chunks_per_device} chunks/device",
        ]
        if analysis.processes > 1:
            lines.append(f"across {analysis.processes} processes (jax.distributed), "
                         f"collectives over {analysis.collectives_transport}")
        return lines

    def timing_note(self, repeats: int, backend: str) -> str:
        """The reference and how the plans were timed."""
        return (f"reference: the unchunked VJP over the whole batch. {repeats} timed runs per plan after "
                f"warm-up, interleaved; backend {backend}")

    def export_stem(self, analysis: "Analysis", comparison: "Comparison") -> str:
        """``<file>-<function>-<baseline>-vs-<candidate>-<mesh>-c<chunk>`` (a 1-D mesh as ``4dev``, else
        ``4x2dev``; the function left out when the file is named after it: ``linear-naive-vs-deferred-2dev-c16``)."""
        mesh, shapes = analysis.settings.mesh, analysis.shapes
        assert shapes is not None  # a demo's plans always have their sizes
        where = f"{mesh.devices}dev" if len(mesh.axes) == 1 else "x".join(map(str, mesh.sizes)) + "dev"
        source = analysis.settings.path.stem
        named = source if source == self.function else f"{source}-{self.function}"
        return f"{named}-{comparison.baseline}-vs-{comparison.candidate}-{where}-c{shapes.chunk_size}"


def demo_workload(demo_fn: DemoFunction, settings: Settings, path: Path,
                  plan_set: tuple[registry.Plan, ...] = registry.PLANS) -> Workload:
    """The plans of ``demo_fn`` under ``settings`` (checked and resolved: the chunk size filled in)."""
    built = registry.build_plans(demo_fn, settings, plan_set)
    settings = settings.with_(function=demo_fn.name, chunk_size=built.shapes.chunk_size)
    axes = tuple(built.shapes.batch_axes)
    params, x, v = built.args
    inputs = pytree_names(params, "params") + pytree_names(x, "x") + pytree_names(v, "v")

    def program(name: str, description: str, role: str, result: Callable[[Any], Any] | None = None) -> PipelineProgram:
        def trace_failure(exc: BaseException) -> tuple[ShardscopeError, str]:
            if isinstance(exc, SystemExit):
                error = failures.system_exit(exc, path, demo_fn.name)
                return error, error.message
            return registry.describe_trace_error(exc, axes), registry.untraceable(exc)

        return PipelineProgram(
            name=name, description=description, role=role, function=built.functions[name],
            arguments=(built.args, {}),
            input_names=lambda traced: inputs,
            # a plan returns the gradient of params: its outputs, and the sums after a loop that
            # reach them, are named as gradients, as the sums in a loop are
            output_names=lambda traced: [gradient_label(n) for n in pytree_names(traced.out_info, "params")],
            run_arguments=lambda traced, compiled: (built.args, {}),
            trace_failure=trace_failure,
            optional=role == "candidate" or role == "floor",
            result=result or (lambda output: output),
            relabel=lambda inspection: with_plan_sources(inspection, name),
        )

    plans = tuple(program(name, plan.description, plan.role, plan.gradient) for name, plan in built.plans.items())
    reference = program(registry.REFERENCE, "the unchunked VJP over the whole batch", "reference")
    return Workload(
        origin=DemoPlans(path, demo_fn.name, demo_fn.spec.description),
        settings=settings,
        programs=plans,
        reference=reference,
        shapes=built.shapes,
        unavailable=dict(built.unavailable),
    )


def with_plan_sources(inspection: Inspection, plan: str) -> Inspection:
    """``inspection`` with the plan's own collectives named as such: a collective no line of the
    user's made (the deferred plan's ``psum`` after the loop, the naive plan's ``all_gather`` of
    a sharded leaf) gets ``the deferred plan's own psum_invariant, after the chunk loop`` as its
    source, not a line of shardscope's plan bodies; so does the compiled plan's chunk loop
    (``the plan's chunk loop``)."""
    inspection = _with_plan_loops(inspection)
    if all(c.source for c in inspection.collectives):
        return inspection
    where = {site.equation.id: _placement(site) for site in inspection.program.sites()
             if site.equation.kind == "collective"}
    named = []
    for c in inspection.collectives:
        if not c.source:
            source = f"the {plan} plan's own {c.primitive}, {where[c.equation_id]}"
            c = replace(c, source=source, value=c.value or source)
        named.append(c)
    return replace(inspection, collectives=tuple(named))


PLAN_LOOP = "the plan's chunk loop"
"""What the compiled plan of a demo's plan calls the loop shardscope's plan body made."""


def _with_plan_loops(inspection: Inspection) -> Inspection:
    """The compiled loops that a line of shardscope's plan bodies made, sourced as :data:`PLAN_LOOP`."""
    compiled = inspection.compiled
    if compiled is None:
        return inspection
    made_here = f"{Path(bodies.__file__).name}:"
    renamed = {loop.name: replace(loop, source=PLAN_LOOP) for loop in compiled.loops if loop.source.startswith(made_here)}
    if not renamed:
        return inspection
    loops = tuple(renamed.get(loop.name, loop) for loop in compiled.loops)
    collectives = tuple(replace(c, loops=tuple(renamed.get(loop.name, loop) for loop in c.loops))
                        for c in compiled.collectives)
    return replace(inspection, compiled=replace(compiled, loops=loops, collectives=collectives))


def _placement(site: "Site") -> str:
    """``inside the chunk loop``, ``before the chunk loop`` or ``after the chunk loop``: where a
    plan's collective sits against the plan's loop over the chunks (the outermost loop)."""
    if site.loops:
        return "inside the chunk loop" if len(site.loops) == 1 else "inside a loop in the chunk loop"
    names = [eqn.name for eqn in site.block.equations]
    loops = [i for i, eqn in enumerate(site.block.equations) if eqn.kind == "loop"]
    if not loops:
        return "with no loop around it"
    return "before the chunk loop" if names.index(site.equation.name) < loops[0] else "after the chunk loop"
