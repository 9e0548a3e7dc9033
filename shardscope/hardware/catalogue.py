"""Every chip shardscope has figures for, looked up one way: a TPU by its generation's record
(:mod:`shardscope.hardware.tpu_generations`), a GPU by its record and shardscope's description of
it (:mod:`shardscope.hardware.gpu_nodes`). The targets, the step estimate of a module's text
(``shardscope.estimate_module``'s chip) and a profile's chip all ask here.
"""

from __future__ import annotations

import re

from shardscope.hardware.chips import Chip
from shardscope.hardware.gpu_nodes import gpu_names, shipped_chip
from shardscope.hardware import tpu_generations
from shardscope.hardware.tpu_generations import generation_of


def chip_names() -> list[str]:
    """The chips :func:`chip_named` knows: the TPU generations, then the GPUs shardscope describes."""
    return sorted(generation.name for generation in tpu_generations.TPU_GENERATIONS) + list(gpu_names())


def chip_named(name: str) -> Chip | None:
    """The chip called ``name`` (in any case, spaces around it ignored): a TPU generation's
    (``v5e``) or a TPU's device kind (``TPU v5 lite``), or a GPU shardscope describes (``h100``);
    None for another name."""
    wanted = name.strip().lower()
    generation = next((g for g in tpu_generations.TPU_GENERATIONS if g.name == wanted), None) or generation_of(wanted)
    if generation is not None:
        return generation.chip
    return shipped_chip(wanted) if wanted in gpu_names() else None


def chip_of(device_kind: str) -> Chip | None:
    """The chip a device or a profile names (``TPU v5 lite``, ``TPU v5 Lite``; a GPU whose name holds
    one shardscope describes, ``NVIDIA H100 80GB HBM3``), None for one it has no figures for."""
    wanted = device_kind.strip().lower()
    if not wanted:
        return None
    generation = generation_of(wanted)
    if generation is not None:
        return generation.chip
    return next((shipped_chip(name) for name in gpu_names() if re.search(rf"\b{re.escape(name)}\b", wanted)), None)
