"""A compiled collective's time on the interconnect its target has: its replica groups laid on
the machine's own devices.

A replica group names device positions; the target's compile says which device runs each
position (``TargetPlan.device_coords``: a TPU chip's torus coordinates, a GPU's slice, host and
index in the host). The time of one run is the slowest of its groups (they run at once, each
on links of its own; contention between groups is not modelled).

**TPU (ICI torus).** A group spans the torus axes along which its chips differ, ``k_d`` chips on
axis ``d``. An axis is a ring when the slice has a wraparound link there and the group covers
the whole axis; otherwise a line. One way per link is ``W``; a ring moves data both ways
(``W_d = 2W``), a line one way (``W_d = W``); hops ``floor(k_d/2)`` on a ring, ``k_d - 1`` on a
line, about ``alpha`` = 1 us each. With ``n`` devices, ``S`` the per-device operand bytes and
``V`` the bytes each device ends up with or starts from (the scaling book's sharding chapter,
:data:`~shardscope.costmodel.fabrics.SCALING_BOOK_SHARDING`; axes run at once):

- all-gather (``V = n S``), reduce-scatter (``V = S``):
  ``max(alpha * sum(hops_d), (n-1)/n * V / sum(W_d))``
- all-reduce: a reduce-scatter then an all-gather of ``S``: ``max(2 alpha * sum(hops_d), 2 (n-1)/n * S / sum(W_d))``
- all-to-all: the all-gather's bandwidth term of ``V = n S`` (the whole array, as for the
  all-gather: each device sends ``(n-1)/n`` of its ``S``, a quarter of a ring away on average)
  over 4 when every axis is a ring (over 2 on lines)
- collective-permute: the farthest pair, ``alpha * hops + S / W`` (one path)

**GPUs (NVLink in a host, the network between hosts).** ``B`` is NVLink's one-way bandwidth per
GPU when the group stays in one host, else the slower of it and the network port per GPU; ``alpha``
the step latency of the slower link used. NCCL's ring (:data:`~shardscope.costmodel.interconnects.NCCL_PERFORMANCE`):

- all-reduce: ``2(n-1)/n * S/B + 2(n-1) alpha``; across hosts NCCL may take its tree instead
  (a chain in each host, a binary tree between ``h`` hosts): ``2 S/B + 2 (ceil(log2 h) alpha_net + (g-1) alpha_nvlink)``;
  the faster of the two is taken, as NCCL's tuner does
- all-gather (``V = n S``), reduce-scatter (``V = S``): ``(n-1)/n * V/B + (n-1) alpha``
- all-to-all: every pair at once, ``max(S (g-1)/n / B_nvlink, S (n-g)/n / B_network) + alpha``
  (``g`` GPUs of the group in the sender's host)
- collective-permute: the slowest pair, ``S / B_link + alpha_link``
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from shardscope.costmodel.fabrics import NodeFabric, TorusFabric, node_fabric, torus_fabric
from shardscope.costmodel.projection import compiled_model

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.hlo.target_plan import TargetPlan

Coords = tuple[int, ...]

_REDUCE = {"psum", "psum_invariant", "unreduced_psum", "pmax", "pmin"}
_GATHER = {"all_gather", "all_gather_invariant", "all_gather_reduced"}
_SCATTER = {"reduce_scatter", "unreduced_reduce_scatter", "pbroadcast"}
_ALL_TO_ALL = {"all_to_all", "ragged_all_to_all"}
_PAIRS = {"ppermute", "psend", "precv"}


@dataclass(frozen=True)
class CollectiveTime:
    """One run of a collective: ``seconds`` (its latency and bandwidth parts, as the formula
    combines them), the ``algorithm`` in words and the ``devices`` of its largest group."""

    seconds: float
    latency_s: float
    bandwidth_s: float
    algorithm: str
    devices: int


@dataclass(frozen=True)
class TargetInterconnect:
    """A target's interconnect with its devices placed: what :meth:`time` costs a collective on."""

    target: str
    fabric: TorusFabric | NodeFabric
    device_coords: tuple[Coords, ...]
    machine_shape: Coords = ()

    @property
    def slice_shape(self) -> Coords:
        """Chips per axis of the machine: the whole target's, else the largest coordinate of the
        program's devices plus one, per axis."""
        if self.machine_shape:
            return self.machine_shape
        return tuple(max(c[d] for c in self.device_coords) + 1 for d in range(len(self.device_coords[0])))

    @property
    def description(self) -> str:
        """``ICI of a v5e 2x4 slice (2D torus; wraparound on no axis)`` or ``2 hosts of 8 H100s ...``."""
        if isinstance(self.fabric, TorusFabric):
            shape = tuple(size for size in self.slice_shape if size > 1) or (1,)
            wraps = [str(d) for d, (size, wrap) in enumerate(zip(self.slice_shape, self.fabric.wraps(self.slice_shape)))
                     if wrap and size > 1]
            return (f"ICI of a {self.fabric.generation} {'x'.join(map(str, shape))} slice "
                    f"(wraparound on {'axes ' + ', '.join(wraps) if wraps else 'no axis'})")
        shape = self.slice_shape  # slices x hosts x GPUs per host
        hosts, per_host = math.prod(shape[:-1]), shape[-1]
        links = "NVLink in a host, the network between hosts" if hosts > 1 else "NVLink through NVSwitch"
        return f"{hosts} host{'s' if hosts > 1 else ''} of {per_host} {self.fabric.gpu.upper()} GPUs ({links})"

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
        placed = [[self.device_coords[p] for p in group] for group in groups]
        if isinstance(self.fabric, TorusFabric):
            wraps = self.fabric.wraps(self.slice_shape)
            times = [torus_time(model, payload, group, self.fabric, self.slice_shape, wraps) for group in placed]
        else:
            times = [node_time(model, payload, group, self.fabric) for group in placed]
        return max(times, key=lambda t: t.seconds)


