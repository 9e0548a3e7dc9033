"""What a target is made of, as one record: its device (a :class:`~shardscope.hardware.chips.Chip`:
memory, peaks, overheads) and the interconnect between its devices (one cost model:
:data:`~shardscope.hardware.fabrics.Fabric`), with the words and the layout facts the views need.

A :class:`~shardscope.targets.base.Target` owns its machine (``Target.machine(device_kind)``):
each TPU generation is one record (:mod:`shardscope.hardware.tpu_generations`), each GPU node one
(:mod:`shardscope.hardware.gpu_nodes`). A target's plan carries the record, so the consumers ask
it (``plan.machine.pads_to_tiles``) rather than reading the target's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.hardware.chips import Chip
from shardscope.hardware.fabrics import Fabric


@dataclass(frozen=True)
class Machine:
    """One target's machine: ``name`` (``v5e``, ``h100``), its ``chip`` and ``fabric`` (None where
    shardscope has no figures), what the program is compiled for in words (``the slice``, ``the
    GPUs``), whether its compiler lays arrays out padded to tiles (a TPU's ``memory_analysis()``
    counts the padding), and what of the chip's memory a program may use, in words."""

    name: str
    chip: Chip | None
    fabric: Fabric | None
    words: str
    pads_to_tiles: bool = False
    memory_words: str = ""
    """What the chip's usable memory is, where it is not the whole memory (a GPU's JAX pool)."""

    def describe(self, machine_shape: tuple[int, ...]) -> str:
        """The interconnect of a machine of ``machine_shape`` in words (empty without a model)."""
        return "" if self.fabric is None else self.fabric.describe(machine_shape)
