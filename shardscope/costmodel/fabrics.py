"""The interconnect each target has, from published figures: a TPU generation's ICI torus, a GPU
node's NVLink and the network between nodes.

A :class:`TorusFabric` is a TPU slice's inter-chip interconnect (ICI): chips on a 2-D (v5e, v6e)
or 3-D (v4, v5p) grid, each linked to its nearest neighbours, with wraparound links closing an
axis into a ring only where the generation provides them. A :class:`NodeFabric` is GPUs in hosts:
every GPU of a host reaches every other through NVSwitch at its NVLink bandwidth, and GPUs in
different hosts talk over one network port per GPU (the DGX systems' rail-optimised layout).
Every figure carries its source; where a vendor publishes no latency, the source says the value
is an assumption. :mod:`shardscope.costmodel.collective_times` puts a compiled collective on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

SCALING_BOOK_TPUS = "https://jax-ml.github.io/scaling-book/tpus"
"""'How to Scale Your Model', part 2: ICI bandwidth per link per generation (its interconnect
table), nearest-neighbour links, which slices have wraparound links."""

SCALING_BOOK_SHARDING = "https://jax-ml.github.io/scaling-book/sharding"
"""Part 3: the collectives' costs on a torus (all-gather V / (W_bidi * axes), all-reduce twice
that, all-to-all a quarter; about 1 us per ICI hop)."""

_NCCL_PROTOCOLS = "Hu et al., 'Demystifying NCCL', https://arxiv.org/abs/2507.04786"
_DGX_H100_H200 = ("https://docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-foundation-enterprise-ai/"
                  "latest/core-components.html")
_DGX_B200 = "https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html"
_DGX_A100 = "https://www.nvidia.com/en-us/data-center/dgx-a100/"

ICI_HOP_LATENCY_S = 1e-6
"""About 1 us per ICI hop, whatever the data volume (the scaling book's sharding chapter, 'A
note on ICI latency'; Google publishes no figure)."""


@dataclass(frozen=True)
class TorusFabric:
    """A TPU generation's ICI: ``link_Bps`` one way per link, ``hop_latency_s`` per hop, and
    the rule that says which axes of a slice close into rings (:meth:`wraps`)."""

    generation: str
    link_Bps: float
    hop_latency_s: float
    wraparound: str
    source: str

    def wraps(self, slice_shape: tuple[int, ...]) -> tuple[bool, ...]:
        """Which axes of a slice of ``slice_shape`` chips have wraparound links."""
        return _WRAPAROUND_RULES[self.wraparound](slice_shape)


@dataclass(frozen=True)
class NodeFabric:
    """GPUs in hosts: ``nvlink_Bps`` one way per GPU inside a host (through NVSwitch), and
    ``network_Bps`` one way per GPU between hosts (one port per GPU), each with its latency per
    algorithm step."""

    gpu: str
    nvlink_Bps: float
    nvlink_latency_s: float
    network_Bps: float
    network_latency_s: float
    source: str


def _full_axis_of_16(shape: tuple[int, ...]) -> tuple[bool, ...]:
    # v5e and v6e slices are cut from a 16x16 torus without optical switches: an axis wraps
    # only when it spans the whole pod's axis
    return tuple(size == 16 for size in shape)


def _whole_cubes(shape: tuple[int, ...]) -> tuple[bool, ...]:
    # v4 and v5p wraparounds come from the optical switches between 4x4x4 cubes: a slice made
    # of whole cubes wraps on every axis, a smaller one (2x2x1, 2x2x4) on none
    whole = len(shape) == 3 and all(size % 4 == 0 for size in shape)
    return tuple(whole for _ in shape)


_WRAPAROUND_RULES: dict[str, Callable[[tuple[int, ...]], tuple[bool, ...]]] = {
    "axis of 16": _full_axis_of_16,
    "whole 4x4x4 cubes": _whole_cubes,
}

_WRAP_SOURCE = (f"wraparound: v5e and v6e only on an axis of 16 chips, v4 and v5p on every axis of a slice made of "
                f"whole 4x4x4 cubes ({SCALING_BOOK_TPUS}, 'TPU Networking'; for v5p also "
                "https://cloud.google.com/tpu/docs/v5p: 4x4x4 and larger slices have a full 3D torus)")

TORUS_FABRICS: dict[str, TorusFabric] = {
    "v5e": TorusFabric("v5e", 4.5e10, ICI_HOP_LATENCY_S, "axis of 16",
                       f"bandwidth: 4.5e10 B/s one way per ICI link, 4 links per chip in a 2D torus ({SCALING_BOOK_TPUS}, "
                       "interconnect table; Google gives 400 GB/s bidirectional per chip, "
                       f"https://cloud.google.com/tpu/docs/v5e); latency: ~1 us per hop ({SCALING_BOOK_SHARDING}); "
                       + _WRAP_SOURCE),
    "v6e": TorusFabric("v6e", 9e10, ICI_HOP_LATENCY_S, "axis of 16",
                       f"bandwidth: 9e10 B/s one way per ICI link, 2D torus ({SCALING_BOOK_TPUS}, interconnect table); "
                       f"latency: ~1 us per hop ({SCALING_BOOK_SHARDING}); " + _WRAP_SOURCE),
    "v4": TorusFabric("v4", 4.5e10, ICI_HOP_LATENCY_S, "whole 4x4x4 cubes",
                      f"bandwidth: 4.5e10 B/s one way per ICI link, 6 links per chip in a 3D torus ({SCALING_BOOK_TPUS}, "
                      f"interconnect table); latency: ~1 us per hop ({SCALING_BOOK_SHARDING}); " + _WRAP_SOURCE),
    "v5p": TorusFabric("v5p", 9e10, ICI_HOP_LATENCY_S, "whole 4x4x4 cubes",
                       f"bandwidth: 9e10 B/s one way per ICI link, 6 links per chip in a 3D torus ({SCALING_BOOK_TPUS}, "
                       "interconnect table; Google gives 1200 GB/s bidirectional per chip, "
                       f"https://cloud.google.com/tpu/docs/v5p); latency: ~1 us per hop ({SCALING_BOOK_SHARDING}); "
                       + _WRAP_SOURCE),
}
"""Each TPU generation shardscope knows the ICI of."""

_TPU_KINDS = {"TPU v5 lite": "v5e", "TPU v5e": "v5e", "TPU v6 lite": "v6e", "TPU v6e": "v6e", "TPU v4": "v4",
              "TPU v5": "v5p", "TPU v5p": "v5p"}
"""The generation of each device kind JAX reports."""

_TPU_NAMES = {"v5e": "v5e", "v5litepod": "v5e", "v6e": "v6e", "v4": "v4", "v5p": "v5p"}
"""The generation of each topology name's prefix (``v5e:2x4``, ``v5litepod-8``)."""

_NVLINK_LATENCY = f"latency: ~2 us per step inside a host, NCCL's LL128 protocol ({_NCCL_PROTOCOLS})"
_NETWORK_LATENCY = f"~6 us per step between hosts, NCCL's Simple protocol over the network ({_NCCL_PROTOCOLS})"

NODE_FABRICS: dict[str, NodeFabric] = {
    "h100": NodeFabric("h100", 450e9, 2e-6, 50e9, 6e-6,
                       "NVLink: 900 GB/s bidirectional per H100 SXM GPU, halved for one direction "
                       "(https://www.nvidia.com/en-us/data-center/h100/); network: one 400 Gb/s ConnectX-7 port per GPU "
                       f"in a DGX H100 = 50 GB/s ({_DGX_H100_H200}); {_NVLINK_LATENCY}; {_NETWORK_LATENCY}"),
    "h200": NodeFabric("h200", 450e9, 2e-6, 50e9, 6e-6,
                       "NVLink: 900 GB/s bidirectional per H200 GPU, halved for one direction "
                       "(https://www.nvidia.com/en-us/data-center/h200/); network: one 400 Gb/s ConnectX-7 port per GPU "
                       f"in a DGX H200 = 50 GB/s ({_DGX_H100_H200}); {_NVLINK_LATENCY}; {_NETWORK_LATENCY}"),
    "a100": NodeFabric("a100", 300e9, 2e-6, 25e9, 6e-6,
                       "NVLink: 600 GB/s bidirectional per A100 SXM GPU, halved for one direction "
                       "(https://www.nvidia.com/en-us/data-center/a100/); network: one 200 Gb/s HDR ConnectX-6 port per "
                       f"GPU in a DGX A100 = 25 GB/s ({_DGX_A100}); {_NVLINK_LATENCY}; {_NETWORK_LATENCY}"),
    "b200": NodeFabric("b200", 900e9, 2e-6, 50e9, 6e-6,
                       "NVLink 5: 1.8 TB/s bidirectional per GPU, halved for one direction "
                       "(https://docs.nvidia.com/dgx/dgxgb200-user-guide/networking.html); network: one 400 Gb/s "
                       f"ConnectX-7 port per GPU in a DGX B200 = 50 GB/s ({_DGX_B200}); {_NVLINK_LATENCY}; "
                       f"{_NETWORK_LATENCY}"),
}
"""Each GPU shardscope ships a description of, in the node NVIDIA builds around it (a DGX)."""


def torus_fabric(device_kind: str, topology: str) -> TorusFabric | None:
    """The ICI of a TPU slice, by JAX's device kind (``TPU v5 lite``) or the topology's name
    (``v5e:2x4``); None for a generation shardscope has no figures for."""
    generation = _TPU_KINDS.get(device_kind.strip())
    if generation is None:
        match = re.match(r"^\s*([A-Za-z0-9]+?)(?:pod)?[=_:\- ]", topology)
        generation = _TPU_NAMES.get(match.group(1).lower()) if match else None
    return TORUS_FABRICS.get(generation) if generation else None


def node_fabric(target: str) -> NodeFabric | None:
    """The NVLink and network of ``gpu:NAME:...`` (None for a GPU described by the user's own file)."""
    platform, _, rest = target.partition(":")
    name = rest.rpartition(":")[0].strip().lower()
    return NODE_FABRICS.get(name) if platform == "gpu" else None
