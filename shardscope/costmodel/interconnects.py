"""Interconnects to project onto: published presets, and links the user describes.

A :class:`Link` is the two numbers of the alpha-beta model: ``latency_s`` (alpha, paid once per
ring step) and ``bandwidth_Bps`` (one direction, per device). Every preset says where its numbers
come from; where a vendor publishes no latency, the source says the value is an assumption.

A TPU slice has no preset: its ICI is a torus whose cost depends on which axes a group spans
(``--target tpu:TOPOLOGY`` costs each collective on it, :mod:`shardscope.hardware.fabrics`); a
flat ring at the chip's whole ICI bandwidth is 5x faster than a measured v5e all-gather
(:mod:`shardscope.hardware.tpu_generations`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from shardscope.errors import SettingsError
from shardscope.costmodel.quantities import TIME_UNITS, parse_rate
from shardscope.engine.hlo.roofline import seconds_words
from shardscope.hardware.gpu_nodes import GPU_NODES, H100_NVLINK

NCCL_PERFORMANCE = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"
"""Where the ring formulas (and the bus-bandwidth factors 2(n-1)/n and (n-1)/n) come from."""

_NCCL_PROTOCOLS = "Hu et al., 'Demystifying NCCL', https://arxiv.org/abs/2507.04786"
_H100 = "https://www.nvidia.com/en-us/data-center/h100/"
_H100_NODE = next(node for node in GPU_NODES if node.name == "h100")


@dataclass(frozen=True)
class Link:
    """One interconnect: per-device one-way bandwidth, per-step latency, and their source."""

    name: str
    bandwidth_Bps: float
    latency_s: float
    source: str
    description: str = ""

    def to_json(self) -> dict:
        """The ``presets --json`` object of this link."""
        return asdict(self)


PRESETS: tuple[Link, ...] = (
    Link(
        "nvlink-h100", _H100_NODE.fabric.nvlink_Bps, 2e-6,
        f"bandwidth: NVLink {H100_NVLINK}; "
        f"latency: ~2 us per hop for NCCL's LL128 protocol ({_NCCL_PROTOCOLS})",
        "8 H100 SXM GPUs in one node over NVLink 4 / NVSwitch",
    ),
    Link(
        "pcie5", 64e9, 2e-6,
        f"bandwidth: PCIe Gen5 x16 128 GB/s bidirectional (H100 PCIe, {_H100}), halved for one direction; "
        f"latency: ~2 us per hop, NCCL LL128 ({_NCCL_PROTOCOLS})",
        "GPUs in one host talking over PCIe Gen5 x16",
    ),
    Link(
        "ib-ndr", 50e9, 6e-6,
        "bandwidth: InfiniBand NDR 400 Gb/s per port = 50 GB/s (IBTA NDR; NVIDIA ConnectX-7, "
        "https://www.nvidia.com/en-us/networking/ethernet/connectx-7/); "
        f"latency: ~6 us per hop, NCCL Simple protocol across the network ({_NCCL_PROTOCOLS})",
        "one NDR InfiniBand port per device, between hosts",
    ),
    Link(
        "dcn-100g", 12.5e9, 10e-6,
        "bandwidth: 100 Gb/s Ethernet NIC = 12.5 GB/s (a Cloud TPU v5e host has 2 x 100 Gbps NICs, "
        "https://cloud.google.com/tpu/docs/v5e); latency: assumed 10 us per hop for TCP inside a data centre",
        "hosts over a 100 Gb/s data-centre network",
    ),
)
"""The presets ``--project`` and ``shardscope presets`` know, fastest first."""

MAX_PROJECTED_DEVICES = 100_000
"""The most devices ``--project PRESET:DEVICES`` puts in one ring: the largest clusters hold about
100,000 accelerators, and a flat ring over more is not a model of any machine."""

CUSTOM_LINK_NAME = "link"
"""The name ``--project`` uses for the link given with ``--link BW,LATENCY``."""


def preset(name: str) -> Link:
    """The preset called ``name``; :class:`SettingsError` naming the presets otherwise."""
    for link in PRESETS:
        if link.name == name:
            return link
    raise SettingsError(
        f"no interconnect preset {name!r}.",
        f"use one of {', '.join(p.name for p in PRESETS)} (see `shardscope presets`), or --link BW,LATENCY; "
        "a TPU slice's ICI is costed with --target tpu:TOPOLOGY (shardscope presets --targets)",
    )


_BANDWIDTH_UNITS = {
    "b/s": 1, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12,
    "kib/s": 2**10, "mib/s": 2**20, "gib/s": 2**30, "tib/s": 2**40,
    "bps": 1 / 8, "kbps": 1e3 / 8, "mbps": 1e6 / 8, "gbps": 1e9 / 8, "tbps": 1e12 / 8,
}


def parse_link(text: str) -> Link:
    """``--link BW,LATENCY``: ``25GB/s,5us``, ``400Gb/s,2us``, ``25e9,5e-6`` (bytes/s, seconds)."""
    parts = text.split(",")
    hint = ("write --link BW,LATENCY, e.g. --link 25GB/s,5us or --link 400Gbps,2us (plain numbers: B/s and s); "
            "bandwidth units B/s, kB/s ... TB/s, KiB/s ... TiB/s, b/s or bps ... Tbps; latency units s, ms, us, ns")
    if len(parts) != 2:
        raise SettingsError(f"--link {text!r} is not BW,LATENCY.", hint)
    bandwidth = parse_rate(parts[0], _BANDWIDTH_UNITS, "b/s", "--link bandwidth", hint)
    latency = parse_rate(parts[1], TIME_UNITS, "s", "--link latency", hint, allow_zero=True)
    return Link(CUSTOM_LINK_NAME, bandwidth, latency, f"given on the command line: --link {text}")


def parse_project(text: str, custom: Link | None) -> tuple[Link, int | None]:
    """``--project NAME[:DEVICES]``: the link and the device count (``None``: the analysed one).

    ``NAME`` is a preset, or ``link`` for the ``--link`` values (``custom``).
    """
    name, _, devices_text = text.partition(":")
    devices = None
    if devices_text:
        if not devices_text.isdigit() or int(devices_text) < 2:
            raise SettingsError(
                f"--project {text!r}: {devices_text!r} is not a device count of at least 2.",
                "write --project PRESET:DEVICES, e.g. --project nvlink-h100:8",
            )
        devices = int(devices_text)
        if devices > MAX_PROJECTED_DEVICES:
            raise SettingsError(
                f"--project {text!r}: {devices:,} devices is more than the {MAX_PROJECTED_DEVICES:,} a projection "
                "takes (one ring over every device; no machine has more accelerators in one collective).",
                f"project onto at most {MAX_PROJECTED_DEVICES:,} devices, e.g. --project {name or 'PRESET'}:1024",
            )
    if name == CUSTOM_LINK_NAME:
        if custom is None:
            raise SettingsError("--project link needs --link BW,LATENCY.", "e.g. --link 25GB/s,5us --project link:16")
        return custom, devices
    return preset(name), devices


def format_bandwidth(bandwidth_Bps: float) -> str:
    """``450 GB/s``, ``12.5 GB/s``, ``800 MB/s``."""
    for scale, unit in ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if bandwidth_Bps >= scale:
            return f"{bandwidth_Bps / scale:.4g} {unit}"
    return f"{bandwidth_Bps:.4g} B/s"


def format_seconds(seconds: float) -> str:
    """``2 us``, ``1.25 ms``, ``3.2 s``: four significant digits."""
    return seconds_words(seconds, digits=4)
