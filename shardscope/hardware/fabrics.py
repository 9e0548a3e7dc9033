"""The interconnect models a machine's record names: a TPU generation's ICI torus, and GPUs in
hosts (NVLink in a host, one network port per GPU between hosts). Each is the one cost model of
its interconnect: :meth:`TorusFabric.time` and :meth:`NodeFabric.time` cost one replica group's
run of a collective on it.

The figures (bandwidths, latencies) are not here: each machine's record holds its own, with their
sources (:mod:`shardscope.hardware.tpu_generations`, :mod:`shardscope.hardware.gpu_nodes`).
:mod:`shardscope.engine.hlo.interconnect_times` lays a compiled collective's replica groups on a
target's devices and asks the fabric for each group's time.

**TPU (ICI torus).** A group spans the torus axes along which its chips differ, ``k_d`` chips on
axis ``d``. An axis is a ring when the slice has a wraparound link there and the group covers
the whole axis; otherwise a line. One way per link is ``W``; a ring moves data both ways
(``W_d = 2W``), a line one way (``W_d = W``); hops ``floor(k_d/2)`` on a ring, ``k_d - 1`` on a
line, about ``alpha`` = 1 us each. With ``n`` devices, ``S`` the per-device operand bytes and
``V`` the bytes each device ends up with or starts from (the scaling book's sharding chapter,
:data:`SCALING_BOOK_SHARDING`; the axes run at once):

- all-gather (``V = n S``), reduce-scatter (``V = S``):
  ``max(alpha * sum(hops_d), (n-1)/n * V / sum(W_d))``
- all-reduce: a reduce-scatter then an all-gather of ``S``: ``max(2 alpha * sum(hops_d), 2 (n-1)/n * S / sum(W_d))``
- all-to-all: each axis's links carry their share. Chip ``i`` sends ``S/n`` to every chip of the
  group; routed one axis at a time, the bytes that cross axis ``d`` are those whose destination
  differs there. On a ring of ``k`` the load is the same on every link: ``S D_k / (2 k W)`` with
  ``D_k`` the sum of the ring distances from one chip to the others (``k^2/4``, ``(k^2-1)/4`` for
  odd ``k``): ``k S / (8W)``, the scaling book's all-gather over 4 (``V / W_bidi / 4``, ``V = k S``).
  On a line the middle link is the bottleneck: ``L R S / (k W)`` with ``L``, ``R`` the chips on
  either side of it. The axes' links run at once, so the time is the slowest axis's
  (``max_d``), never the whole group taken as one ring.
- collective-permute: the farthest pair, ``alpha * hops + S / W`` (one path)
- collective-broadcast: the source's ``S`` pipelined down every spanned axis:
  ``max(alpha * sum(hops_d), S / sum(W_d))``

**GPUs.** :mod:`shardscope.hardware.nccl` (NCCL's tuner: ring, tree, NVLS and NVLS tree, PAT, each
protocol, on the channels its topology search lays over NVLink and every rail:
:mod:`shardscope.hardware.nccl_search`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Sequence

from shardscope.hardware.nccl import NcclPath, nccl_time, send_latency_s
from shardscope.hardware.nccl_search import NcclTopology
from shardscope import collective_kinds as kinds
from shardscope.hardware.collective_models import PAIRS, CollectiveTime

SCALING_BOOK_TPUS = "https://jax-ml.github.io/scaling-book/tpus"
"""'How to Scale Your Model', part 2: ICI bandwidth per link per generation (its interconnect
table), nearest-neighbour links, which slices have wraparound links."""

SCALING_BOOK_SHARDING = "https://jax-ml.github.io/scaling-book/sharding"
"""Part 3: the collectives' costs on a torus (all-gather V / (W_bidi * axes), all-reduce twice
that, all-to-all a quarter on a bidirectional ring; about 1 us per ICI hop), and a measured
all-gather on a v5e 8x4 (680 us against 560 us from 4.5e10 B/s per link)."""

ICI_HOP_LATENCY_S = 1e-6
"""About 1 us per ICI hop, whatever the data volume (the scaling book's sharding chapter, 'A
note on ICI latency'; Google publishes no figure)."""

Coords = tuple[int, ...]


def full_axis_of_16(shape: tuple[int, ...]) -> tuple[bool, ...]:
    """v5e and v6e slices are cut from a 16x16 torus without optical switches: an axis wraps
    only when it spans the whole pod's axis."""
    return tuple(size == 16 for size in shape)


def whole_cubes(shape: tuple[int, ...]) -> tuple[bool, ...]:
    """v4 and v5p wraparounds come from the optical switches between 4x4x4 cubes: a slice made
    of whole cubes wraps on every axis, a smaller one (2x2x1, 2x2x4) on none."""
    whole = len(shape) == 3 and all(size % 4 == 0 for size in shape)
    return tuple(whole for _ in shape)


WRAPAROUND_RULES: dict[str, Callable[[tuple[int, ...]], tuple[bool, ...]]] = {
    "axis of 16": full_axis_of_16,
    "whole 4x4x4 cubes": whole_cubes,
}
"""Which axes of a slice close into rings, by the rule a generation's record names."""

WRAP_SOURCE = (f"wraparound: v5e and v6e only on an axis of 16 chips, v4 and v5p on every axis of a slice made of "
               f"whole 4x4x4 cubes ({SCALING_BOOK_TPUS}, 'TPU Networking'; for v5p also "
               "https://cloud.google.com/tpu/docs/v5p: 4x4x4 and larger slices have a full 3D torus)")


@dataclass(frozen=True)
class TorusFabric:
    """A TPU generation's ICI: ``link_Bps`` one way per link, ``hop_latency_s`` per hop, and
    the rule that says which axes of a slice close into rings (:meth:`wraps`)."""

    generation: str
    link_Bps: float
    hop_latency_s: float
    wraparound: str
    source: str
    kind: str = field(default="ICI torus", init=False)

    def wraps(self, slice_shape: tuple[int, ...]) -> tuple[bool, ...]:
        """Which axes of a slice of ``slice_shape`` chips have wraparound links."""
        return WRAPAROUND_RULES[self.wraparound](slice_shape)

    def time(self, model: str, payload: int, group: Sequence[Coords], machine_shape: Coords) -> CollectiveTime:
        """One group's run of a collective (``model``: the JAX primitive whose cost it has) on the torus."""
        return torus_time(model, payload, group, self, machine_shape, self.wraps(machine_shape))

    def describe(self, machine_shape: Coords) -> str:
        """``ICI of a v5e 2x4 slice (wraparound on no axis)``."""
        shape = tuple(size for size in machine_shape if size > 1) or (1,)
        wraps = [str(d) for d, (size, wrap) in enumerate(zip(machine_shape, self.wraps(machine_shape)))
                 if wrap and size > 1]
        return (f"ICI of a {self.generation} {'x'.join(map(str, shape))} slice "
                f"(wraparound on {'axes ' + ', '.join(wraps) if wraps else 'no axis'})")


@dataclass(frozen=True)
class NodeFabric:
    """GPUs in hosts: ``nvlink_Bps`` one way per GPU inside a host (through NVSwitch), and one
    network port per GPU between hosts (``nic_Bps``: what NCCL reaches per port, measured), and
    the node as NCCL's topology search sees it (``nccl``: what its tuner costs collectives on)."""

    gpu: str
    nvlink_Bps: float
    nic_Bps: float
    nccl: NcclTopology
    source: str
    kind: str = field(default="NVLink in a host, one network port per GPU between hosts", init=False)

    @property
    def net_overhead_s(self) -> float:
        """The host CPU's overhead per network step NCCL's tuner charges (1 us Intel, 2 us AMD)."""
        return 2e-6 if self.nccl.amd_cpu else 1e-6

    def time(self, model: str, payload: int, group: Sequence[Coords], machine_shape: Coords) -> CollectiveTime:
        """One group's run of a collective on the GPUs: NCCL's choice of algorithm and protocol."""
        n = len(group)
        per_host: dict[Coords, int] = {}
        for c in group:
            per_host[c[:-1]] = per_host.get(c[:-1], 0) + 1
        if model in PAIRS:
            return _node_pair(payload, group, self)
        if n < 2:
            return CollectiveTime(0.0, 0.0, 0.0, "no link (one GPU)", n)
        path = NcclPath(ranks=n, hosts=len(per_host), per_host=min(per_host.values()), topology=self.nccl,
                        nvlink_Bps=self.nvlink_Bps, nic_Bps=self.nic_Bps)
        return nccl_time(model, payload, path)

    def describe(self, machine_shape: Coords) -> str:
        """``2 hosts of 8 H100 GPUs (NVLink in a host, 8 network ports per host between them)``."""
        hosts, per_host = 1, machine_shape[-1] if machine_shape else 1
        for size in machine_shape[:-1]:
            hosts *= size
        links = (f"NVLink in a host, {per_host} network ports per host between them" if hosts > 1
                 else "NVLink through NVSwitch")
        return f"{hosts} host{'s' if hosts > 1 else ''} of {per_host} {self.gpu.upper()} GPUs ({links})"


Fabric = TorusFabric | NodeFabric
"""An interconnect shardscope has a cost model of."""


# --------------------------------------------------------------------------- TPU


@dataclass(frozen=True)
class AxisSpan:
    """The chips of a group along one torus axis: how many, whether they close a ring, the hops."""

    axis: int
    chips: int
    ring: bool
    hops: int


def spans(group: Sequence[Coords], slice_shape: Coords, wraps: tuple[bool, ...]) -> list[AxisSpan]:
    """The torus axes a group's chips differ along: a ring where the slice wraps and the group
    covers the whole axis, else a line from its first to its last chip."""
    found = []
    for d, size in enumerate(slice_shape):
        values = sorted({c[d] for c in group})
        if len(values) < 2:
            continue
        ring = wraps[d] and len(values) == size
        hops = len(values) // 2 if ring else values[-1] - values[0]
        found.append(AxisSpan(d, len(values), ring, hops))
    return found


def torus_lines(group: Sequence[Coords]) -> frozenset[tuple[int, Coords]]:
    """The torus lines a group's chips may use: for each axis they differ along, each line of chips
    along it (``(axis, every other coordinate)``) through the box the group spans, every coordinate
    its chips take on each axis combined. A route between two chips, one axis after another, only
    passes chips of that box, so two collectives whose lines do not meet use no link in common (a
    group that is not the whole box, as two chips on a diagonal, may use fewer lines: never more;
    the lines through its own chips alone miss a route's turn in three dimensions)."""
    if not group:
        return frozenset()
    values = [sorted({c[d] for c in group}) for d in range(len(group[0]))]
    found: set[tuple[int, Coords]] = set()
    for d, along in enumerate(values):
        if len(along) > 1:
            found |= {(d, rest) for rest in itertools.product(*values[:d], *values[d + 1:])}
    return frozenset(found)


def all_to_all_axis_seconds(span: AxisSpan, payload: int, link_Bps: float) -> float:
    """The time an all-to-all's bytes take on one axis's links (the module's docstring): on a
    ring ``S D_k / (2 k W)``, on a line ``L R S / (k W)`` at its middle link."""
    k = span.chips
    if span.ring:
        distances = (k * k - (k % 2)) / 4  # the sum of ring distances from one chip to the others
        return payload * distances / (2 * k * link_Bps)
    left, right = k // 2, k - k // 2
    return left * right * payload / (k * link_Bps)


_TORUS_RUNS: dict[str, tuple[int, str]] = {
    kinds.REDUCE: (2, f"{kinds.REDUCE_SCATTER} + {kinds.ALL_GATHER}"),
    kinds.GATHER: (1, kinds.ALL_GATHER),
    kinds.SCATTER: (1, kinds.REDUCE_SCATTER),
    kinds.BROADCAST: (1, "broadcast (pipelined from the source)"),
}
"""A cost shape on a torus: how many passes over the hops of the axes it spans (an all-reduce is a
reduce-scatter and an all-gather) and the algorithm in words; the bytes over the links are the
ring's (:data:`shardscope.collective_kinds.RING_TERMS`), shared by every link the group spans."""
_EXCHANGE_WORDS = "all-to-all (each axis's links their share)"


def torus_time(model: str, payload: int, group: Sequence[Coords], fabric: TorusFabric, slice_shape: Coords,
               wraps: tuple[bool, ...]) -> CollectiveTime:
    """One group's run of a collective (``model``: the JAX primitive whose cost it has) on a TPU torus."""
    n = len(group)
    if model in PAIRS:
        return _torus_pair(payload, group, fabric, slice_shape, wraps)
    spanned = spans(group, slice_shape, wraps)
    if n < 2 or not spanned:
        return CollectiveTime(0.0, 0.0, 0.0, "no ICI link (one chip)", n)
    bandwidth = sum((2 if s.ring else 1) * fabric.link_Bps for s in spanned)
    hops = sum(s.hops for s in spanned)
    axes = ", ".join(f"axis {s.axis} ({s.chips} chips, {'ring' if s.ring else 'line'})" for s in spanned)
    shape = kinds.SHAPE_OF.get(model)
    if shape == kinds.EXCHANGE:
        latency = hops * fabric.hop_latency_s
        wire = max(all_to_all_axis_seconds(s, payload, fabric.link_Bps) for s in spanned)
        return CollectiveTime(max(latency, wire), latency, wire, f"{_EXCHANGE_WORDS} over {axes}", n)
    if shape not in _TORUS_RUNS:
        raise ValueError(f"no torus model for {model!r}")
    passes, words = _TORUS_RUNS[shape]
    latency, wire = passes * hops * fabric.hop_latency_s, kinds.RING_TERMS[shape](n, payload)[1] / bandwidth
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


def _node_pair(payload: int, pair: Sequence[Coords], fabric: NodeFabric) -> CollectiveTime:
    """A collective-permute's pair: NVLink in a host, else one network port (NCCL's Simple
    protocol's point-to-point latency on that link)."""
    if len(pair) < 2 or pair[0] == pair[1]:
        return CollectiveTime(0.0, 0.0, 0.0, "no link (same GPU)", len(pair))
    if pair[0][:-1] == pair[1][:-1]:
        latency = send_latency_s(across_hosts=False)
        return CollectiveTime(latency + payload / fabric.nvlink_Bps, latency, payload / fabric.nvlink_Bps,
                              "send over NVLink", 2)
    latency = send_latency_s(across_hosts=True)
    return CollectiveTime(latency + payload / fabric.nic_Bps, latency, payload / fabric.nic_Bps,
                          "send over the network", 2)
