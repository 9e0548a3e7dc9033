"""Every GPU node shardscope ships a description of, one record each: the node NVIDIA builds around
the GPU (a DGX) with its NVLink and its network ports (one cost model:
:class:`~shardscope.hardware.fabrics.NodeFabric`), and what of a GPU's memory a JAX process may use.

A new GPU is its description file (``gpu_descriptions/NAME.txtpb``, its memory and bandwidth)
and its record here (its published peaks, its node); a new vendor is its
:class:`~shardscope.targets.base.Target` and its records. Every list of the GPUs shardscope
describes is :data:`GPU_NODES`' (``tests/test_hardware_catalogue.py`` holds the description files
to it). Every figure says where it comes from.

**Two views of the links.** NCCL's collectives are costed as NCCL's tuner costs them, on the
node as its topology search sees it (:class:`~shardscope.hardware.nccl_search.NcclTopology`:
NVLink links times NCCL's figure per link, the PCIe path to each GPU's port, the CPU, NVLink
SHARP). The all-to-all and the sends, which NCCL's tuner does not cost, take the links as measured:
NVLink's line rate one way, and per network port what NCCL reaches, as NVIDIA's maintainers
measure it: 46 GB/s per 400 Gb/s NIC (the low end of their 46-48 GB/s), 24 GB/s per 200 Gb/s NIC.

**What a JAX process may use** of a GPU's memory: XLA's allocator takes ``XLA_PYTHON_CLIENT_MEM_FRACTION``
(or ``XLA_CLIENT_MEM_FRACTION``) of it, 75% by default, whether it preallocates it or grows to it
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``: "XLA backend will use up to N bytes"); only
``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` allocates from the whole memory as needed
(:data:`JAX_GPU_MEMORY`, :data:`XLA_BFC_POOL`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from shardscope.hardware.chips import Chip, gpu_chip
from shardscope.hardware.fabrics import NodeFabric
from shardscope.hardware.fit import gib
from shardscope.hardware.machines import Machine
from shardscope.hardware.nccl import NCCL_812, NCCL_TESTS_290, NCCL_TUNING
from shardscope.hardware.nccl_search import SEARCH, NcclTopology

DESCRIPTIONS = Path(__file__).resolve().parent.parent / "gpu_descriptions"
"""shardscope's own GPU descriptions, one ``NAME.txtpb`` per record of :data:`GPU_NODES`."""

JAX_GPU_MEMORY = "https://docs.jax.dev/en/latest/gpu_memory_allocation.html"
XLA_BFC_POOL = ("openxla/xla xla/pjrt/gpu/gpu_helpers.cc, CreateBFCAllocator: a pool of total_memory * memory_fraction "
                "bytes, preallocated or grown to; jaxlib/xla_client.py reads the variables")
DEFAULT_MEMORY_FRACTION = 0.75
"""What JAX lets XLA's GPU allocator take of a GPU's memory by default (:data:`JAX_GPU_MEMORY`)."""

_DGX_H100_H200 = ("https://docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-foundation-enterprise-ai/"
                  "latest/core-components.html")
_DGX_B200 = "https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html"
_DGX_A100 = "https://www.nvidia.com/en-us/data-center/dgx-a100/"
_PROTOCOLS = (f"collectives: NCCL's tuner, each algorithm's and protocol's latency and bandwidth on the channels its search lays "
              f"on the node "
              f"({NCCL_TUNING}; {SEARCH})")
_PCIE_GEN5 = "PCIe Gen5 x16 to each port: 48 GB/s as NCCL counts it (16 lanes x 240 / 80, topo.cc 554, 657)"
_PCIE_GEN4 = "PCIe Gen4 x16 to each port: 24 GB/s as NCCL counts it (16 lanes x 120 / 80, topo.cc 553, 657)"
_INTEL = "Intel x86 hosts: 1 us of network overhead per step in NCCL's tuner"


_H100 = "https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_A100 = "https://www.nvidia.com/en-us/data-center/a100/"
_B200 = ("https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200: 8 GPUs, 36 PFLOPS FP16/BF16 tensor core with "
         "sparsity, 18 PFLOPS TF32 and 72 PFLOPS FP8 / 72 POPS INT8 with sparsity, 600 TFLOPS FP32 (no sparsity "
         "there); per GPU and dense: half of one eighth for the tensor core types, one eighth for FP32)")
_HOPPER_PEAKS = {"bf16": 989e12, "f16": 989e12, "tf32": 494e12, "fp8": 1979e12, "int8": 1979e12, "f32": 67e12,
                 "default": 67e12}
_HOPPER_WORDS = ("989 TFLOPS BF16/FP16 tensor core, 494 TFLOPS TF32, 1,979 TFLOPS FP8, 1,979 TOPS INT8, "
                 "67 TFLOPS FP32")
