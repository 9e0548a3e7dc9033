"""A collective's time on GPUs as NCCL runs it: its ring and tree, each protocol's latency and
bandwidth, over every rail between hosts.

**Bandwidth.** Inside a host every GPU reaches every other through NVSwitch at its NVLink
bandwidth ``B_nvlink``. Between hosts each GPU has a network port of its own (a DGX's rails), and
NCCL runs one channel per port, so a group with ``g`` GPUs in each host moves its bytes over
``g`` ports at once: the bus bandwidth is ``min(B_nvlink, g * B_nic)``, with ``B_nic`` what NCCL
reaches per port (NVIDIA's maintainers: 46-48 GB/s per 400 Gb/s NIC, so 2 DGX H100 reach ~370
GB/s of all-reduce bus bandwidth, :data:`NCCL_TESTS_290`; 192 GB/s over a DGX A100's 8 x 200 Gb/s,
:data:`NCCL_812`). An all-to-all cannot pool ports (:data:`NCCL_TESTS_267`): each GPU sends its
share to the other hosts over its own.

**Latency and protocols** (NCCL's tuner, :data:`NCCL_TUNING`, whose model this is). Each protocol
pays a base latency and a latency per algorithm step (on NVLink inside a host, on the network
between hosts), and moves the bus bandwidth times a factor: LL a quarter (a third for an all-gather
or reduce-scatter in one host: half of each 8-byte line is a flag), LL128 0.92 (0.7 with one GPU per
host), Simple all of it. For ``n`` ranks on ``h`` hosts (``g`` per host), ``S`` the per-device operand
bytes and ``V`` the bytes each device ends up with or starts from:

- ring all-reduce: ``2(n-1)`` steps, ``2h`` of them between hosts (none in one host):
  ``base + (steps - inter) * lat_nvlink + inter * lat_net + 2(n-1)/n * S / (bus * factor)``; between
  hosts a step inside one costs at least the CPU's network overhead (3x for Simple);
- ring all-gather (``V = n S``), reduce-scatter (``V = S``): ``n-1`` steps, ``h-1`` between hosts,
  ``(n-1)/n * V / (bus * factor)``;
- ring broadcast (JAX's ``pbroadcast``): ``n-1`` steps, ``h-1`` between hosts, ``S / (bus * factor)``
  (pipelined: every link carries the source's whole ``S``, NCCL's bus bandwidth equals its algorithm's);
- tree all-reduce (between hosts: a chain in each host, a binary tree between them):
  ``base + 2 ((g-1) lat_nvlink + floor(log2 h) lat_net) + 2 S / (0.92 bus * factor)``;
- all-to-all: every pair at once, ``max(S (g-1)/n / B_nvlink, S (n-g)/n / B_nic)`` plus one Simple step;
- the fastest algorithm and protocol is taken, as NCCL's tuner picks.

Left out of NCCL's tuner: its caps per channel (the protocols' and the tree's), the tree's
correction by size and the ring's plateau factor; on two hosts NCCL's tree can beat the rails'
bandwidth (:data:`NCCL_812`), which the tree here does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardscope.hardware.collective_models import ALL_TO_ALL, BROADCAST, GATHER, REDUCE, SCATTER, CollectiveTime

NCCL_TUNING = ("NVIDIA/nccl src/graph/tuning.cc (NCCL 2.19, baseLat and hwLat, the protocols' bandwidth factors), "
               "https://github.com/NVIDIA/nccl/blob/b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2/src/graph/tuning.cc")
NCCL_TESTS_290 = ("https://github.com/NVIDIA/nccl-tests/issues/290 (an NVIDIA maintainer: 'For NDR @ 400Gbps you "
                  "should see 46-48GB/s per NIC')")
NCCL_812 = ("https://github.com/NVIDIA/nccl/issues/812 (an NVIDIA maintainer: 'On an Nvidia DGX-A100 system we have "
            "8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW'; two hosts' tree beats the NICs)")
NCCL_TESTS_267 = ("https://github.com/NVIDIA/nccl-tests/issues/267 (an NVIDIA maintainer: 'Alltoall cannot aggregate "
                  "the bandwidth of multiple NICs')")

PROTOCOLS = ("LL", "LL128", "Simple")

BASE_LATENCY_S = {"ring": {"LL": 6.6e-6, "LL128": 14.0e-6, "Simple": 8.4e-6},
                  "tree": {"LL": 6.8e-6, "LL128": 14.0e-6, "Simple": 0.0}}
"""NCCL's ``baseLat`` (us in the source), per algorithm and protocol."""

STEP_LATENCY_S = {
    "nvlink": {"ring": {"LL": 0.6e-6, "LL128": 1.9e-6, "Simple": 3.4e-6},
               "tree": {"LL": 0.6e-6, "LL128": 1.25e-6, "Simple": 28e-6}},
    "net": {"ring": {"LL": 2.7e-6, "LL128": 4.0e-6, "Simple": 14.0e-6},
            "tree": {"LL": 5.0e-6, "LL128": 8.5e-6, "Simple": 28e-6}},
}
"""NCCL's ``hwLat``: the latency of one step on NVLink and on the network, per algorithm and protocol."""


