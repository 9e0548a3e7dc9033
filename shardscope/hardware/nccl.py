"""A collective's time on GPUs as NCCL's tuner costs it and picks it: every algorithm it would
run there (ring, tree, NVLink SHARP's NVLS and NVLS tree, PAT), each with its three protocols
(LL, LL128, Simple), the fastest taken (``enqueue.cc`` ``topoGetAlgoInfo``).

**Bandwidth.** NCCL's topology search lays channels on the node (:mod:`shardscope.hardware.nccl_search`):
``c`` channels of ``b`` GB/s, ``b`` the speed inside a host on one or two hosts and the speed
through a port beyond. Its tuner (:data:`NCCL_TUNING`) starts each algorithm from ``c b`` (the
Simple protocol's bus bandwidth; NVLS from the switch's reduction, below) and corrects it:

- ring LL: ``min(LL cap, c b / 2)``; LL128: ``min(0.92 c b, c x its cap per channel)``;
- tree (all-reduce): ``min(0.92 c b, c x the tree's cap per channel)``, then LL ``min(/3.8, LL cap)``,
  LL128 ``min(x 7/9 in one host or 120/128, c x its cap)``; 0.85 of that with one GPU a host;
- NVLS: ``c min(b_intra x efficiency x (c-1)/c x 2, b_inter)`` for an all-reduce (the switch
  reduces while the GPUs pull: two operations at once), ``(g-1)/g`` instead of ``x 2`` for an
  all-gather or reduce-scatter; in one host only;
- NVLS tree (all-reduce across hosts): ``c min(b_intra x efficiency x (c-1)/c x 2, b_inter x (2 on
  two hosts), the cap per channel)``;
- PAT (all-gather and reduce-scatter with one GPU a host): ``0.75 c b``.

The bus bandwidth becomes the algorithm's (what ``nBytes`` moves at): times ``n / steps`` for the
ring, NVLS and NVLS tree all-reduce (``2(n-1)`` steps; ``n - 1`` for an all-gather or
reduce-scatter, ``n`` for a broadcast), times 1/2 for the tree; NVLS and PAT all-gathers and
reduce-scatters keep it. ``nBytes`` is ``S`` for an all-reduce and a broadcast, ``V = n S`` for an
all-gather, ``V = S`` for a reduce-scatter (the whole buffer, ``enqueue.h``).

**Latency** (us): a base per algorithm and protocol, plus per step on NVLink or the network
(``hwLat``): ring ``(steps - inter) x intra + inter x net``, ``inter`` the steps between hosts
(``2(h-1)`` for an all-reduce, ``h-1`` otherwise), ``intra`` at least the host CPU's network
overhead once the ring leaves the host (1 us Intel, 2 us AMD, three times for Simple); a
broadcast pays one step; tree ``2 ((n/h - 1) intra + floor(log2 h) net)``; NVLS 25; NVLS tree
``25 + 2 floor(log2 h) x 20.9``; PAT ``8 + floor(log2 h) x 14 / 3.5 + 2.8 n``. With one GPU a host
the network step is the tree's.

**The time** (``ncclTopoGetAlgoTime``): ``latency + nBytes / bandwidth``, where the tree's
bandwidth is first scaled by its correction for the size (a table per protocol, 64 B to 256 MiB:
0.4-1.0) and a ring all-reduce across hosts with Simple pays 1.4 times its latency (the ring's
plateau).

Left out: CollNet (in-network reduction, InfiniBand SHARP switches: off unless NCCL_COLLNET_ENABLE),
NCCL's per-op channel and thread tuning (it runs fewer channels on small sizes; the tuner's
time assumes them all), user buffer registration and the symmetric kernels, the tuner plugins
a cluster may load, and NVLS's support per data type (taken as supported: sum of f32, f16, bf16).

An all-to-all is not NCCL's tuner's: every pair at once, ``max(S (g-1)/n / B_nvlink, S (n-g)/n / B_port)``
plus one Simple step, each GPU's share for the other hosts over its own port (an all-to-all
cannot pool the ports: :data:`NCCL_TESTS_267`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.hardware.collective_models import ALL_TO_ALL, BROADCAST, GATHER, REDUCE, SCATTER, CollectiveTime
from shardscope.hardware.nccl_search import Graph, NcclTopology, nvls_graph, ring_graph, tree_graph

NCCL_TUNING = ("NVIDIA/nccl src/graph/tuning.cc at 5067397c2676d5aed50042fc39e5c8ee96eb0027 (NCCL 2.30.7): "
               "the tuner's constants (lines 138-212), its model (ncclTopoTuneModel, 243-438), the tree's correction "
               "and the ring's plateau (ncclTopoGetAlgoTime, 620-655); src/enqueue.cc 1989-2117 (which algorithms "
               "it costs and the fastest taken), "
               "https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/graph/tuning.cc")
NCCL_TESTS_212 = ("https://github.com/NVIDIA/nccl-tests/issues/212 (an NVIDIA maintainer, 8 H100: 'NCCL can get an "
                  "effective NVLink bandwidth of 370GB/s ... when running with NCCL_ALGO=RING'; 'allreduce uses NVLink "
                  "SHARP by default ... On 8 GPUs, you should reach a peak busBw of ~480GB/s')")
NCCL_TESTS_290 = ("https://github.com/NVIDIA/nccl-tests/issues/290 (an NVIDIA maintainer: 'For NDR @ 400Gbps you "
                  "should see 46-48GB/s per NIC')")
NCCL_812 = ("https://github.com/NVIDIA/nccl/issues/812 (an NVIDIA maintainer: 'On an Nvidia DGX-A100 system we have "
            "8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW'; two hosts' tree beats the NICs)")
NCCL_946 = ("https://github.com/NVIDIA/nccl/issues/946 (an NVIDIA maintainer: on two nodes 'the Tree performance can "
            "go up to ~2x the network speed')")
NCCL_1221 = ("https://github.com/NVIDIA/nccl/issues/1221 (8 H100 and 8 x 400 Gb/s RoCE per host, NCCL 2.19.3: "
             "all-reduce bus bandwidth 330 GB/s without NVLS, 430 GB/s with it, on 1 or 2 hosts; 320 GB/s on 4)")
NCCL_TESTS_267 = ("https://github.com/NVIDIA/nccl-tests/issues/267 (an NVIDIA maintainer: 'Alltoall cannot aggregate "
                  "the bandwidth of multiple NICs')")

PROTOCOLS = ("LL", "LL128", "Simple")
_P = {p: i for i, p in enumerate(PROTOCOLS)}

BASE_LATENCY_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "NVLS": (0.0, 0.0, 0.0),
                   "NVLS tree": (0.0, 0.0, 0.0), "PAT": (8.0, 8.0, 8.0)}
"""``baseLatencies`` (LL, LL128, Simple), tuning.cc 150-154."""

STEP_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "NVLS": (0.0, 0.0, 25.0), "NVLS tree": (0.0, 0.0, 25.0),
               "PAT": (0.0, 0.0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "PAT": (0.0, 0.0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "NVLS": (0.0, 0.0, 18.0), "NVLS tree": (0.0, 0.0, 20.9),
            "PAT": (0.0, 0.0, 14.0)},
}
"""``hwLatencies``: one step on NVLink, on PCIe (one GPU a host) and on the network, tuning.cc 158-175."""

LL_CAP_GBPS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
"""``llMaxBws`` [row][1, 2, more hosts]: in one host the row of the GPU (Volta, Ampere, Hopper,
Blackwell), across hosts the CPU's (Intel 0, AMD 1), tuning.cc 178-183."""

