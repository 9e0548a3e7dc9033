"""Every TPU generation shardscope knows, one record each: what JAX and libtpu call it (its
device kinds, its topology names), the chip configuration libtpu sets on its hosts, its chip
(memory, peaks, bandwidth: :func:`~shardscope.hardware.chips.tpu_chip`) and its ICI (one cost
model: :class:`~shardscope.hardware.fabrics.TorusFabric`).

A new generation is one record here and nothing else (``docs/contributing.md``); every lookup of a
TPU by its device kind or its name is :func:`generation_of` (``tests/test_hardware_catalogue.py``
fails on a device kind written anywhere else). Every figure says where it comes from.

v5e's ICI is 45 GB/s one way per link on a 2D torus (the scaling book's interconnect table), not
one 200 GB/s ring per chip (Google's 400 GB/s bidirectional per chip, halved), because that is
what published measurements match: the scaling book's measured all-gather over 4 chips of a v5e
8x4 (34 MB in bfloat16, no wraparound) took 680 us, where the torus gives 3/4 x 34e6 / 4.5e10 =
560 us (0.82x of the measurement) and the 200 GB/s ring 3/4 x 34e6 / 2e11 + 3 us = 130 us (5.2x
too fast).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from shardscope.hardware.chips import Chip, tpu_chip
from shardscope.hardware.fabrics import ICI_HOP_LATENCY_S, SCALING_BOOK_SHARDING, SCALING_BOOK_TPUS, WRAP_SOURCE, TorusFabric
from shardscope.hardware.machines import Machine

_V4 = "https://cloud.google.com/tpu/docs/v4"
_V5E = "https://cloud.google.com/tpu/docs/v5e"
_V5P = "https://cloud.google.com/tpu/docs/v5p"
_V6E = "https://cloud.google.com/tpu/docs/v6e"
_2D_SLICES = {1: "1x1", 2: "1x2", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
"""The slice of each chip count of a 2D generation (v5e, v6e), as Cloud TPU names them."""
_LATENCY = f"latency: ~1 us per hop ({SCALING_BOOK_SHARDING}, 'A note on ICI latency')"


@dataclass(frozen=True)
class TpuGeneration:
    """One TPU generation: ``device_kinds`` (what JAX's devices report, ``TPU v5 lite``),
    ``topology_names`` (what a topology name starts with, ``v5e``, ``v5litepod``), the
    ``chip_config`` libtpu sets on its hosts (None: libtpu's default), its ``chip``, its ``ici``
    and the ``slices`` Cloud TPU names by their chip count (``{8: "2x4"}``: the ``--target`` of a
    profile's run; empty where a count names no one slice)."""

    name: str
    device_kinds: tuple[str, ...]
    topology_names: tuple[str, ...]
    chip: Chip
    ici: TorusFabric
    chip_config: str | None = None
    slices: Mapping[int, str] = field(default_factory=dict)

    def machine(self) -> Machine:
        """The machine of a slice of this generation."""
        return Machine(self.name, self.chip, self.ici, "the slice", pads_to_tiles=True)


def _ici(generation: str, link_Bps: float, wraparound: str, source: str) -> TorusFabric:
    """A generation's ICI: one way per link, ~1 us per hop, the rule of its wraparound links."""
    return TorusFabric(generation, link_Bps, ICI_HOP_LATENCY_S, wraparound, f"bandwidth: {source}; {_LATENCY}; {WRAP_SOURCE}")


V5E = TpuGeneration(
    "v5e", ("TPU v5 lite", "TPU v5e"), ("v5e", "v5litepod"),
    tpu_chip("v5e", memory_gib=16, usable_gib=15.75, bandwidth=819e9, bf16=197e12, int8=394e12,
             source=f"{_V5E}: 16 GB HBM2 at 819 GB/s, 197 TFLOPS bf16, 394 TOPS int8", measured_on=None),
    _ici("v5e", 4.5e10, "axis of 16", f"4.5e10 B/s one way per ICI link, 4 links per chip in a 2D torus ({SCALING_BOOK_TPUS}, "
                        "interconnect table; Google gives 400 GB/s bidirectional per chip, "
                        f"{_V5E}); checked against the scaling book's measured "
                        f"all-gather on a v5e 8x4 ({SCALING_BOOK_SHARDING}, pop quiz 2: 680 us measured, 560 us "
                        "from this figure)"),
    slices=_2D_SLICES)
"""v5e: the chip whose overheads and unit rates were measured here; the other generations' are scaled from its."""

TPU_GENERATIONS: tuple[TpuGeneration, ...] = (
    V5E,
    TpuGeneration(
        "v6e", ("TPU v6 lite", "TPU v6e"), ("v6e",),
        tpu_chip("v6e", memory_gib=32, usable_gib=31.25, bandwidth=1640e9, bf16=918e12, int8=1836e12,
                 source=f"{_V6E}: 32 GB HBM, 1,640 GB/s, 918 TFLOPS bf16, 1,836 TOPS int8", measured_on=V5E.chip),
        _ici("v6e", 9e10, "axis of 16", f"9e10 B/s one way per ICI link, 2D torus ({SCALING_BOOK_TPUS}, interconnect table)"),
        chip_config="megachip_tccontrol", slices=_2D_SLICES),
    TpuGeneration(
        "v4", ("TPU v4",), ("v4",),
        tpu_chip("v4", memory_gib=32, usable_gib=30.75, bandwidth=1200e9, bf16=275e12, int8=275e12,
                 source=f"{_V4}: 32 GiB HBM2, 1,200 GB/s, 275 TFLOPS bf16 and int8", measured_on=V5E.chip),
        _ici("v4", 4.5e10, "whole 4x4x4 cubes", f"4.5e10 B/s one way per ICI link, 6 links per chip in a 3D torus ({SCALING_BOOK_TPUS}, "
                           "interconnect table)"),
        chip_config="megacore"),
    TpuGeneration(
        "v5p", ("TPU v5", "TPU v5p"), ("v5p",),  # libtpu calls a v5p chip "TPU v5"
        tpu_chip("v5p", memory_gib=96, usable_gib=95.74, bandwidth=2765e9, bf16=459e12, int8=918e12,
                 source=f"{_V5P}: 95 GB HBM2e (libtpu lets a program use 95.74 GiB: 96 GiB on the chip), 2,765 GB/s, "
                        "459 TFLOPS bf16, 918 TOPS int8", measured_on=V5E.chip),
        _ici("v5p", 9e10, "whole 4x4x4 cubes", f"9e10 B/s one way per ICI link, 6 links per chip in a 3D torus ({SCALING_BOOK_TPUS}, "
                          "interconnect table; Google gives 1200 GB/s bidirectional per chip, "
                          f"{_V5P})"),
        chip_config="megachip_tccontrol"),
)
"""Each TPU generation shardscope has figures for (``chip_config``: as JAX's own AOT tests match
it; without it a v4 topology lists each TensorCore as a device, two per chip)."""

_TOPOLOGY_PREFIX = re.compile(r"^\s*([A-Za-z0-9]+)[=_:\- ]")


def generation_of(device_kind: str, topology: str = "") -> TpuGeneration | None:
    """The generation of a slice, by JAX's device kind (``TPU v5 lite``, in any case: a profile
    writes ``TPU v5 Lite``) or the topology's name (``v5e:2x4``, ``v5litepod-8``); None for one
    shardscope has no figures for. The one lookup of a TPU: the targets', the step estimate's
    chip by name (:func:`shardscope.hardware.catalogue.chip_named`) and a profile's
    (:func:`~shardscope.hardware.catalogue.chip_of`) read it."""
    kind = device_kind.strip().lower()
    for generation in TPU_GENERATIONS:
        if kind in (k.lower() for k in generation.device_kinds):
            return generation
    match = _TOPOLOGY_PREFIX.match(topology)
    prefix = match.group(1).lower() if match else ""
    return next((g for g in TPU_GENERATIONS if prefix and prefix in g.topology_names), None)


def chip_config(device_kind: str) -> str | None:
    """The chip configuration libtpu sets on live hosts of ``device_kind`` (None: its default)."""
    generation = generation_of(device_kind)
    return None if generation is None else generation.chip_config
