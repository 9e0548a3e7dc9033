"""A compiled collective's time on the interconnect its target has: its replica groups laid on
the machine's own devices.

A replica group names device positions; the target's compile says which device runs each
position (``TargetPlan.device_coords``: a TPU chip's torus coordinates, a GPU's slice, host and
index in the host). The time of one run is the slowest of its groups (they run at once, each
on links of its own; contention between groups is not modelled). Each group is costed by the
one model of the target's interconnect, which the target's machine record names
(``TargetPlan.machine.fabric``: :mod:`shardscope.hardware.fabrics` has the formulas). A target
plan is costed once, where it is judged (:mod:`shardscope.engine.hlo.costing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardscope.collective_kinds import ALL_REDUCE, KINDS, REDUCE_SCATTER
from shardscope.hardware.collective_models import CollectiveTime
from shardscope.hardware.fabrics import Fabric, TorusFabric, torus_lines

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective

__all__ = ["CollectiveTime", "TargetInterconnect", "compiled_model"]

Coords = tuple[int, ...]

COMPILED_MODELS = {kind.name: kind.model for kind in KINDS}
"""The ring model of each compiled collective kind, by the JAX primitive that has the same one."""


def compiled_model(c: "CompiledCollective") -> str:
    """The primitive whose ring model ``c`` follows: an all-reduce that keeps one shard of its
    sum (the TPU's all-reduce-scatter fusion) is a reduce-scatter."""
    return COMPILED_MODELS[REDUCE_SCATTER if c.kind == ALL_REDUCE and c.scatters else c.kind]


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

    def lines(self, c: "CompiledCollective") -> frozenset[tuple[int, Coords]] | None:
        """The torus lines ``c``'s groups use (:func:`~shardscope.hardware.fabrics.torus_lines`):
        collectives whose lines do not meet run on links of their own. None on GPUs, or when a
        group names a position the target has no device for."""
        if not isinstance(self.fabric, TorusFabric):
            return None
        groups = c.groups or (tuple(range(len(self.device_coords))),)
        if any(p >= len(self.device_coords) for group in groups for p in group):
            return None
        return frozenset().union(*(torus_lines([self.device_coords[p] for p in group]) for group in groups))

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