H100_NVLINK = f"900 GB/s bidirectional per H100 SXM GPU, halved for one direction ({_H100})"
"""Where H100's NVLink bandwidth, one way, comes from (its node's, and the ``nvlink-h100`` preset's)."""


@dataclass(frozen=True)
class GpuNode:
    """One GPU and its node: ``name`` (``h100``, the description's file name), its published dense
    ``peaks`` (by element type, as :attr:`~shardscope.hardware.chips.Chip.peak_flops`) with their
    ``peaks_source``, and its node's ``fabric``."""

    name: str
    fabric: NodeFabric
    peaks: dict[str, float]
    peaks_source: str


def _node(name: str, peaks: dict[str, float], peaks_source: str, nvlink_Bps: float, nic_Bps: float,
          nccl: NcclTopology, source: str) -> GpuNode:
    return GpuNode(name, NodeFabric(name, nvlink_Bps, nic_Bps, nccl, f"{source}; {_PROTOCOLS}"), peaks, peaks_source)


_NVLINK4_Bps = 450e9
"""NVLink 4 (H100, H200): 900 GB/s bidirectional per GPU, halved for one direction."""
_NIC_400G_Bps = 46e9
"""A 400 Gb/s ConnectX-7 port as NCCL reaches it (:data:`shardscope.hardware.nccl.NCCL_TESTS_290`)."""
_PCIE_GEN5_GBps, _PCIE_GEN4_GBps = 48.0, 24.0
"""A GPU's PCIe x16 path to its port as NCCL counts it (:data:`_PCIE_GEN5`, :data:`_PCIE_GEN4`)."""

_HOPPER = NcclTopology("hopper", nvlink_GBps=18 * 20.6, nic_GBps=_PCIE_GEN5_GBps, amd_cpu=False, nvls=True)
"""18 NVLinks of 20.6 GB/s as NCCL counts them (``SM90_NVLINK_BW``), a PCIe Gen5 port per GPU,
Intel CPUs, NVSwitch with NVLink SHARP."""

GPU_NODES: tuple[GpuNode, ...] = (
    _node("h100", _HOPPER_PEAKS, f"{_H100} (H100 SXM, dense, without sparsity): {_HOPPER_WORDS}",
          _NVLINK4_Bps, _NIC_400G_Bps, _HOPPER,
          f"NVLink: {H100_NVLINK}; network: one 400 Gb/s ConnectX-7 port per GPU in a DGX "
          f"H100 ({_DGX_H100_H200}), 46 GB/s per port as NCCL reaches it ({NCCL_TESTS_290}); NCCL's view: 18 NVLinks "
          f"of 20.6 GB/s (topo.h SM90_NVLINK_BW), {_PCIE_GEN5}, NVLink SHARP; {_INTEL} (Xeon 8480C)"),
    _node("h200", _HOPPER_PEAKS, f"{_H200} (H200 SXM, dense, without sparsity): {_HOPPER_WORDS}",
          _NVLINK4_Bps, _NIC_400G_Bps, _HOPPER,
          f"NVLink: 900 GB/s bidirectional per H200 GPU, halved for one direction ({_H200}); network: one 400 Gb/s "
          f"ConnectX-7 port per GPU in a DGX H200 ({_DGX_H100_H200}), 46 GB/s per port as NCCL reaches it "
          f"({NCCL_TESTS_290}); NCCL's view as H100's (the same NVLink 4 and NVSwitch); {_INTEL} (Xeon 8480C)"),
    _node("a100", {"bf16": 312e12, "f16": 312e12, "tf32": 156e12, "int8": 624e12, "f32": 19.5e12, "default": 19.5e12},
          f"{_A100} (A100 SXM 80GB, dense, without sparsity): 312 TFLOPS BF16/FP16 tensor core, 156 TFLOPS TF32, "
          "624 TOPS INT8, 19.5 TFLOPS FP32",
          300e9, 24e9, NcclTopology("ampere", nvlink_GBps=12 * 20.0, nic_GBps=_PCIE_GEN4_GBps, amd_cpu=True, nvls=False),
          f"NVLink: 600 GB/s bidirectional per A100 SXM GPU, halved for one direction ({_A100}); network: one 200 Gb/s "
          f"HDR ConnectX-6 port per GPU in a DGX A100 ({_DGX_A100}), 24 GB/s per port: 192 GB/s of all-reduce bus "
          f"bandwidth over 8 ({NCCL_812}); NCCL's view: 12 NVLinks of 20 GB/s (topo.h SM80_NVLINK_BW), {_PCIE_GEN4}, "
          "no NVLink SHARP; AMD x86 hosts (EPYC 7742): 2 us of network overhead per step in NCCL's tuner"),
    _node("b200", {"bf16": 2.25e15, "f16": 2.25e15, "tf32": 1.125e15, "fp8": 4.5e15, "int8": 4.5e15, "f32": 75e12,
                   "default": 75e12}, _B200,
          900e9, _NIC_400G_Bps, NcclTopology("blackwell", nvlink_GBps=18 * 40.1, nic_GBps=_PCIE_GEN5_GBps, amd_cpu=False,
                                             nvls=True),
          "NVLink 5: 1.8 TB/s bidirectional per GPU, halved for one direction "
          "(https://docs.nvidia.com/dgx/dgxgb200-user-guide/networking.html); network: one 400 Gb/s ConnectX-7 port "
          f"per GPU in a DGX B200 ({_DGX_B200}), 46 GB/s per port as NCCL reaches a 400 Gb/s NIC ({NCCL_TESTS_290}); "
          f"NCCL's view: 18 NVLinks of 40.1 GB/s (topo.h SM100_NVLINK_BW), {_PCIE_GEN5}, NVLink SHARP; {_INTEL} "
          "(Xeon 8570)"),
)
"""Each GPU shardscope ships a description of, in the node NVIDIA builds around it."""


