"""Project each plan's collectives onto an interconnect with the ring (alpha-beta) model.

For ``n`` devices, a payload of ``S`` bytes, per-step latency alpha and one-way bandwidth ``B``
(the formulas of NCCL's performance notes, :data:`shardscope.costmodel.interconnects.NCCL_PERFORMANCE`),
one run costs ``steps·alpha + bytes/B``, its steps and bytes its cost shape's
(:data:`shardscope.collective_kinds.RING_TERMS`: an all-reduce ``2(n-1)`` steps and
``2(n-1)/n · S`` bytes, an all-gather ``n-1`` and ``(n-1)/n · nS``, ...).

Each plan sums these over its executed collectives (runs per call × cost per run). The projection
keeps the analysed per-device program (same chunks per device, same payloads) and puts it on a
ring of ``devices`` devices: only the communication is projected, not the compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardscope.costmodel.interconnects import Link
from shardscope import collective_kinds as kinds
from shardscope.engine.hlo.interconnect_times import compiled_model

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledPlan

def ring_terms(primitive: str, payload_bytes: int, devices: int) -> tuple[float, float]:
    """``(latency steps, bytes over the link)`` of one run: time = steps·alpha + bytes/B.

    ``payload_bytes`` is the per-device operand size shardscope reports (``bytes`` in the JSON).
    """
    if devices < 2:
        return 0.0, 0.0
    shape = kinds.SHAPE_OF.get(primitive)
    if shape is None:
        raise ValueError(f"no communication model for {primitive!r}")
    steps, wire = kinds.RING_TERMS[shape](devices, payload_bytes)
    return float(steps), float(wire)


def run_seconds(primitive: str, payload_bytes: int, devices: int, link: Link) -> tuple[float, float]:
    """``(latency seconds, bandwidth seconds)`` of one run of a collective on ``link``."""
    steps, wire_bytes = ring_terms(primitive, payload_bytes, devices)
    return steps * link.latency_s, wire_bytes / link.bandwidth_Bps


def crossover_bytes(devices: int, link: Link) -> float:
    """The all-reduce payload below which latency costs more than bandwidth: ``n·alpha·B``."""
    return devices * link.latency_s * link.bandwidth_Bps


@dataclass(frozen=True)
class CollectiveProjection:
    """One collective on the link: seconds per run (latency and bandwidth parts) and per call."""

    equation_id: str
    primitive: str
    executions: int | None
    bytes_per_execution: int
    latency_s: float
    bandwidth_s: float

    @property
    def seconds_per_execution(self) -> float:
        """Projected seconds of one run."""
        return self.latency_s + self.bandwidth_s

    @property
    def latency_dominated(self) -> bool:
        """True when the payload is under the crossover size: latency costs more than bytes."""
        return self.latency_s > self.bandwidth_s


@dataclass(frozen=True)
class PlanProjection:
    """One plan on the link: communication seconds per call and the latency's share of it."""

    name: str
    comm_s_per_call: float | None
    latency_s_per_call: float | None
    is_upper_bound: bool
    collectives: tuple[CollectiveProjection, ...]

    @property
    def latency_share(self) -> float | None:
        """The fraction of the communication time spent on latency (None when unknown or zero)."""
        if not self.comm_s_per_call or self.latency_s_per_call is None:
            return None
        return self.latency_s_per_call / self.comm_s_per_call


@dataclass(frozen=True)
class Projection:
    """Every plan of an analysis projected onto ``link`` with ``devices`` devices in the ring."""

    link: Link
    devices: int
    plans: dict[str, PlanProjection]

    @property
    def crossover_bytes(self) -> float:
        """All-reduce payloads below this many bytes are latency-dominated."""
        return crossover_bytes(self.devices, self.link)

    def ratio(self, baseline: str, candidate: str) -> float | None:
        """Projected communication time of ``baseline`` over ``candidate`` (None if unknown)."""
        a, b = self.plans[baseline].comm_s_per_call, self.plans[candidate].comm_s_per_call
        if a is None or b is None or b == 0:
            return None
        return a / b


def project_compiled(plans: "dict[str, CompiledPlan]", link: Link, devices: int) -> Projection:
    """Project the compiled collectives of each plan (a target's: what its compiler runs) onto
    ``link`` with ``devices`` in the ring: each instruction's runs per call times one run's cost."""
    projected = {}
    for name, plan in plans.items():
        collectives = tuple(
            CollectiveProjection(c.name, compiled_model(c), c.executions, c.bytes_per_execution,
                                 *run_seconds(compiled_model(c), c.bytes_per_execution, devices, link))
            for c in plan.collectives
        )
        runs = [c.executions for c in collectives]
        known = None not in runs
        latency = sum((c.executions or 0) * c.latency_s for c in collectives) if known else None
        bandwidth = sum((c.executions or 0) * c.bandwidth_s for c in collectives) if known else None
        projected[name] = PlanProjection(
            name=name,
            comm_s_per_call=None if latency is None or bandwidth is None else latency + bandwidth,
            latency_s_per_call=latency,
            is_upper_bound=any(c.in_conditional for c in plan.collectives),
            collectives=collectives,
        )
    return Projection(link=link, devices=devices, plans=projected)


@dataclass(frozen=True)
class CompiledProjection:
    """A compiled plan's collectives on a link: communication seconds per call (None when a
    loop's trip count is unknown), an upper bound when one sits in a conditional's branch."""

    link: Link
    devices: int | None
    comm_s_per_call: float | None
    is_upper_bound: bool


def project_compiled_plan(plan: "CompiledPlan", link: Link, devices: int | None = None) -> CompiledProjection:
    """Every compiled collective of ``plan`` on ``link``: runs per call x the ring cost of one run
    of its per-device bytes, over ``devices`` devices (default: each collective's own group;
    None per call when a trip count or a group is unknown)."""
    total: float | None = 0.0
    for c in plan.collectives:
        n = devices or (len(c.groups[0]) if c.groups else None)
        if c.executions is None or n is None:  # a trip count or the group is unknown: so is the time
            total = None
            continue
        latency, bandwidth = run_seconds(compiled_model(c), c.bytes_per_execution, n, link)
        if total is not None:
            total += c.executions * (latency + bandwidth)
    return CompiledProjection(link, devices, total, any(c.in_conditional for c in plan.collectives))