@dataclass(frozen=True)
class NcclPath:
    """What a group's collective runs over: ``ranks`` GPUs on ``hosts`` hosts, at least ``per_host``
    in each, NVLink's and one port's bandwidth (one way) and the CPU's network overhead per step."""

    ranks: int
    hosts: int
    per_host: int
    nvlink_Bps: float
    nic_Bps: float
    net_overhead_s: float

    @property
    def across(self) -> bool:
        """True when the group spans more than one host."""
        return self.hosts > 1

    @property
    def bus_Bps(self) -> float:
        """The bus bandwidth of the Simple protocol: NVLink in one host, else NVLink or the group's
        ports per host (one per GPU, one NCCL channel each), the slower."""
        return min(self.nvlink_Bps, self.per_host * self.nic_Bps) if self.across else self.nvlink_Bps

    @property
    def links(self) -> str:
        """``NVLink``, or ``NVLink and 8 network ports per host (2 hosts)``."""
        if not self.across:
            return "NVLink"
        return f"NVLink and {self.per_host} network port{'s' if self.per_host > 1 else ''} per host ({self.hosts} hosts)"


def ring_factor(protocol: str, path: NcclPath, model: str) -> float:
    """The share of the bus bandwidth a protocol moves on NCCL's ring."""
    if protocol == "LL":
        return 1 / 4 if path.across or model in REDUCE else 1 / 3
    if protocol == "LL128":
        return 0.92 if path.ranks / path.hosts >= 2 else 0.7
    return 1.0


def tree_factor(protocol: str) -> float:
    """The share of the bus bandwidth a protocol moves on NCCL's tree (between hosts), its 0.92 included."""
    return 0.92 * {"LL": 1 / 3.8, "LL128": 120 / 128, "Simple": 1.0}[protocol]


def ring_latency_s(protocol: str, path: NcclPath, steps: int, inter_steps: int) -> float:
    """``base + (steps - inter) * lat_nvlink + inter * lat_net``; between hosts a step inside one
    costs at least the CPU's network overhead (three times it for Simple)."""
    intra = STEP_LATENCY_S["nvlink"]["ring"][protocol]
    if path.across:
        intra = max(intra, path.net_overhead_s * (3 if protocol == "Simple" else 1))
    inter = STEP_LATENCY_S["net"]["ring"][protocol]
    return BASE_LATENCY_S["ring"][protocol] + (steps - inter_steps) * intra + inter_steps * inter


def ring_times(model: str, payload: int, path: NcclPath) -> list[CollectiveTime]:
    """NCCL's ring with each protocol."""
    n, h = path.ranks, path.hosts
    if model in REDUCE:
        steps, inter, moved = 2 * (n - 1), (2 * h if path.across else 0), 2 * (n - 1) / n * payload
    elif model in GATHER:
        steps, inter, moved = n - 1, h - 1, (n - 1) / n * (n * payload)
    elif model in BROADCAST:
        steps, inter, moved = n - 1, h - 1, float(payload)
    else:
        steps, inter, moved = n - 1, h - 1, (n - 1) / n * payload
    return [_time(ring_latency_s(p, path, steps, inter), moved / (path.bus_Bps * ring_factor(p, path, model)),
                  f"NCCL ring ({p}) over {path.links}", n) for p in PROTOCOLS]


def tree_times(payload: int, path: NcclPath) -> list[CollectiveTime]:
    """NCCL's tree all-reduce between hosts with each protocol: a chain in each host, a binary
    tree between hosts, the bytes up and down (``2 S`` at the bus bandwidth)."""
    depth = int(math.floor(math.log2(path.hosts)))
    times = []
    for p in PROTOCOLS:
        latency = BASE_LATENCY_S["tree"][p] + 2 * ((path.per_host - 1) * STEP_LATENCY_S["nvlink"]["tree"][p]
                                                   + depth * STEP_LATENCY_S["net"]["tree"][p])
        times.append(_time(latency, 2 * payload / (path.bus_Bps * tree_factor(p)),
                           f"NCCL tree ({p}) over {path.links}", path.ranks))
    return times


def send_latency_s(across_hosts: bool) -> float:
    """One Simple-protocol step of NCCL's ring: a point-to-point send's latency on the link."""
    return STEP_LATENCY_S["net" if across_hosts else "nvlink"]["ring"]["Simple"]


def nccl_time(model: str, payload: int, path: NcclPath) -> CollectiveTime:
    """One run of a collective (``model``: the JAX primitive whose cost it has) as NCCL runs it:
    the fastest of its algorithms and protocols."""
    if model in ALL_TO_ALL:
        g, n = path.per_host, path.ranks
        wire = max(payload * (g - 1) / n / path.nvlink_Bps, payload * (n - g) / n / path.nic_Bps)
        return _time(send_latency_s(path.across), wire, f"pairwise sends over {path.links}", n)
    if model not in REDUCE | GATHER | SCATTER | BROADCAST:
        raise ValueError(f"no GPU model for {model!r}")
    candidates = ring_times(model, payload, path)
    if model in REDUCE and path.across:
        candidates += tree_times(payload, path)
    return min(candidates, key=lambda t: t.seconds)


def _time(latency: float, wire: float, algorithm: str, devices: int) -> CollectiveTime:
    return CollectiveTime(latency + wire, latency, wire, algorithm, devices)