def interconnect_of(plan: "TargetPlan") -> TargetInterconnect | None:
    """The interconnect of ``plan``'s target with its devices placed; None for a target without
    published figures (a TPU generation shardscope does not know, a GPU from the user's file,
    the CPU) or a plan made without device coordinates."""
    if not plan.device_coords:
        return None
    fabric: TorusFabric | NodeFabric | None
    if plan.target.startswith("tpu:"):
        fabric = torus_fabric(plan.device_kind, plan.topology)
    else:
        fabric = node_fabric(plan.target)
    return None if fabric is None else TargetInterconnect(plan.target, fabric, plan.device_coords, plan.machine_shape)



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

# --------------------------------------------------------------------------- TPU


@dataclass(frozen=True)
class _AxisSpan:
    axis: int
    chips: int
    ring: bool
    hops: int


def _spans(group: Sequence[Coords], slice_shape: Coords, wraps: tuple[bool, ...]) -> list[_AxisSpan]:
    """The torus axes a group's chips differ along: a ring where the slice wraps and the group
    covers the whole axis, else a line from its first to its last chip."""
    spans = []
    for d, size in enumerate(slice_shape):
        values = sorted({c[d] for c in group})
        if len(values) < 2:
            continue
        ring = wraps[d] and len(values) == size
        hops = len(values) // 2 if ring else values[-1] - values[0]
        spans.append(_AxisSpan(d, len(values), ring, hops))
    return spans


def torus_time(model: str, payload: int, group: Sequence[Coords], fabric: TorusFabric, slice_shape: Coords,
               wraps: tuple[bool, ...]) -> CollectiveTime:
    """One group's run of a collective (``model``: the JAX primitive whose cost it has) on a TPU torus."""
    n = len(group)
    if model in _PAIRS:
        return _torus_pair(payload, group, fabric, slice_shape, wraps)
    spans = _spans(group, slice_shape, wraps)
    if n < 2 or not spans:
        return CollectiveTime(0.0, 0.0, 0.0, "no ICI link (one chip)", n)
    bandwidth = sum((2 if s.ring else 1) * fabric.link_Bps for s in spans)
    hops = sum(s.hops for s in spans)
    axes = ", ".join(f"axis {s.axis} ({s.chips} chips, {'ring' if s.ring else 'line'})" for s in spans)
    if model in _REDUCE:
        latency, wire = 2 * hops * fabric.hop_latency_s, 2 * (n - 1) / n * payload / bandwidth
        words = "reduce-scatter + all-gather"
    elif model in _GATHER:
        latency, wire = hops * fabric.hop_latency_s, (n - 1) / n * (n * payload) / bandwidth
        words = "all-gather"
    elif model in _SCATTER:
        latency, wire = hops * fabric.hop_latency_s, (n - 1) / n * payload / bandwidth
        words = "reduce-scatter"
    elif model in _ALL_TO_ALL:
        share = 4 if all(s.ring for s in spans) else 2
        latency, wire = hops * fabric.hop_latency_s, (n - 1) / n * (n * payload) / bandwidth / share
        words = f"all-to-all (1/{share} of an all-gather)"
    else:
        raise ValueError(f"no torus model for {model!r}")
    return CollectiveTime(max(latency, wire), latency, wire, f"{words} over {axes}", n)