def gpu_node(name: str) -> GpuNode | None:
    """The node of the GPU ``name`` (None for a GPU described by the user's own file)."""
    return next((node for node in GPU_NODES if node.name == name), None)


def gpu_names() -> tuple[str, ...]:
    """The GPUs shardscope has a description of: ``('a100', 'b200', 'h100', 'h200')``."""
    return tuple(sorted(node.name for node in GPU_NODES))


def described_chip(name: str, description: str) -> Chip:
    """The GPU ``name`` (a record's, or the stem of a user's file) from its ``description``'s text,
    with the published peaks of the GPU of that name where shardscope has them."""
    node = gpu_node(name)
    return gpu_chip(name, description, node.peaks if node else None, node.peaks_source if node else "")


def shipped_chip(name: str) -> Chip:
    """The GPU ``name`` of :func:`gpu_names`, from shardscope's own description of it."""
    return described_chip(name, (DESCRIPTIONS / f"{name}.txtpb").read_text())


@dataclass(frozen=True)
class MemoryAllowance:
    """What of a GPU's memory a JAX process may use: ``fraction`` of it (1.0: all), and why, in words."""

    fraction: float
    words: str


def memory_allowance(environ: Mapping[str, str] | None = None) -> MemoryAllowance:
    """The share of a GPU's memory XLA's allocator may take in a process with ``environ`` (this
    process's environment by default), as jaxlib reads it (the module's docstring)."""
    env = os.environ if environ is None else environ
    if env.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").strip().lower() == "platform":
        return MemoryAllowance(1.0, "XLA_PYTHON_CLIENT_ALLOCATOR=platform: no pool, the whole memory as needed")
    for name in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
        text = env.get(name, "").strip()
        if text:
            try:
                fraction = float(text)
            except ValueError:
                continue  # jaxlib refuses it when the process starts; the default stands here
            if 0 < fraction:
                return MemoryAllowance(min(fraction, 1.0), f"{name}={text}")
    preallocate = env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").strip()
    how = "grown to as needed (XLA_PYTHON_CLIENT_PREALLOCATE=false)" if preallocate in ("false", "False", "0") \
        else "preallocated"
    return MemoryAllowance(DEFAULT_MEMORY_FRACTION, f"JAX's default pool, 75% of the memory, {how}")


def with_allowance(chip: Chip, allowance: MemoryAllowance) -> Chip:
    """``chip`` with the bytes a JAX process may use as its usable memory, and where that comes from."""
    if chip.memory_bytes is None:
        return chip
    sources = dict(chip.sources, usable_memory_bytes=f"{allowance.words} ({JAX_GPU_MEMORY}; {XLA_BFC_POOL})")
    return replace(chip, usable_memory_bytes=int(chip.memory_bytes * allowance.fraction), sources=sources)


def gpu_machine(chip: Chip, node: GpuNode | None, environ: Mapping[str, str] | None = None) -> Machine:
    """The machine of a GPU target: its chip with what JAX may use of its memory, and its node's
    interconnect (``node`` None: a GPU described by the user's own file, no interconnect model)."""
    allowance = memory_allowance(environ)
    allowed = with_allowance(chip, allowance)
    words = "" if chip.memory_bytes is None else f"what a JAX process may use of the {gib(chip.memory_bytes)} GiB: {allowance.words}"
    return Machine(chip.name, allowed, None if node is None else node.fabric, "the GPUs", memory_words=words)
