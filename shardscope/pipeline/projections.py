"""Every plan of an analysis projected onto an interconnect: the ring model of
:mod:`shardscope.costmodel.projection` over what each plan's compiled module runs (and over each
``--target``'s compiled plans): ``report --project``, the Timings tab.

The compiled module is what runs: XLA's combiner merges a jaxpr's psums of one loop body into one
all-reduce (demos/mlp.py: four leaves, one instruction), and the partitioner writes the
collectives of a jit program whose jaxpr has none. Only a plan that was traced and not compiled
is projected from its jaxpr. The CPU's module is a stand-in for the link's machine, whose compiler
keeps a bf16 sum in bf16 where XLA:CPU promotes it to f32: each collective is costed at its bytes
as the program wrote them (:attr:`~shardscope.engine.hlo.plan.CompiledCollective.written_bytes_per_execution`);
a ``--target``'s plans are costed at what that target's compiler runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardscope.costmodel.projection import (
    CollectiveProjection,
    PlanProjection,
    Projection,
    compiled_collectives,
    plan_projection,
    project_compiled,
    run_seconds,
)

if TYPE_CHECKING:
    from shardscope.costmodel.interconnects import Link
    from shardscope.pipeline.analysis import Analysis, PlanResult


class NoAnalysedMesh(ValueError):
    """:func:`project` without a device count of programs only traced: no mesh, no groups to read."""


def project(analysis: "Analysis", link: Link, devices: int | None = None) -> Projection:
    """Project every plan of ``analysis`` onto ``link``: the collectives its compiled module runs,
    with their runs per call and bytes per run, each on a ring of ``devices`` (one ring over every
    device) or, without a count, of its own group of the analysed mesh (a data=4 x model=2 mesh's
    all-reduce over ``data``: 4)."""
    mesh = analysed_devices(analysis)
    if mesh is None and devices is None:
        raise NoAnalysedMesh("a program file has no analysed mesh: give the device count to project onto")
    n = devices or mesh
    assert n is not None
    return Projection(link=link, devices=n, plans={name: _plan(plan, link, devices, n) for name, plan in analysis.plans.items()},
                      own_groups=devices is None)


def analysed_devices(analysis: "Analysis") -> int | None:
    """The devices of the analysed mesh: a demo's mesh, else the devices a program file's programs
    ran over, else those their compiled modules span (a program whose arguments did not fit, so
    nothing was timed); None for programs only traced."""
    if analysis.shapes is not None:
        return analysis.shapes.devices
    if analysis.timed_on is not None:
        return analysis.timed_on.devices
    modules = [plan.compiled.module for plan in analysis.plans.values()
               if plan.compiled is not None and plan.compiled.module is not None]
    return max((m.num_partitions * m.replica_count for m in modules), default=None)


def _plan(plan: "PlanResult", link: Link, devices: int | None, mesh_devices: int) -> PlanProjection:
    """One plan's compiled collectives on their rings (``devices`` each, or each one's own group
    when no count is given); a step of dispatches sums each module's runs times its calls; a plan
    only traced, its jaxpr's collectives (each over ``devices`` or the whole mesh)."""
    if plan.dispatches is not None:
        found = [(d, d.inspection.compiled) for d in plan.dispatches.dispatches]
        return plan_projection(
            plan.name,
            (c for d, compiled in found if compiled is not None
             for c in compiled_collectives(compiled.collectives, link, devices, d.calls, f"{d.name}/", mesh_devices,
                                           as_written=True)),
            any(c.in_conditional for _, compiled in found if compiled is not None for c in compiled.collectives),
        )
    if plan.compiled is not None:
        return plan_projection(plan.name, compiled_collectives(plan.compiled.collectives, link, devices,
                                                               mesh_devices=mesh_devices, as_written=True),
                               any(c.in_conditional for c in plan.compiled.collectives))
    return plan_projection(
        plan.name,
        (CollectiveProjection(c.equation_id, c.primitive, c.executions, c.bytes_per_execution,
                              *run_seconds(c.primitive, c.bytes_per_execution, devices or mesh_devices, link),
                              ring=devices or mesh_devices)
         for c in plan.collectives),
        plan.per_call_is_upper_bound,
        compiled=False,
    )


def project_targets(analysis: "Analysis", link: Link | None = None, devices: int | None = None) -> dict[str, Projection]:
    """Each ``--target``'s compiled plans projected onto ``link`` with ``devices`` in the ring
    (default: each collective's own group of the target's devices); none without a ``link``: a target's own interconnect
    is costed by its machine's model (:mod:`shardscope.engine.hlo.interconnect_times`), not a ring."""
    found: dict[str, Projection] = {}
    if link is None:
        return found
    for target in analysis.target_names:
        plans = analysis.on_target(target)
        compiled = {plan.name: on_target.compiled for plan, on_target in plans}
        found[target] = project_compiled(compiled, link, devices, plans[0][1].devices)
    return found
