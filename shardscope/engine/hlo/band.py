"""Instructions of the kinds a chip's corpus measured outside the estimate's band, read from the module text.

The corpus (``tests/fixtures/tpu_corpus``) keeps a few programs the model leaves out of its band
(``checked.json``'s ``why_out_of_band``). A user's module holding an instruction of the same kind
may be as far off, so the estimate names it with the range the corpus measured
(:attr:`~shardscope.engine.hlo.roofline.StepEstimate.outside_band`). Each kind is a rule on one
instruction's text (a fusion's parts opened), stated in :data:`KINDS`; the corpus replay
(``benchmarks/tpu_corpus_report.py``) runs them over every stored module and keeps, per kind, the
measured / estimate ratios of the programs that hold it, in band or not.

A TPU writes a batched dot as a convolution: its batch dimensions become spatial dimensions
whose window covers the whole dimension, or a window dilated by its own size
(``window={size=8 stride=7 lhs_dilate=8}``). Such windows do not slide over their input, and
none of these rules takes them for a convolution's (the attention dots of the corpus run at
their estimate).
"""

from __future__ import annotations

import re

from shardscope.engine.hlo.flops import (OTHER_MEMORY, dim_labels, fused, in_tile_window_taps, int_attribute, operand_dims,
                                         window_dims)
from shardscope.engine.hlo.text import HloModule, Instruction

MATRIX_WIDTH = 128
"""A TPU matrix unit's width: a convolution with fewer input or output features fills part of it."""

MANY_ARRAYS = 50
"""How many arrays a call takes and returns together from which the host's share of it is flagged:
the corpus's calls of 60-960 arrays (clipping by global norm, calls of many small arrays) ran at
0.75-1.64x their estimate, those of 35 or fewer within the band."""

ON_CHIP_UPDATE_MIB = 16
"""The size from which a dynamic-update-slice of an on-chip array is flagged: the corpus's decode
steps that keep a layer's KV cache on the chip (32-64 MiB) ran 1.3-3.2x their estimate; a scan's
3 MiB on-chip updates ran within the band."""

KINDS = {
    "grouped convolution": ("grouped convolution (feature_group_count > 1)",
                            "grouped convolutions (feature_group_count > 1)"),
    "strided convolution": ("strided convolution (stride > 1, input not dilated)",
                            "strided convolutions (stride > 1, input not dilated)"),
    "narrow convolution": (f"sliding-window convolution with under {MATRIX_WIDTH} features in or out",
                           f"sliding-window convolutions with under {MATRIX_WIDTH} features in or out"),
    "prefix sum": ("prefix-sum reduce-window over outer dimensions (a cumsum)",
                   "prefix-sum reduce-windows over outer dimensions (a cumsum)"),
    "many arrays": (f"array in or out of the call ({MANY_ARRAYS} or more)",
                    f"arrays in and out of the call ({MANY_ARRAYS} or more)"),
    "on-chip update": (f"dynamic-update-slice into an on-chip array of {ON_CHIP_UPDATE_MIB} MiB or more (S(1))",
                       f"dynamic-update-slices into on-chip arrays of {ON_CHIP_UPDATE_MIB} MiB or more (S(1))"),
}
"""Each kind's words, one and many. The rules (:func:`outside_band_kinds`): a convolution with
``feature_group_count > 1`` is grouped (a depthwise one too); else it is strided when a spatial
dimension has a stride over 1 and its input is not dilated, and narrow when a window of more than
one element and less than its input slides undilated over a dimension and the input or output
features number under :data:`MATRIX_WIDTH`; a ``reduce-window`` is a prefix sum when a dimension's
window of more than one element is padded by at least its size less one below and not above, and
its window does not slide along a tiled dimension (those are timed by their taps:
:func:`~shardscope.engine.hlo.flops.in_tile_window_taps`); a ``dynamic-update-slice`` whose result
is laid out in on-chip memory (``S(1)``) and holds :data:`ON_CHIP_UPDATE_MIB` MiB or more is an
on-chip update (a decode step's KV cache that XLA:TPU keeps on the chip for a layer)."""

_PAD = re.compile(r"pad=(\S+)")
_SIZE = re.compile(r"size=(\S+)")


