"""NCCL 2.30.7's tuner for an all-reduce and a ring reduce-scatter, written out by hand from
src/graph/tuning.cc (commit 5067397c) for the tests: its constants typed in here, the channels
each test derives in its docstring from search.cc. Never read back from shardscope's tables.

Units are NCCL's: latency in us, bandwidth in GB/s; ``time_s`` converts.
"""

from __future__ import annotations

# tuning.cc 150-175: base latency and one step on NVLink / the network, (LL, LL128, Simple)
BASE = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
NVLINK = {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": 25.0, "nvls_tree": 25.0}
NET = {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls_tree": 20.9}
PROTOCOLS = ("LL", "LL128", "Simple")
# tuning.cc 620-627: the tree's correction by floor(log2(bytes / 64))
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}


def time_s(latency_us: float, nbytes: int, bandwidth_GBps: float) -> float:
    """ncclTopoGetAlgoTime: latency + nBytes / bandwidth."""
    return latency_us * 1e-6 + nbytes / (bandwidth_GBps * 1e9)


def correction(protocol: str, nbytes: int) -> float:
    size = (nbytes >> 6).bit_length() - 1
    return TREE_CORRECTION[protocol][size] if 0 <= size < 23 else 1.0


def ring_all_reduce(S: int, n: int, hosts: int, channels: int, GBps: float, ll_cap: float, ll128_cap: float,
                    net_overhead_us: float = 1.0) -> dict[str, float]:
    """The ring with each protocol: bus bandwidth channels x GBps (LL half of it under its cap,
    LL128 0.92 of it under channels x its cap per channel), times n / 2(n-1); latency
    base + (steps - inter) intra + inter net, inter = 2 (hosts - 1), intra at least the CPU's
    network overhead (3x Simple) across hosts; Simple across hosts 1.4x its latency (plateau)."""
    steps, inter = 2 * (n - 1), 2 * (hosts - 1)
    bus = {"LL": min(ll_cap, channels * GBps * 0.5), "LL128": min(0.92 * channels * GBps, channels * ll128_cap),
           "Simple": channels * GBps}
    times = {}
    for i, p in enumerate(PROTOCOLS):
        intra = NVLINK["ring"][i]
        if hosts > 1:
            intra = max(intra, net_overhead_us * (3 if p == "Simple" else 1))
        latency = BASE["ring"][i] + (steps - inter) * intra + inter * NET["ring"][i]
        if p == "Simple" and hosts > 1:
            latency *= 1.4
        times[p] = time_s(latency, S, bus[p] * n / steps)
    return times


def tree_all_reduce(S: int, n: int, hosts: int, channels: int, GBps: float, tree_cap: float, ll_cap: float,
                    ll128_cap: float) -> dict[str, float]:
    """The tree: bus min(0.92 channels x GBps, channels x its cap); LL that / 3.8 under the LL cap,
    LL128 that x (7/9 in one host, else 120/128) under channels x its cap; half of it, times the
    correction for the size; latency base + 2 ((n/hosts - 1) nvlink + floor(log2 hosts) net)."""
    bus = min(0.92 * channels * GBps, channels * tree_cap)
    by_protocol = {"LL": min(bus / 3.8, ll_cap),
                   "LL128": min(bus * (7 / 9 if hosts == 1 else 120 / 128), channels * ll128_cap), "Simple": bus}
    depth = hosts.bit_length() - 1
    return {p: time_s(BASE["tree"][i] + 2 * ((n // hosts - 1) * NVLINK["tree"][i] + depth * NET["tree"][i]), S,
                      by_protocol[p] * 0.5 * correction(p, S))
            for i, p in enumerate(PROTOCOLS)}


def nvls_all_reduce(S: int, n: int, channels: int, intra: float, inter: float, efficiency: float) -> float:
    """NVLS in one host: channels x min(intra x efficiency x (c-1)/c x 2, inter), times n / 2(n-1); 25 us."""
    bus = channels * min(intra * efficiency * (channels - 1) / channels * 2, inter)
    return time_s(NVLINK["nvls"], S, bus * n / (2 * (n - 1)))


def nvls_tree_all_reduce(S: int, n: int, hosts: int, channels: int, intra: float, inter: float, efficiency: float,
                         cap: float) -> float:
    """NVLS tree across hosts: channels x min(intra x efficiency x (c-1)/c x 2, inter x (2 on two
    hosts), its cap per channel), times n / 2(n-1); 25 + 2 floor(log2 hosts) x 20.9 us."""
    bus = channels * min(intra * efficiency * (channels - 1) / channels * 2, inter * (2 if hosts <= 2 else 1), cap)
    depth = hosts.bit_length() - 1
    return time_s(NVLINK["nvls_tree"] + 2 * depth * NET["nvls_tree"], S, bus * n / (2 * (n - 1)))
