"""Every plan of an analysis projected onto an interconnect: the ring model of
:mod:`shardscope.costmodel.projection` over an ``Analysis``'s plans (as traced) and over each
``--target``'s compiled plans (``report --project``, the Timings tab)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardscope.costmodel.projection import CollectiveProjection, PlanProjection, Projection, project_compiled, run_seconds

if TYPE_CHECKING:
    from shardscope.costmodel.interconnects import Link
    from shardscope.engine.jaxpr.model import Equation
    from shardscope.pipeline.analysis import Analysis


def project(analysis: "Analysis", link: Link, devices: int | None = None) -> Projection:
    """Project every plan of ``analysis`` onto ``link`` (``devices`` default: the analysed mesh)."""
    from shardscope.engine.jaxpr.dataflow import (  # numpy (about 0.13 s): not on `import shardscope.cli`'s path
        payload_bytes,
        per_call,
    )

    n = devices or (analysis.shapes.devices if analysis.shapes is not None else None)
    if n is None:
        raise ValueError("a program file has no analysed mesh: give the device count to project onto")
    plans = {}
    for name, plan in analysis.plans.items():
        def part(eqn: Equation, index: int) -> float:
            return run_seconds(eqn.primitive, payload_bytes(eqn), n, link)[index]

        latency = per_call(plan.program, lambda eqn: part(eqn, 0))
        bandwidth = per_call(plan.program, lambda eqn: part(eqn, 1))
        plans[name] = PlanProjection(
            name=name,
            comm_s_per_call=None if latency is None or bandwidth is None else latency + bandwidth,
            latency_s_per_call=latency,
            is_upper_bound=plan.per_call_is_upper_bound,
            collectives=tuple(
                CollectiveProjection(c.equation_id, c.primitive, c.executions, c.bytes_per_execution,
                                     *run_seconds(c.primitive, c.bytes_per_execution, n, link))
                for c in plan.collectives
            ),
        )
    return Projection(link=link, devices=n, plans=plans)


def project_targets(analysis: "Analysis", link: Link | None = None, devices: int | None = None) -> dict[str, Projection]:
    """Each ``--target``'s compiled plans projected onto ``link`` with ``devices`` in the ring
    (default: the target's device count); none without a ``link``: a target's own interconnect
    is costed by its machine's model (:mod:`shardscope.engine.hlo.interconnect_times`), not a ring."""
    found: dict[str, Projection] = {}
    if link is None:
        return found
    for target in analysis.target_names:
        plans = analysis.on_target(target)
        compiled = {plan.name: on_target.compiled for plan, on_target in plans}
        found[target] = project_compiled(compiled, link, devices or plans[0][1].devices)
    return found
