"""Every TPU generation shardscope knows, one record each: what JAX and libtpu call it, the chip
configuration libtpu sets on its hosts, its chip (memory, peaks: :data:`shardscope.hardware.chips.TPU_CHIPS`,
the compute table's row) and its ICI (one cost model: :class:`~shardscope.hardware.fabrics.TorusFabric`).

A new generation is one record here (and its chip's row in the compute table). Every figure says
where it comes from.

v5e's ICI is 45 GB/s one way per link on a 2D torus (the scaling book's interconnect table), not
one 200 GB/s ring per chip (Google's 400 GB/s bidirectional per chip, halved), because that is
what published measurements match: the scaling book's measured all-gather over 4 chips of a v5e
8x4 (34 MB in bfloat16, no wraparound) took 680 us, where the torus gives 3/4 x 34e6 / 4.5e10 =
560 us (0.82x of the measurement) and the 200 GB/s ring 3/4 x 34e6 / 2e11 + 3 us = 130 us (5.2x
too fast).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardscope.hardware.chips import TPU_CHIPS, Chip
from shardscope.hardware.fabrics import ICI_HOP_LATENCY_S, SCALING_BOOK_SHARDING, SCALING_BOOK_TPUS, WRAP_SOURCE, TorusFabric
from shardscope.hardware.machines import Machine

_LATENCY = f"latency: ~1 us per hop ({SCALING_BOOK_SHARDING}, 'A note on ICI latency')"


@dataclass(frozen=True)
class TpuGeneration:
    """One TPU generation: ``device_kinds`` (what JAX's devices report, ``TPU v5 lite``),
    ``topology_names`` (what a topology name starts with, ``v5e``, ``v5litepod``), the
    ``chip_config`` libtpu sets on its hosts (None: libtpu's default), its ``chip`` and its ``ici``."""

    name: str
    device_kinds: tuple[str, ...]
    topology_names: tuple[str, ...]
    chip: Chip | None
    ici: TorusFabric
    chip_config: str | None = None

    def machine(self) -> Machine:
        """The machine of a slice of this generation."""
        return Machine(self.name, self.chip, self.ici, "the slice", pads_to_tiles=True)


def _ici(generation: str, link_Bps: float, wraparound: str, source: str) -> TorusFabric:
    """A generation's ICI: one way per link, ~1 us per hop, the rule of its wraparound links."""
    return TorusFabric(generation, link_Bps, ICI_HOP_LATENCY_S, wraparound, f"bandwidth: {source}; {_LATENCY}; {WRAP_SOURCE}")


TPU_GENERATIONS: tuple[TpuGeneration, ...] = (
    TpuGeneration(
        "v5e", ("TPU v5 lite", "TPU v5e"), ("v5e", "v5litepod"), TPU_CHIPS["TPU v5 lite"],
        _ici("v5e", 4.5e10, "axis of 16", f"4.5e10 B/s one way per ICI link, 4 links per chip in a 2D torus ({SCALING_BOOK_TPUS}, "
                            "interconnect table; Google gives 400 GB/s bidirectional per chip, "
                            "https://cloud.google.com/tpu/docs/v5e); checked against the scaling book's measured "
                            f"all-gather on a v5e 8x4 ({SCALING_BOOK_SHARDING}, pop quiz 2: 680 us measured, 560 us "
                            "from this figure)")),
    TpuGeneration(
        "v6e", ("TPU v6 lite", "TPU v6e"), ("v6e",), TPU_CHIPS["TPU v6 lite"],
        _ici("v6e", 9e10, "axis of 16", f"9e10 B/s one way per ICI link, 2D torus ({SCALING_BOOK_TPUS}, interconnect table)"),
        chip_config="megachip_tccontrol"),
    TpuGeneration(
        "v4", ("TPU v4",), ("v4",), TPU_CHIPS["TPU v4"],
        _ici("v4", 4.5e10, "whole 4x4x4 cubes", f"4.5e10 B/s one way per ICI link, 6 links per chip in a 3D torus ({SCALING_BOOK_TPUS}, "
                           "interconnect table)"),
        chip_config="megacore"),
    TpuGeneration(
        "v5p", ("TPU v5", "TPU v5p"), ("v5p",), TPU_CHIPS["TPU v5p"],
        _ici("v5p", 9e10, "whole 4x4x4 cubes", f"9e10 B/s one way per ICI link, 6 links per chip in a 3D torus ({SCALING_BOOK_TPUS}, "
                          "interconnect table; Google gives 1200 GB/s bidirectional per chip, "
                          "https://cloud.google.com/tpu/docs/v5p)"),
        chip_config="megachip_tccontrol"),
)
"""Each TPU generation shardscope has figures for (``chip_config``: as JAX's own AOT tests match
it; without it a v4 topology lists each TensorCore as a device, two per chip)."""

_TOPOLOGY_PREFIX = re.compile(r"^\s*([A-Za-z0-9]+)[=_:\- ]")


def generation_of(device_kind: str, topology: str = "") -> TpuGeneration | None:
    """The generation of a slice, by JAX's device kind (``TPU v5 lite``) or the topology's name
    (``v5e:2x4``, ``v5litepod-8``); None for one shardscope has no figures for."""
    for generation in TPU_GENERATIONS:
        if device_kind.strip() in generation.device_kinds:
            return generation
    match = _TOPOLOGY_PREFIX.match(topology)
    prefix = match.group(1).lower() if match else ""
    return next((g for g in TPU_GENERATIONS if prefix and prefix in g.topology_names), None)


def chip_config(device_kind: str) -> str | None:
    """The chip configuration libtpu sets on live hosts of ``device_kind`` (None: its default)."""
    generation = generation_of(device_kind)
    return None if generation is None else generation.chip_config