def call_kinds(arguments: int, results: int) -> list[tuple[str, int]]:
    """The call's own kinds: ``("many arrays", n)`` when it takes and returns :data:`MANY_ARRAYS`
    arrays or more (the per-array costs of :class:`~shardscope.hardware.chips.Chip` are a linear
    fit that misses by up to 1.6x there)."""
    return [("many arrays", arguments + results)] if arguments + results >= MANY_ARRAYS else []


def outside_band_kinds(module: HloModule, inst: Instruction) -> list[str]:
    """The kinds (keys of :data:`KINDS`) of ``inst`` and the instructions it fuses, one per part."""
    parts = fused(module, inst) if inst.opcode == "fusion" else iter((inst,))
    return [kind for part in parts for kind in _kinds(module, part)]


def _kinds(module: HloModule, inst: Instruction) -> list[str]:
    if inst.opcode == "reduce-window":
        return ["prefix sum"] if _prefix_sum(inst) and not in_tile_window_taps(module, inst) else []
    if inst.opcode == "dynamic-update-slice":
        return ["on-chip update"] if _large_on_chip(inst) else []
    if inst.opcode != "convolution":
        return []
    if int_attribute(inst, "feature_group_count") > 1:
        return ["grouped convolution"]
    found = []
    dims = _spatial(module, inst)
    if any(stride > 1 and lhs_dilate == 1 for _, _, _, stride, lhs_dilate in dims):
        found.append("strided convolution")
    if _narrow(module, inst) and any(1 < kernel < size and lhs_dilate == 1 for size, kernel, _, _, lhs_dilate in dims):
        found.append("narrow convolution")
    return found


def _spatial(module: HloModule, inst: Instruction) -> list[tuple[int, int, int, int, int]]:
    """Each spatial dimension's input size, kernel size, output size, stride and input dilation
    (empty when the shapes or labels do not read)."""
    labels = dim_labels(inst.attribute("dim_labels"))
    lhs, kernel = operand_dims(module, inst, 0), operand_dims(module, inst, 1)
    out = inst.shape.array
    if labels is None or lhs is None or kernel is None or out is None:
        return []
    lhs_labels, kernel_labels, out_labels = labels
    if len(lhs_labels) != len(lhs) or len(kernel_labels) != len(kernel) or len(out_labels) != len(out.dims):
        return []
    window = window_dims(inst.attribute("window"), sum(label.isdigit() for label in lhs_labels))
    dims = []
    for spatial, (stride, _, lhs_dilate, _) in enumerate(window):
        label = str(spatial)
        if label not in lhs_labels or label not in kernel_labels or label not in out_labels:
            return []
        dims.append((lhs[lhs_labels.index(label)], kernel[kernel_labels.index(label)],
                     out.dims[out_labels.index(label)], stride, lhs_dilate))
    return dims


def _narrow(module: HloModule, inst: Instruction) -> bool:
    """Fewer input or output features than :data:`MATRIX_WIDTH`."""
    labels = dim_labels(inst.attribute("dim_labels"))
    lhs = operand_dims(module, inst, 0)
    out = inst.shape.array
    if labels is None or lhs is None or out is None or len(lhs) != len(labels[0]) or len(out.dims) != len(labels[2]):
        return False
    return min(lhs[labels[0].index("f")], out.dims[labels[2].index("f")]) < MATRIX_WIDTH


def _large_on_chip(inst: Instruction) -> bool:
    """Laid out in on-chip memory (``S(1)``) and of :data:`ON_CHIP_UPDATE_MIB` MiB or more."""
    array = inst.shape.array
    return array is not None and bool(OTHER_MEMORY.search(inst.shape.text)) and array.nbytes >= ON_CHIP_UPDATE_MIB * 2**20


def _prefix_sum(inst: Instruction) -> bool:
    """A window of more than one element padded on its low side by at least its size less one
    and not at all on its high side: each output sums what precedes it (``size=1x128
    pad=0_0x127_0``)."""
    window = (inst.attribute("window") or "").strip("{}")
    sizes, pads = _SIZE.search(window), _PAD.search(window)
    if sizes is None or pads is None:
        return False
    for size, pad in zip(sizes.group(1).split("x"), pads.group(1).split("x")):
        low, _, high = pad.partition("_")
        if size.isdigit() and low.isdigit() and high.isdigit() and int(size) > 1 and int(low) >= int(size) - 1 \
                and int(high) == 0:
            return True
    return False
