"""A compiled collective's time on the interconnect its target has: its replica groups laid on
the machine's own devices.

A replica group names device positions; the target's compile says which device runs each
position (``TargetPlan.device_coords``: a TPU chip's torus coordinates, a GPU's slice, host and
index in the host). The time of one run is the slowest of its groups (they run at once, each
on links of its own; contention between groups is not modelled). Each group is costed by the
one model of the target's interconnect, which the target's machine record names
(``TargetPlan.machine.fabric``: :mod:`shardscope.hardware.fabrics` has the formulas).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardscope.hardware.collective_models import CollectiveTime
from shardscope.hardware.fabrics import Fabric
from shardscope.costmodel.projection import compiled_model

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.hlo.target_plan import TargetPlan

__all__ = ["CollectiveTime", "TargetInterconnect", "collectives_seconds_per_call", "interconnect_of"]

Coords = tuple[int, ...]


@dataclass(frozen=True)
class TargetInterconnect:
    """A target's interconnect with its devices placed: what :meth:`time` costs a collective on."""

    target: str
    fabric: Fabric
    device_coords: tuple[Coords, ...]
    machine_shape: Coords = ()

    @property
    def slice_shape(self) -> Coords:
        """Devices per axis of the machine: the whole target's, else the largest coordinate of the
        program's devices plus one, per axis."""
        if self.machine_shape:
            return self.machine_shape
        return tuple(max(c[d] for c in self.device_coords) + 1 for d in range(len(self.device_coords[0])))

    @property
    def description(self) -> str:
        """``ICI of a v5e 2x4 slice (wraparound on no axis)`` or ``2 hosts of 8 H100 GPUs (...)``."""
        return self.fabric.describe(self.slice_shape)

    @property
    def source(self) -> str:
        """Where the figures come from."""
        return self.fabric.source

    def time(self, c: "CompiledCollective", payload_bytes: int | None = None) -> CollectiveTime | None:
        """One run of ``c`` (or of ``payload_bytes`` of it) over its replica groups; None when a
        group names a position the target has no device for."""
        model = compiled_model(c)
        payload = c.bytes_per_execution if payload_bytes is None else payload_bytes
        groups = c.groups or (tuple(range(len(self.device_coords))),)
        if any(p >= len(self.device_coords) for group in groups for p in group):
            return None
        times = [self.fabric.time(model, payload, [self.device_coords[p] for p in group], self.slice_shape)
                 for group in groups]
        return max(times, key=lambda t: t.seconds)


def interconnect_of(plan: "TargetPlan") -> TargetInterconnect | None:
    """The interconnect of ``plan``'s target with its devices placed; None for a machine without
    an interconnect model (a TPU generation shardscope has no figures for, a GPU from the user's
    file, the CPU) or a plan made without device coordinates."""
    fabric = None if plan.machine is None else plan.machine.fabric
    if fabric is None or not plan.device_coords:
        return None
    return TargetInterconnect(plan.target, fabric, plan.device_coords, plan.machine_shape)


def collectives_seconds_per_call(plan: "TargetPlan") -> float | None:
    """Every compiled collective of ``plan``: its runs per call times one run on the target's
    interconnect (None without a model, or when a count is unknown)."""
    interconnect = interconnect_of(plan)
    if interconnect is None:
        return None
    total = 0.0
    for c in plan.compiled.collectives:
        timed = interconnect.time(c)
        if timed is None or c.executions is None:
            return None
        total += c.executions * timed.seconds
    return total