_GENERATION_ROW = {"ampere": 1, "hopper": 2, "blackwell": 3}
RING_LL128_CAP_GBPS = {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 36.7), "blackwell": (40.0, 40.0, 40.0)}
TREE_LL128_CAP_GBPS = {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
TREE_CAP_GBPS = {"ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
NVLS_TREE_CAP_GBPS = {"ampere": (24.0, 23.6, 17.8), "hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}
"""The caps per channel [1, 2, more hosts] (tuning.cc 184-211)."""

NVLS_EFFICIENCY = {"ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
"""``nvlsEfficiency``, tuning.cc 139-144."""

TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
"""``treeCorrectionFactor`` by ``floor(log2(nBytes / 64))``, tuning.cc 620-627."""

RING_PLATEAU = 1.4
"""The ring's plateau: a Simple ring all-reduce across hosts pays 1.4 times its latency (1.9
before Ampere), tuning.cc 647-650."""


@dataclass(frozen=True)
class NcclPath:
    """What a group's collective runs over: ``ranks`` GPUs on ``hosts`` hosts, at least ``per_host``
    in each, the node as NCCL's search sees it, and NVLink's and one port's bandwidth (one way,
    as measured) for the all-to-all and the sends NCCL's tuner does not cost."""

    ranks: int
    hosts: int
    per_host: int
    topology: NcclTopology
    nvlink_Bps: float
    nic_Bps: float

    @property
    def across(self) -> bool:
        """True when the group spans more than one host."""
        return self.hosts > 1

    @property
    def links(self) -> str:
        """``NVLink``, or ``NVLink and 8 network ports per host (2 hosts)``."""
        if not self.across:
            return "NVLink"
        return f"NVLink and {self.per_host} network port{'s' if self.per_host > 1 else ''} per host ({self.hosts} hosts)"

    @property
    def net_overhead_us(self) -> float:
        """The host CPU's overhead per network step NCCL's tuner charges (``getNetOverhead``)."""
        return 2.0 if self.topology.amd_cpu else 1.0


@dataclass(frozen=True)
class Candidate:
    """One algorithm and protocol as NCCL's tuner costs it: latency (s) and bandwidth (B/s) for ``nbytes``."""

    algorithm: str
    protocol: str
    latency_s: float
    bandwidth_Bps: float
    nbytes: int

    @property
    def seconds(self) -> float:
        """``latency + nBytes / bandwidth`` (``ncclTopoGetAlgoTime``)."""
        return self.latency_s + self.nbytes / self.bandwidth_Bps


def candidates(model: str, payload: int, path: NcclPath) -> list[Candidate]:
    """Every algorithm and protocol NCCL's tuner costs for one run of the collective (``model``:
    the JAX primitive whose cost it has), in NCCL's order (tree, ring, NVLS, NVLS tree, PAT)."""
    tuner = _Tuner(model, payload, path)
    return [c for c in tuner.tree() + tuner.ring() + tuner.nvls() + tuner.nvls_tree() + tuner.pat() if c.bandwidth_Bps > 0]


def nccl_time(model: str, payload: int, path: NcclPath) -> CollectiveTime:
    """One run of a collective as NCCL runs it: the fastest of its algorithms and protocols
    (the first of equals, as NCCL keeps it)."""
    if model in ALL_TO_ALL:
        return _all_to_all(payload, path)
    if model not in REDUCE | GATHER | SCATTER | BROADCAST:
        raise ValueError(f"no GPU model for {model!r}")
    best = min(candidates(model, payload, path), key=lambda c: c.seconds)
    wire = best.nbytes / best.bandwidth_Bps
    over = ("NVLink SHARP" + path.links.removeprefix("NVLink")) if best.algorithm.startswith("NVLS") else path.links
    return CollectiveTime(best.seconds, best.latency_s, wire, f"NCCL {best.algorithm} ({best.protocol}) over {over}",
                          path.ranks)


def send_latency_s(across_hosts: bool) -> float:
    """One Simple-protocol step of NCCL's ring: a point-to-point send's latency on the link."""
    return STEP_LATENCY_US["net" if across_hosts else "nvlink"]["ring"][_P["Simple"]] * 1e-6


def log2i(value: int) -> int:
    """NCCL's ``log2i``: the floor of the base-2 logarithm, -1 for 0."""
    return value.bit_length() - 1


def tree_correction(protocol: str, nbytes: int) -> float:
    """The tree's correction for ``nbytes`` (1 outside 64 B to 512 MiB)."""
    size = log2i(nbytes >> 6)
    return TREE_CORRECTION[protocol][size] if 0 <= size < 23 else 1.0


class _Tuner:
    """``ncclTopoTuneModel`` for one collective on one group: each algorithm's bandwidth and latency."""

    def __init__(self, model: str, payload: int, path: NcclPath) -> None:
        self.path, self.topology = path, path.topology
        n, h = path.ranks, path.hosts
        self.reduce, self.gather_or_scatter, self.broadcast = model in REDUCE, model in GATHER | SCATTER, model in BROADCAST
        self.nbytes = n * payload if model in GATHER else payload
        self.steps = 2 * (n - 1) if self.reduce else n if self.broadcast else n - 1
        self.hosts_index = min(h, 3) - 1
        self.ring_graph = ring_graph(self.topology, path.per_host, path.across)
        self.tree_graph = tree_graph(self.topology, path.per_host, path.across, self.ring_graph)
        self.nvls_graph = nvls_graph(self.topology, path.per_host, path.across)

    def _per_channel(self, graph: Graph) -> float:
        """The speed NCCL multiplies by the channels: inside the host on one or two hosts, else the port's."""
        return graph.intra_GBps if self.path.hosts <= 2 else graph.inter_GBps

    def _ll_cap(self) -> float:
        row = _GENERATION_ROW[self.topology.architecture] if not self.path.across else (1 if self.topology.amd_cpu else 0)
        return LL_CAP_GBPS[row][self.hosts_index]

    def _net_step_us(self, algorithm: str, protocol: str) -> float:
        one_per_host = self.path.ranks == self.path.hosts
        return STEP_LATENCY_US["net"]["tree" if one_per_host else algorithm][_P[protocol]]

    def _intra_hw(self) -> str:
        return "nvlink" if self.path.per_host > 1 else "pci"

    def _candidate(self, algorithm: str, protocol: str, latency_us: float, bus_GBps: float) -> Candidate:
        return Candidate(algorithm, protocol, latency_us * 1e-6, bus_GBps * 1e9, self.nbytes)

    def ring(self) -> list[Candidate]:
        graph, n = self.ring_graph, self.path.ranks
        found = []
        for p in PROTOCOLS:
            bus = graph.channels * self._per_channel(graph)
            if p == "LL":
                bus = min(self._ll_cap(), bus * 0.5)
            elif p == "LL128":
                bus = min(bus * 0.92, graph.channels * RING_LL128_CAP_GBPS[self.topology.architecture][self.hosts_index])
            found.append(self._candidate("ring", p, self._ring_latency_us(p), bus * n / self.steps))
        return found

    def _ring_latency_us(self, protocol: str) -> float:
        base = BASE_LATENCY_US["ring"][_P[protocol]]
        if self.broadcast:  # one step: NCCL's ring graphs on these nodes keep the same channels in every host
            hw = "net" if self.path.across else self._intra_hw()
            return base + STEP_LATENCY_US[hw]["ring"][_P[protocol]]
        intra = STEP_LATENCY_US[self._intra_hw()]["ring"][_P[protocol]]
        if self.path.across:
            intra = max(intra, self.path.net_overhead_us * (3 if protocol == "Simple" else 1))
        inter_steps = 0 if not self.path.across else (2 if self.reduce else 1) * (self.path.hosts - 1)
        latency = base + (self.steps - inter_steps) * intra + inter_steps * self._net_step_us("ring", protocol)
        if protocol == "Simple" and self.reduce and self.path.across and self._past_plateau():
            latency *= RING_PLATEAU
        return latency

    def _past_plateau(self) -> bool:
        """``nBytes / (nChannels * nRanks) >= 64``, with the communicator's channels (twice the ring's, at most 64)."""
        return self.nbytes / (min(64, 2 * self.ring_graph.channels) * self.path.ranks) >= 64

    def tree(self) -> list[Candidate]:
        if not self.reduce:
            return []
        graph, arch, path = self.tree_graph, self.topology.architecture, self.path
        found = []
        for p in PROTOCOLS:
            bus = min(graph.channels * self._per_channel(graph) * 0.92, graph.channels * TREE_CAP_GBPS[arch][self.hosts_index])
            if p == "LL":
                bus = min(bus / 3.8, self._ll_cap())
            elif p == "LL128":
                share = 7 / 9 if not path.across else 120 / 128
                bus = min(bus * share, graph.channels * TREE_LL128_CAP_GBPS[arch][self.hosts_index])
            if path.across and path.per_host == 1:
                bus *= 0.85  # one GPU a host: NCCL's simple tree pattern
            latency = BASE_LATENCY_US["tree"][_P[p]] + 2 * (
                (path.ranks // path.hosts - 1) * STEP_LATENCY_US[self._intra_hw()]["tree"][_P[p]]
                + log2i(path.hosts) * self._net_step_us("tree", p))
            found.append(self._candidate("tree", p, latency, bus * 0.5 * tree_correction(p, self.nbytes)))
        return found

    def nvls(self) -> list[Candidate]:
        graph = self.nvls_graph
        if graph is None or self.path.across or self.broadcast or graph.channels < 2:
            return []
        per_host = self.path.per_host
        intra = graph.intra_GBps * NVLS_EFFICIENCY[self.topology.architecture] * (graph.channels - 1) / graph.channels
        intra *= 2.0 if self.reduce else (per_host - 1) / per_host
        bus = graph.channels * min(intra, graph.inter_GBps)
        bandwidth = bus * self.path.ranks / self.steps if self.reduce else bus
        return [self._candidate("NVLS", "Simple", STEP_LATENCY_US["nvlink"]["NVLS"][_P["Simple"]], bandwidth)]

    def nvls_tree(self) -> list[Candidate]:
        graph, arch = self.nvls_graph, self.topology.architecture
        if graph is None or not self.path.across or not self.reduce or graph.channels < 2:
            return []
        intra = graph.intra_GBps * NVLS_EFFICIENCY[arch] * (graph.channels - 1) / graph.channels * 2.0
        inter = graph.inter_GBps * (2 if self.path.hosts <= 2 else 1)
        bus = graph.channels * min(intra, inter, NVLS_TREE_CAP_GBPS[arch][self.hosts_index])
        if arch == "blackwell" and 0 <= log2i(self.nbytes >> 6) < 24:  # tuning.cc 643-646, x86 hosts
            bus *= TREE_CORRECTION["Simple"][log2i(self.nbytes >> 6)]
        latency = (BASE_LATENCY_US["NVLS tree"][2] + STEP_LATENCY_US["nvlink"]["NVLS tree"][2]
                   + 2 * log2i(self.path.hosts) * self._net_step_us("NVLS tree", "Simple"))
        return [self._candidate("NVLS tree", "Simple", latency, bus * self.path.ranks / self.steps)]

    def pat(self) -> list[Candidate]:
        path = self.path
        if not self.gather_or_scatter or path.ranks != path.hosts:
            return []
        graph = self.tree_graph
        bus = graph.channels * self._per_channel(graph) * 0.75
        latency = (BASE_LATENCY_US["PAT"][2] + log2i(path.hosts) * self._net_step_us("PAT", "Simple") / 3.5
                   + path.ranks * 2.8)
        return [self._candidate("PAT", "Simple", latency, bus)]


def _all_to_all(payload: int, path: NcclPath) -> CollectiveTime:
    g, n = path.per_host, path.ranks
    wire = max(payload * (g - 1) / n / path.nvlink_Bps, payload * (n - g) / n / path.nic_Bps)
    latency = send_latency_s(path.across)
    return CollectiveTime(latency + wire, latency, wire, f"pairwise sends over {path.links}", n)
