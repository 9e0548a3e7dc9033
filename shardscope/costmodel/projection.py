"""Project each plan's collectives onto an interconnect with the ring (alpha-beta) model.

For ``n`` devices, a payload of ``S`` bytes, per-step latency alpha and one-way bandwidth ``B``
(the formulas of NCCL's performance notes, :data:`shardscope.costmodel.interconnects.NCCL_PERFORMANCE`),
one run costs ``steps·alpha + bytes/B``, its steps and bytes its cost shape's
(:data:`shardscope.collective_kinds.RING_TERMS`: an all-reduce ``2(n-1)`` steps and
``2(n-1)/n · S`` bytes, an all-gather ``n-1`` and ``(n-1)/n · nS``, ...).

Each plan sums these over the collectives its compiled module runs (runs per call × cost per run):
what XLA runs, after its combiner merged a jaxpr's psums into one all-reduce and its partitioner
wrote the collectives a jit program's jaxpr never shows. The projection keeps the analysed
per-device program (same chunks per device, same payloads) and puts it on a ring of ``devices``
devices: only the communication is projected, not the compute.
"""

from __future__ import annotations

from collections.abc import Iterable
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
    """One collective on the link: seconds per run (latency and bandwidth parts) and per call.

    ``name`` is the compiled instruction's (``all-reduce.3``), or the jaxpr equation's id for a
    plan that was only traced."""

    name: str
    primitive: str
    executions: int | None
    bytes_per_execution: int
    latency_s: float
    bandwidth_s: float
    ring: int | None = None
    """The devices in its ring (None when its group is unknown)."""

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
    """One plan on the link: communication seconds per call and the latency's share of it, summed
    over ``collectives`` (the compiled module's; the jaxpr's when ``compiled`` is False, for a plan
    that was only traced)."""

    name: str
    comm_s_per_call: float | None
    latency_s_per_call: float | None
    is_upper_bound: bool
    collectives: tuple[CollectiveProjection, ...]
    compiled: bool = True

    @property
    def runs_per_call(self) -> int | None:
        """The collective runs per call projected (None when a loop's trip count is unknown)."""
        runs = [c.executions for c in self.collectives]
        return None if None in runs else sum(r or 0 for r in runs)

    @property
    def bytes_per_call(self) -> int | None:
        """The per-device bytes per call it costs (None when a loop's trip count is unknown)."""
        if None in [c.executions for c in self.collectives]:
            return None
        return sum((c.executions or 0) * c.bytes_per_execution for c in self.collectives)

    @property
    def latency_share(self) -> float | None:
        """The fraction of the communication time spent on latency (None when unknown or zero)."""
        if not self.comm_s_per_call or self.latency_s_per_call is None:
            return None
        return self.latency_s_per_call / self.comm_s_per_call


@dataclass(frozen=True)
class Projection:
    """Every plan of an analysis projected onto ``link`` with ``devices`` devices in the ring; with
    ``own_groups``, no count was given: each collective's ring is its own group of the analysed
    mesh of ``devices`` (a compiled collective's replica group; a traced one's, the whole mesh)."""

    link: Link
    devices: int
    plans: dict[str, PlanProjection]
    own_groups: bool = False

    @property
    def crossover_bytes(self) -> float:
        """All-reduce payloads below this many bytes are latency-dominated, on a ring of :attr:`devices`."""
        return crossover_bytes(self.devices, self.link)

    @property
    def crossovers(self) -> dict[int, float]:
        """:attr:`crossover_bytes` for each ring size the plans' collectives use (their own groups:
        an all-reduce over ``data`` of a data=4 x model=2 mesh, a ring of 4), smallest first; the
        one of :attr:`devices` when none is known."""
        rings = sorted({c.ring for p in self.plans.values() for c in p.collectives if c.ring}) or [self.devices]
        return {n: crossover_bytes(n, self.link) for n in rings}

    def ratio(self, baseline: str, candidate: str) -> float | None:
        """Projected communication time of ``baseline`` over ``candidate`` (None if unknown)."""
        a, b = self.plans[baseline].comm_s_per_call, self.plans[candidate].comm_s_per_call
        if a is None or b is None or b == 0:
            return None
        return a / b


def plan_projection(name: str, collectives: Iterable[CollectiveProjection], is_upper_bound: bool,
                    compiled: bool = True) -> PlanProjection:
    """One plan on the link: each collective's runs per call times one run's latency and
    bandwidth, summed (None per call when a run count is unknown)."""
    collectives = tuple(collectives)
    known = None not in [c.executions for c in collectives]
    latency = sum((c.executions or 0) * c.latency_s for c in collectives) if known else None
    bandwidth = sum((c.executions or 0) * c.bandwidth_s for c in collectives) if known else None
    return PlanProjection(
        name=name,
        comm_s_per_call=None if latency is None or bandwidth is None else latency + bandwidth,
        latency_s_per_call=latency,
        is_upper_bound=is_upper_bound,
        collectives=collectives,
        compiled=compiled,
    )


def ring_size(collective: "CompiledCollective", devices: int | None, mesh_devices: int | None = None) -> int | None:
    """The devices in one run's ring: ``devices`` when a count is projected onto (one ring over
    every device), else the collective's own replica group (an all-reduce over ``data`` of a
    data=4 x model=2 mesh: 4), or ``mesh_devices`` for a module that names no groups (XLA's
    ``replica_groups={}``: every device); None when neither is known."""
    if devices:
        return devices
    return len(collective.groups[0]) if collective.groups else mesh_devices


def compiled_collectives(collectives: "Iterable[CompiledCollective]", link: Link, devices: int | None, calls: int = 1,
                         prefix: str = "", mesh_devices: int | None = None,
                         as_written: bool = False) -> tuple[CollectiveProjection, ...]:
    """Each compiled collective on ``link`` with :func:`ring_size` devices in its ring: its runs
    per call (times ``calls``, a dispatched module's calls per step) and one run of its per-device
    bytes. A ring of unknown size leaves its runs unknown, so the plan's time is unknown too.
    ``as_written`` costs each in the program's own types: the module is the CPU's, a stand-in for
    the link's machine, whose compiler does not sum bf16 in f32 as XLA:CPU does."""
    projected = []
    for c in collectives:
        n = ring_size(c, devices, mesh_devices)
        runs = None if c.executions is None or n is None else c.executions * calls
        size = c.written_bytes_per_execution if as_written else c.bytes_per_execution
        seconds = run_seconds(compiled_model(c), size, n, link) if n is not None else (0.0, 0.0)
        projected.append(CollectiveProjection(prefix + c.name, compiled_model(c), runs, size, *seconds, ring=n))
    return tuple(projected)


def project_compiled(plans: "dict[str, CompiledPlan]", link: Link, devices: int | None, mesh_devices: int) -> Projection:
    """Project the compiled collectives of each plan (a target's: what its compiler runs) onto
    ``link``: each instruction's runs per call times one run's cost on a ring of ``devices``, or
    of its own group when no count is given (``mesh_devices`` the program's)."""
    projected = {
        name: plan_projection(name, compiled_collectives(plan.collectives, link, devices, mesh_devices=mesh_devices),
                              any(c.in_conditional for c in plan.collectives))
        for name, plan in plans.items()
    }
    return Projection(link=link, devices=devices or mesh_devices, plans=projected, own_groups=devices is None)


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
    projected = plan_projection("", compiled_collectives(plan.collectives, link, devices),
                                any(c.in_conditional for c in plan.collectives))
    return CompiledProjection(link, devices, projected.comm_s_per_call, projected.is_upper_bound)
