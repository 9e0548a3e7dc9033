"""The channels NCCL lays on a GPU node, as its topology search finds them: how many, and the
bandwidth NCCL books for each inside a host (``intra``) and through a network port (``inter``).
NCCL's tuner (:mod:`shardscope.hardware.nccl`) multiplies them out, so they decide both which
algorithm NCCL runs and how fast it costs it.

The node is NVIDIA's DGX: every GPU on NVSwitch, one network port per GPU on a PCIe switch of its
own (:data:`SEARCH`, :func:`ring_graph`, :func:`tree_graph`, :func:`nvls_graph`). What NCCL sees
there (:class:`NcclTopology`): each GPU's NVLink, its links times NCCL's figure per link (H100 18 x
20.6 GB/s = 370.8, A100 12 x 20 = 240, B200 18 x 40.1 = 721.8: ``topo.h``), and the path to its
port, the slower of the PCIe link (``width * GT/s / 80``: Gen5 x16 48 GB/s, Gen4 x16 24) and the
port (400 Gb/s = 50 GB/s, 200 Gb/s = 25): 48 GB/s on DGX H100, H200 and B200, 24 on DGX A100.

The search, in short (``search.cc`` ``ncclTopoCompute``): it tries the speeds of its table from the
fastest one the path allows, keeps the layout with the most bandwidth (channels x speed), and
stops once that reaches the GPU's NVLink or the next speed is under half the best one's. Then
it doubles the channels at half the speed when the speed is 25 GB/s or more (not on Hopper and
later when under 50 GB/s with more than 4 channels), and tries faster speeds with those channels.
Checked against NCCL's own logs: 12 channels of 20 GB/s on one DGX A100 host, 12 of 30 on one
H100 host, 8 of 48 across two H100 hosts, 8 NVLS channels of 40 GB/s (NVIDIA/nccl issue 1197).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

SEARCH = ("NVIDIA/nccl src/graph/search.cc at 5067397c2676d5aed50042fc39e5c8ee96eb0027 (NCCL 2.30.7): "
          "ncclTopoCompute (lines 1074-1313), ncclTopoDupChannels (1036-1049), the speed tables (1051-1067), "
          "ncclTopoSearchTryNvls (410-443); src/init.cc 1170-1215 (the ring's channels cap the tree's); "
          "src/graph/topo.h 19-35 (NVLink per link), topo.cc 545-657 (PCIe width * speed / 80)")
NCCL_LOGS = ("NCCL's own graph logs: 'Pattern 4, crossNic 0, nChannels 12, bw 20.000000/20.000000' on an 8-GPU A100 "
             "host; 'nChannels 12, bw 30.000000/30.000000' and NVLS 'nChannels 8, bw 40.000000/60.000000' on H100 "
             "(https://github.com/NVIDIA/nccl/issues/1197); 'Pattern 4, crossNic 2, nChannels 8, bw "
             "48.000000/48.000000, type NVL/PIX' across two 8-GPU H100 hosts with 8 x 400 Gb/s ports")

ARCHITECTURES = ("ampere", "hopper", "blackwell")
"""The GPU generations NCCL's tables have a row for (``compCapIndex`` 1-3)."""

_CLASSIC_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
_CLASSIC_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24,
                  0.12)
SPEEDS = {
    "ampere": {"intra": _CLASSIC_INTRA, "inter": _CLASSIC_INTER},
    "hopper": {"intra": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
               "inter": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
                         0.12)},
    "blackwell": {"intra": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
                  "inter": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                            3.0, 2.4, 1.2, 0.24, 0.12)},
}
"""The speeds (GB/s per channel) the search tries, fastest first: in one host (``intra``) and
with a network (``inter``), per generation (``speedArrayIntra``, ``sm90SpeedArrayInter``...)."""

MAX_RING_CHANNELS = 32
"""``MAXCHANNELS / 2``: the ring search's cap (``MAXCHANNELS`` is 64, ``device.h``)."""

MAX_NVLS_ARITY = 32
"""``NCCL_MAX_NVLS_ARITY``: NVLS takes one channel per GPU, at most this many."""


@dataclass(frozen=True)
class NcclTopology:
    """What NCCL's topology detection sees in one host: the GPUs' generation (one of
    :data:`ARCHITECTURES`), each GPU's NVLink (GB/s, as NCCL counts it), the path from a GPU to
    its own network port (GB/s), whether the host CPU is AMD's (NCCL's tuner charges it more per
    network step) and whether NVSwitch reduces (NVLink SHARP, NCCL's NVLS: Hopper and later)."""

    architecture: str
    nvlink_GBps: float
    nic_GBps: float
    amd_cpu: bool
    nvls: bool

    @property
    def compute_capability(self) -> int:
        """The major compute capability times ten (80, 90, 100), as NCCL compares it."""
        return {"ampere": 80, "hopper": 90, "blackwell": 100}[self.architecture]


@dataclass(frozen=True)
class Graph:
    """One algorithm's channels and the GB/s NCCL books per channel in a host and per port."""

    channels: int
    intra_GBps: float
    inter_GBps: float


def ring_channels(topology: NcclTopology, per_host: int, across: bool, speed: float) -> int:
    """How many ring channels of ``speed`` fit. In one host each channel takes ``speed`` of every
    GPU's NVLink each way; across hosts each port carries ``floor(port / speed)`` channels, and a
    channel's ``g - 1`` hops inside the host, spread over its ``g`` GPUs, must fit their NVLink."""
    if not across:
        return min(MAX_RING_CHANNELS, _fits(topology.nvlink_GBps, speed))
    channels = min(MAX_RING_CHANNELS, per_host * _fits(topology.nic_GBps, speed))
    while channels and per_host > 1 and math.ceil(channels * (per_host - 1) / per_host) * speed > topology.nvlink_GBps:
        channels -= 1
    return channels