def _torus_pair(payload: int, pair: Sequence[Coords], fabric: TorusFabric, slice_shape: Coords,
                wraps: tuple[bool, ...]) -> CollectiveTime:
    """A collective-permute's pair: the hops between the two chips (around a wraparound when
    shorter), then the bytes over one link."""
    if len(pair) < 2 or pair[0] == pair[1]:
        return CollectiveTime(0.0, 0.0, 0.0, "no ICI link (same chip)", len(pair))
    hops = 0
    for d, size in enumerate(slice_shape):
        distance = abs(pair[0][d] - pair[1][d])
        hops += min(distance, size - distance) if wraps[d] else distance
    latency, wire = hops * fabric.hop_latency_s, payload / fabric.link_Bps
    return CollectiveTime(latency + wire, latency, wire, f"send over {hops} ICI hop{'s' if hops != 1 else ''}", 2)


# --------------------------------------------------------------------------- GPUs


def node_time(model: str, payload: int, group: Sequence[Coords], fabric: NodeFabric) -> CollectiveTime:
    """One group's run of a collective on GPUs: NVLink inside a host, the network between hosts."""
    n = len(group)
    per_host: dict[Coords, int] = {}
    for c in group:
        per_host[c[:-1]] = per_host.get(c[:-1], 0) + 1
    hosts, in_host = len(per_host), max(per_host.values())
    if model in _PAIRS:
        return _node_pair(payload, group, fabric)
    if n < 2:
        return CollectiveTime(0.0, 0.0, 0.0, "no link (one GPU)", n)
    across = hosts > 1
    bandwidth = min(fabric.nvlink_Bps, fabric.network_Bps) if across else fabric.nvlink_Bps
    alpha = fabric.network_latency_s if across else fabric.nvlink_latency_s
    links = f"NVLink and the network ({hosts} hosts)" if across else "NVLink"
    if model in _REDUCE:
        ring = _time(2 * (n - 1) * alpha, 2 * (n - 1) / n * payload / bandwidth, f"NCCL ring over {links}", n)
        if not across:
            return ring
        tree_latency = 2 * (math.ceil(math.log2(hosts)) * fabric.network_latency_s + (in_host - 1) * fabric.nvlink_latency_s)
        tree = _time(tree_latency, 2 * payload / bandwidth, f"NCCL tree over {links}", n)
        return min(ring, tree, key=lambda t: t.seconds)
    if model in _GATHER:
        return _time((n - 1) * alpha, (n - 1) / n * (n * payload) / bandwidth, f"NCCL ring over {links}", n)
    if model in _SCATTER:
        return _time((n - 1) * alpha, (n - 1) / n * payload / bandwidth, f"NCCL ring over {links}", n)
    if model in _ALL_TO_ALL:
        wire = max(payload * (in_host - 1) / n / fabric.nvlink_Bps, payload * (n - in_host) / n / fabric.network_Bps)
        return _time(alpha, wire, f"pairwise sends over {links}", n)
    raise ValueError(f"no GPU model for {model!r}")


def _node_pair(payload: int, pair: Sequence[Coords], fabric: NodeFabric) -> CollectiveTime:
    if len(pair) < 2 or pair[0] == pair[1]:
        return CollectiveTime(0.0, 0.0, 0.0, "no link (same GPU)", len(pair))
    if pair[0][:-1] == pair[1][:-1]:
        return _time(fabric.nvlink_latency_s, payload / fabric.nvlink_Bps, "send over NVLink", 2)
    return _time(fabric.network_latency_s, payload / fabric.network_Bps, "send over the network", 2)


def _time(latency: float, wire: float, algorithm: str, devices: int) -> CollectiveTime:
    return CollectiveTime(latency + wire, latency, wire, algorithm, devices)