def ring_graph(topology: NcclTopology, per_host: int, across: bool) -> Graph:
    """The ring's channels (``ncclTopoCompute`` with ``NCCL_TOPO_PATTERN_RING``): the first pass
    over the speeds, the channels doubled, then faster speeds with as many channels."""
    speeds = SPEEDS[topology.architecture]["inter" if across else "intra"]
    limit = topology.nic_GBps if across else topology.nvlink_GBps
    fits = partial(ring_channels, topology, per_host, across)
    found = _first_pass(speeds, limit, topology.nvlink_GBps, fits)
    graph = _doubled(found, topology, MAX_RING_CHANNELS)
    for speed in reversed([s for s in speeds if s > graph.inter_GBps]):
        if fits(speed) >= graph.channels:
            graph = Graph(graph.channels, speed, speed)
    return graph


def tree_graph(topology: NcclTopology, per_host: int, across: bool, ring: Graph) -> Graph:
    """The tree's channels: as many as the ring's (``init.cc`` sets both bounds to them), at the
    fastest speed they fit; then, across hosts, the speed inside the host raised while under
    twice the port's and the chain's NVLink holds it (``search.cc`` 1279-1283: NCCL's tuner uses
    it on two hosts, where the tree moves less over the network than over NVLink)."""
    speeds = SPEEDS[topology.architecture]["inter" if across else "intra"]
    limit = topology.nic_GBps if across else topology.nvlink_GBps
    total = topology.nvlink_GBps * (per_host / (per_host - 1) if per_host > 1 else 1.0)
    speed = next((s for s in speeds if s <= limit and s * ring.channels <= total
                  and ring_channels(topology, per_host, across, s) >= ring.channels), None)
    if speed is None:
        return ring
    graph = Graph(ring.channels, speed, speed)
    for faster in reversed([s for s in speeds if s > graph.intra_GBps]):
        if graph.intra_GBps >= 2 * graph.inter_GBps or not _chain_fits(topology, per_host, across, ring.channels, faster):
            break
        graph = Graph(graph.channels, faster, graph.inter_GBps)
    return graph


def nvls_graph(topology: NcclTopology, per_host: int, across: bool) -> Graph | None:
    """NVLink SHARP's channels (``NCCL_TOPO_PATTERN_NVLS``), None where NCCL has none (no NVLS,
    one GPU per host). One channel per GPU, each GPU the head of one: its NVLink carries
    ``speed`` for every other head and twice it for its own, ``(g + 1) speed`` in all. The
    booked speed through the port is raised afterwards while under twice the one inside the
    host (in one host nothing checks it; across hosts the port must hold it)."""
    if not topology.nvls or per_host < 2:
        return None
    channels = min(MAX_NVLS_ARITY, per_host)
    speeds = SPEEDS[topology.architecture]["inter" if across else "intra"]
    limit = topology.nic_GBps if across else topology.nvlink_GBps
    total = topology.nvlink_GBps * per_host / (per_host - 1)
    start = [s for s in speeds if s <= limit and s * (1 if across else channels) <= total]
    speed = next((s for s in start if (per_host + 1) * s <= topology.nvlink_GBps), None)
    if speed is None:
        return None
    inter = speed
    for faster in reversed([s for s in speeds if s > speed]):
        if inter >= 2 * speed or (across and faster > topology.nic_GBps):
            break
        inter = faster
    return Graph(channels, speed, inter)


def _fits(capacity_GBps: float, speed: float) -> int:
    return int(math.floor(capacity_GBps / speed + 1e-9))


def _first_pass(speeds: tuple[float, ...], limit: float, total: float, fits: Callable[[float], int]) -> Graph:
    """The search's first pass: from the fastest speed the path allows, down while the next is
    over half the best found, keeping the most bandwidth; done once it reaches ``total`` (with
    nothing found, NCCL falls back to one channel of 0.1 GB/s, search.cc 1289-1310)."""
    best: Graph | None = None
    for speed in speeds:
        if speed > limit:
            continue
        if best is not None and (speed / best.inter_GBps <= 0.49 or best.channels * best.inter_GBps >= total):
            break
        channels = fits(speed)
        if channels and (best is None or channels * speed > best.channels * best.intra_GBps):
            best = Graph(channels, speed, speed)
    return best if best is not None else Graph(1, 0.1, 0.1)  # NCCL's fallback: one channel, 0.1 GB/s


def _doubled(graph: Graph, topology: NcclTopology, max_channels: int) -> Graph:
    """``ncclTopoDupChannels``: twice the channels at half the speed, from 25 GB/s a channel
    (on Hopper and later not under 50 GB/s with more than 4 channels)."""
    if graph.intra_GBps < 25.0:
        return graph
    if topology.compute_capability > 80 and graph.intra_GBps < 50.0 and graph.channels > 4:
        return graph
    doubled = min(2 * graph.channels, max_channels)
    factor = math.ceil(doubled / graph.channels)
    return Graph(doubled, graph.intra_GBps / factor, graph.inter_GBps / factor)


def _chain_fits(topology: NcclTopology, per_host: int, across: bool, channels: int, speed: float) -> bool:
    """Whether ``channels`` tree chains of ``speed`` fit the GPUs' NVLink (one GPU: no chain)."""
    if per_host < 2:
        return True
    if not across:
        return channels * speed <= topology.nvlink_GBps
    return math.ceil(channels * (per_host - 1) / per_host) * speed <= topology.nvlink_GBps
