"""The floating-point operations of one HLO instruction, by a rule per opcode.

A ``dot`` is ``2 x result elements x contracted size`` (one multiply and one add per term); a
``convolution`` ``2 x batch x input features per group x output features x`` the window
positions that land on an input element (XLA's own count: a TPU's batched dot, written as a
convolution dilated by its batch, counts its batch once); a library matmul (a ``custom-call`` to
cuBLAS or oneDNN) as a dot; a reduction one per element it reads; a scatter one per update
element; other arithmetic one per result element; data movement (copies, slices, transposes,
broadcasts...) none. A fusion's flops are those of the instructions it fuses, by kind
(:func:`flop_counts`: the element type, the unit that does them, a matmul's precision), since a
chip runs each kind at its own rate. What no rule times (a sort, a top-k, a custom call it does
not know) is named by :func:`unmodelled`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod
from typing import Callable, Iterator

from shardscope.engine.hlo.text import HloModule, Instruction
from shardscope.collective_kinds import DONE_OPCODES, MOVING_OPCODES
from shardscope.hardware.chips import (ACCESS_UNITS, GATHER_INDEX, GATHER_PIECE, GATHER_ROW, ON_CHIP_GATHER_PIECE,
                                       ON_CHIP_GATHER_ROW, WINDOW)

FREE_OPCODES = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all", "partition-id", "replica-id",
    "opt-barrier", "add-dependency", "domain", "copy-done", "async-done", "async-update", "send-done", "recv-done",
    *DONE_OPCODES,
})
"""Instructions that move no data and compute nothing (names, tuples, views, the ends of async pairs)."""

_MOVES = frozenset({
    "copy", "copy-start", "transpose", "reshape", "broadcast", "slice", "dynamic-slice", "dynamic-update-slice",
    "concatenate", "pad", "reverse", "gather", "scatter", "iota", "bitcast-convert", "get-dimension-size",
    "set-dimension-size", "custom-call", "infeed", "outfeed", "send", "recv", "rng-get-and-update-state",
    # collectives that only move data: inside XLA:TPU's async collective fusion, a step of the
    # collective beside the fusion's compute (the interconnect's transfers, not the chip's work)
    *MOVING_OPCODES,
})
"""Instructions that move data and compute (almost) nothing: bytes, no flops."""

_CONTROL = frozenset({"while", "call", "conditional", "async-start", "fusion"})
_LIST = re.compile(r"\{([^}]*)\}")


@dataclass(frozen=True)
class FlopCount:
    """Operations of one kind within an instruction: their element type, the unit that does them
    (``matrix``: a dot, a convolution, a library matmul; ``scatter``: a scatter's updates, one
    per element; ``vector``: everything else; a gather's rows and pieces: :data:`ACCESS_UNITS`),
    and a matmul's precision (``default``, ``high``, ``highest``: XLA's ``operand_precision``;
    an f32 matmul's passes depend on it)."""

    flops: float
    dtype: str
    unit: str
    precision: str = "default"

    @property
    def matmul(self) -> bool:
        """True when the matrix units do them."""
        return self.unit == "matrix"

    @property
    def access(self) -> bool:
        """True for a gather's accesses (rows, pieces), which are not floating-point operations."""
        return self.unit in ACCESS_UNITS


def flop_counts(module: HloModule, inst: Instruction) -> tuple[FlopCount, ...]:
    """The flops of one run of ``inst`` by kind (dtype, matrix unit or not, precision), a
    fusion's parts summed by kind, largest first."""
    parts = fused(module, inst) if inst.opcode == "fusion" else iter((inst,))
    kinds: dict[tuple[str, str, str], float] = {}
    for part in parts:
        flops = instruction_flops(module, part)
        if flops:
            unit = unit_of(module, part)
            key = (_flop_dtype(module, part), unit, matmul_precision(part) if unit == "matrix" else "default")
            kinds[key] = kinds.get(key, 0.0) + flops
        if part.opcode == "gather":
            for unit, count in gather_accesses(module, part):
                key = (_dtype(part), unit, "default")
                kinds[key] = kinds.get(key, 0.0) + count
    counts = (FlopCount(flops, dtype, unit, precision) for (dtype, unit, precision), flops in kinds.items())
    return tuple(sorted(counts, key=lambda c: -c.flops))


_PRECISIONS = ("default", "high", "highest")


def unit_of(module: HloModule, inst: Instruction) -> str:
    """The unit that does ``inst``'s operations: ``matrix``, ``scatter`` or ``vector`` (a
    depthwise convolution, one input feature per group, has nothing for a matrix unit to
    contract: the vector unit does it)."""
    if inst.opcode == "convolution" and _depthwise(module, inst):
        return "vector"
    if inst.opcode in _MATMULS or is_library_matmul(inst):
        return "matrix"
    if inst.opcode == "reduce-window" and in_tile_window_taps(module, inst):
        return WINDOW
    return "scatter" if inst.opcode == "scatter" else "vector"


def matmul_precision(inst: Instruction) -> str:
    """The highest of a matmul's ``operand_precision={high,high}`` (a library matmul's from its
    ``precision_config``), ``default`` when not given."""
    listed = _LIST.search(inst.attribute("operand_precision") or "")
    names = [name.strip().lower() for name in listed.group(1).split(",")] if listed else []
    config = inst.backend_config
    gemm = config.get("gemm_backend_config", {}) if isinstance(config, dict) else {}
    precision = gemm.get("precision_config", {}) if isinstance(gemm, dict) else {}
    if isinstance(precision, dict):
        names += [str(name).lower() for name in precision.get("operand_precision", ())]
    known = [_PRECISIONS.index(name) for name in names if name in _PRECISIONS]
    return _PRECISIONS[max(known)] if known else "default"


def fused(module: HloModule, inst: Instruction, depth: int = 0) -> Iterator[Instruction]:
    """The instructions a fusion computes, nested fusions opened."""
    for role, name in inst.called_computations:
        computation = module.computations.get(name)
        if computation is None or role != "calls" or depth > 16:
            continue
        for part in computation.instructions:
            if part.opcode == "fusion":
                yield from fused(module, part, depth + 1)
            else:
                yield part


_MINOR_TO_MAJOR = re.compile(r"\]\{(\d+)[,:}]")
OTHER_MEMORY = re.compile(r"S\([1-9][0-9]*\)")
"""A layout's memory space other than the default (0, the device's main memory): ``S(1)`` is a TPU's VMEM."""


@dataclass(frozen=True)
class GatherReads:
    """What one ``gather`` reads, index by index: its rows (one slice per index), the 128-element
    pieces of those rows (a TPU tile row: 128 lanes of 32 bits, a bf16 row packed with its
    neighbour), the index components past the first (``take_along_axis`` indexes by two), the
    bytes of the slices, and whether the table is in the device's main memory."""

    rows: int
    pieces: int
    extra_components: int
    bytes: int
    in_memory: bool


def gather_reads(module: HloModule, inst: Instruction) -> GatherReads | None:
    """The reads of the ``gather`` ``inst`` (None when its shapes do not say)."""
    operand = module.instruction(inst.operands[0]) if inst.operands else None
    result = inst.shape.array
    sizes = _ints(inst.attribute("slice_sizes"))
    if operand is None or operand.shape.array is None or result is None or not sizes:
        return None
    per_slice = prod(sizes)
    rows = result.elements // per_slice if per_slice else 0
    minor = _minor_dimension(operand)
    pieces = -(-sizes[minor] // 128) * (per_slice // sizes[minor]) if sizes[minor] else 0
    components = len(_ints(inst.attribute("start_index_map")))
    return GatherReads(rows, rows * pieces, rows * max(components - 1, 0), result.nbytes,
                       _in_main_memory(module, operand))


def gather_accesses(module: HloModule, inst: Instruction) -> list[tuple[str, float]]:
    """A ``gather``'s accesses by unit. From a table in main memory (a parameter laid out in the
    default memory space) they are :data:`MEMORY_UNITS`: each row is its own access (measured on
    v5e at ~8.4 ns a row and ~1.1 ns a piece, :mod:`shardscope.hardware.chips`), and its reads
    are timed by them, not streamed (:func:`accessed_bytes`). From a table in on-chip memory
    (``S(1)``, or made in the fusion) they are the on-chip units."""
    reads = gather_reads(module, inst)
    if reads is None or not reads.rows:
        return []
    if not reads.in_memory:
        return [(ON_CHIP_GATHER_ROW, float(reads.rows)), (ON_CHIP_GATHER_PIECE, float(reads.pieces))]
    return [(GATHER_ROW, float(reads.rows)), (GATHER_PIECE, float(reads.pieces)),
            (GATHER_INDEX, float(reads.extra_components))]


def accessed_bytes(module: HloModule, inst: Instruction) -> float:
    """The bytes ``inst`` (a fusion's gathers too) reads row by row from tables in main memory:
    part of its traffic, timed by its accesses rather than at the streaming bandwidth."""
    parts = fused(module, inst) if inst.opcode == "fusion" else iter((inst,))
    total = 0.0
    for part in parts:
        reads = gather_reads(module, part) if part.opcode == "gather" else None
        if reads is not None and reads.in_memory:
            total += reads.bytes
    return total


def _in_main_memory(module: HloModule, operand: Instruction) -> bool:
    """True when a gather's table lives in the device's main memory: not laid out in another
    memory space, and either outside a fusion or a parameter of the fusion (an array a fusion
    computes stays on the chip)."""
    if OTHER_MEMORY.search(operand.shape.text):
        return False
    in_fusion = any(role == "calls" and caller.opcode == "fusion"
                    for caller, role in module.callers.get(operand.computation, ()))
    return operand.opcode == "parameter" or not in_fusion


def _minor_dimension(inst: Instruction) -> int:
    """The dimension laid out fastest (the first of the layout's minor-to-major list; the last
    dimension when the shape prints no layout)."""
    dims = len(inst.shape.array.dims) if inst.shape.array is not None else 0
    match = _MINOR_TO_MAJOR.search(inst.shape.text)
    minor = int(match.group(1)) if match else dims - 1
    return minor if 0 <= minor < dims else max(dims - 1, 0)


def instruction_flops(module: HloModule, inst: Instruction) -> float:
    """Flops of one run of a single (not fused) instruction, by its opcode's rule."""
    rule = _FLOP_RULES.get(inst.opcode)
    if rule is not None:
        return rule(module, inst)
    if inst.opcode in FREE_OPCODES or inst.opcode in _MOVES or inst.opcode in _CONTROL or inst.shape.is_tuple:
        return 0.0
    return float(inst.shape.array.elements) if inst.shape.array is not None else 0.0


def _dot_flops(module: HloModule, inst: Instruction) -> float:
    """``2 x result elements x the product of the lhs contracting dimensions``."""
    lhs = operand_dims(module, inst, 0)
    contracting = _ints(inst.attribute("lhs_contracting_dims"))
    if lhs is None or inst.shape.array is None:
        return 0.0
    return 2.0 * inst.shape.array.elements * prod(lhs[d] for d in contracting if d < len(lhs))


def _convolution_flops(module: HloModule, inst: Instruction) -> float:
    """``2 x batch x output features x input features per group x`` the window positions that
    land on an input element, per spatial dimension (XLA's own count,
    ``HloCostAnalysis::HandleConvolution``). A TPU writes a batched dot as a convolution whose
    batch is a spatial dimension dilated by its own size (``window={size=64 stride=63
    lhs_dilate=64}``): one position of each window lands on an input element, so the batch
    counts once, not once per window position."""
    lhs, kernel = operand_dims(module, inst, 0), operand_dims(module, inst, 1)
    labels = dim_labels(inst.attribute("dim_labels"))
    result = inst.shape.array
    if lhs is None or kernel is None or result is None or labels is None:
        return 0.0
    lhs_labels, kernel_labels, out_labels = labels
    if len(lhs_labels) != len(lhs) or len(kernel_labels) != len(kernel) or len(out_labels) != len(result.dims):
        return 0.0
    window = window_dims(inst.attribute("window"), sum(label.isdigit() for label in lhs_labels))
    positions = 1
    for spatial, (stride, pad_low, lhs_dilate, rhs_dilate) in enumerate(window):
        label = str(spatial)
        if label not in lhs_labels or label not in kernel_labels or label not in out_labels:
            return 0.0
        positions *= _valid_positions(lhs[lhs_labels.index(label)], kernel[kernel_labels.index(label)],
                                      result.dims[out_labels.index(label)], stride, pad_low, lhs_dilate, rhs_dilate)
    features = int_attribute(inst, "feature_group_count")
    batches = int_attribute(inst, "batch_group_count")
    batch = lhs[lhs_labels.index("b")] if "b" in lhs_labels else 1
    multiplies = (lhs[lhs_labels.index("f")] // features) * result.dims[out_labels.index("f")] * (batch // batches)
    return 2.0 * multiplies * positions


def _depthwise(module: HloModule, inst: Instruction) -> bool:
    """A convolution with as many feature groups as input features (one input feature each)."""
    groups = int_attribute(inst, "feature_group_count")
    labels = dim_labels(inst.attribute("dim_labels"))
    lhs = operand_dims(module, inst, 0)
    if groups <= 1 or labels is None or lhs is None or len(lhs) != len(labels[0]):
        return False
    return lhs[labels[0].index("f")] == groups


def dim_labels(text: str | None) -> tuple[str, str, str] | None:
    """``b01f_01io->b01f`` -> ``("b01f", "01io", "b01f")`` (None when it does not read so)."""
    if not text or "->" not in text or "_" not in text:
        return None
    operands, out = text.split("->", 1)
    lhs, kernel = operands.split("_", 1)
    if "b" not in lhs or "f" not in lhs or "i" not in kernel or "o" not in kernel or "f" not in out:
        return None
    return lhs, kernel, out


_WINDOW_FIELD = re.compile(r"(size|stride|pad|lhs_dilate|rhs_dilate)=(\S+)")


def window_dims(text: str | None, spatial: int) -> list[tuple[int, int, int, int]]:
    """Each spatial dimension's ``(stride, low padding, lhs dilation, rhs dilation)`` from a
    ``window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=1x1}`` attribute."""
    fields = dict(_WINDOW_FIELD.findall((text or "").strip("{}")))
    dims = [[1, 0, 1, 1] for _ in range(spatial)]
    for key, slot in (("stride", 0), ("lhs_dilate", 2), ("rhs_dilate", 3)):
        for dim, value in enumerate(fields.get(key, "").split("x") if key in fields else ()):
            if dim < spatial and value.lstrip("-").isdigit():
                dims[dim][slot] = int(value)
    for dim, pad in enumerate(fields.get("pad", "").split("x") if "pad" in fields else ()):
        low = pad.split("_")[0]
        if dim < spatial and low.lstrip("-").isdigit():
            dims[dim][1] = int(low)
    return [(stride, low, lhs_d, rhs_d) for stride, low, lhs_d, rhs_d in dims]


def _valid_positions(size: int, kernel: int, out: int, stride: int, pad_low: int, lhs_dilate: int,
                     rhs_dilate: int) -> int:
    """How many (output position, kernel position) pairs of one spatial dimension read an input
    element (not padding, not a hole of the input's dilation)."""
    count = 0
    lhs_dilate = max(lhs_dilate, 1)
    for k in range(kernel):
        offset = k * rhs_dilate - pad_low
        # output positions o with 0 <= o*stride + offset <= (size-1)*lhs_dilate and a multiple of lhs_dilate
        for o in range(out):
            index = o * stride + offset
            if 0 <= index <= (size - 1) * lhs_dilate and index % lhs_dilate == 0:
                count += 1
    return count


def int_attribute(inst: Instruction, key: str) -> int:
    value = inst.attribute(key)
    return int(value) if value and value.isdigit() and int(value) > 0 else 1


def _custom_call_flops(module: HloModule, inst: Instruction) -> float:
    """A library matmul (``__cublas$gemm``, ``__cublas$lt$matmul``, oneDNN's): a dot's flops, its
    contracting dimensions from ``gemm_backend_config``; any other custom call: none known."""
    if not is_library_matmul(inst):
        return 0.0
    config = inst.backend_config
    gemm = config.get("gemm_backend_config", {}) if isinstance(config, dict) else {}
    numbers = gemm.get("dot_dimension_numbers", {}) if isinstance(gemm, dict) else {}
    contracting = tuple(int(d) for d in numbers.get("lhs_contracting_dimensions", ()))
    lhs = operand_dims(module, inst, 0)
    result = inst.shape.arrays[0] if inst.shape.arrays else None
    if lhs is None or result is None or not contracting:
        return 0.0
    return 2.0 * result.elements * prod(lhs[d] for d in contracting if d < len(lhs))


NO_TRAFFIC_CALLS = frozenset({"AllocateBuffer"})
"""Custom-call targets that move no bytes (a buffer allocated, not written)."""

_MOVING_CALLS = frozenset({
    "ConcatBitcast", "AssumeGatherIndicesInBound", "GatherScatterIndicesBitpacked", "AllocateBuffer", "Sharding",
    "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost", "MoveToDevice", "annotate_device_placement",
    "LayoutConstraint", "X64Combine", "X64SplitLow", "X64SplitHigh",
    "AsyncCollectiveStart", "AsyncCollectiveDone",  # an async collective fusion's collective's ends: the interconnect's time
})
"""Custom-call targets that only move or relabel data (XLA:TPU's helpers, sharding marks): bytes, no time of their own."""

_UNMODELLED_OPCODES = {"sort": "sort", "rng-bit-generator": "rng-bit-generator", "rng": "rng"}
"""Opcodes whose time the model has no rule for (a sort's passes depend on the data's size and the compiler's
algorithm: measured on v5e, 0.5-2.5 ns per element)."""


NO_TIME_CALLS = NO_TRAFFIC_CALLS | {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "LayoutConstraint"}
"""Custom-call targets that launch nothing on the chip (an allocation, a sharding or layout mark)."""


def launches_kernel(inst: Instruction) -> bool:
    """Whether ``inst`` runs as a kernel of its own: not the start of an asynchronous copy, slice
    or computation (it queues a transfer; its ``-done`` waits for it), nor a call in
    :data:`NO_TIME_CALLS`. Measured on v5e, every kernel costs about the same fixed time beside
    its work (:data:`~shardscope.hardware.chips.V5E_KERNELS`)."""
    if inst.opcode.endswith("-start"):
        return False
    return not (inst.opcode == "custom-call"
                and (inst.attribute("custom_call_target") or "").strip('"') in NO_TIME_CALLS)


def unmodelled(inst: Instruction) -> str | None:
    """What the estimate cannot time in ``inst`` alone (``sort``, ``top-k``, ``custom-call
    NAME``), or None when a rule covers it."""
    if inst.opcode in _UNMODELLED_OPCODES:
        return _UNMODELLED_OPCODES[inst.opcode]
    if inst.opcode != "custom-call" or is_library_matmul(inst):
        return None
    target = (inst.attribute("custom_call_target") or "").strip('"')
    if target in _MOVING_CALLS:
        return None
    return "top-k" if target.lower() in ("topk", "top_k", "approxtopk") else f"custom-call {target or '?'}"


def unmodelled_parts(module: HloModule, inst: Instruction) -> list[str]:
    """What the estimate cannot time in ``inst`` or the instructions it fuses."""
    parts = fused(module, inst) if inst.opcode == "fusion" else iter((inst,))
    return [label for part in parts if (label := unmodelled(part)) is not None]


def is_library_matmul(inst: Instruction) -> bool:
    """True for a ``custom-call`` to a library's matmul (``__cublas$gemm``, ``__cublas$lt$matmul``, oneDNN's)."""
    target = (inst.attribute("custom_call_target") or "").lower()
    return inst.opcode == "custom-call" and ("gemm" in target or "matmul" in target)


def _reduce_flops(module: HloModule, inst: Instruction) -> float:
    """One per element read (a variadic reduce's inputs are the first half of its operands)."""
    inputs = max(1, len(inst.operands) // 2)
    return float(sum(_elements(module, name) for name in inst.operands[:inputs]))


_LAYOUT = re.compile(r"\]\{([0-9,]+)[:}]")
_WINDOW_SIZES = re.compile(r"size=([0-9x]+)")


def in_tile_window_taps(module: HloModule, inst: Instruction) -> float:
    """A ``reduce-window`` whose window slides along one of the two dimensions its layout lays out
    fastest (a TPU tile's rows and lanes: a cumsum over a reshaped vector, ``size=1x128
    pad=0_0x127_0`` over ``{0,1}``): its taps, output elements times window elements; else 0. A
    window at least twice its dimension less one (a reduction broadcast back, as a softmax's) does
    not slide. Measured on v5e, such a window's taps run at a rate of their own
    (:data:`~shardscope.hardware.chips.V5E_WINDOW`); one sliding over outer dimensions, whole tiles
    at a time, is counted as other reductions are (one operation per element read)."""
    result = inst.shape.array
    operand = module.instruction(inst.operands[0]) if inst.opcode == "reduce-window" and inst.operands else None
    layout = _LAYOUT.search(inst.shape.text)
    sizes = _WINDOW_SIZES.search(inst.attribute("window") or "")
    if result is None or operand is None or operand.shape.array is None or layout is None or sizes is None:
        return 0.0
    window = [int(size) for size in sizes.group(1).split("x")]
    dims = operand.shape.array.dims
    if len(window) != len(dims):
        return 0.0
    minor = [int(d) for d in layout.group(1).split(",")][:2]
    sliding = [d for d in minor if d < len(dims) and 1 < window[d] < 2 * dims[d] - 1]
    return float(result.elements * prod(window)) if sliding else 0.0


def _reduce_window_flops(module: HloModule, inst: Instruction) -> float:
    """An in-tile sliding window's taps (:func:`in_tile_window_taps`), else one per element read."""
    return in_tile_window_taps(module, inst) or _reduce_flops(module, inst)


def _scatter_flops(module: HloModule, inst: Instruction) -> float:
    """One per update element (a variadic scatter's updates are the last third of its operands)."""
    updates = max(1, len(inst.operands) // 3)
    return float(sum(_elements(module, name) for name in inst.operands[-updates:]))


_FLOP_RULES: dict[str, Callable[[HloModule, Instruction], float]] = {
    "dot": _dot_flops,
    "convolution": _convolution_flops,
    "custom-call": _custom_call_flops,
    "reduce": _reduce_flops,
    "reduce-window": _reduce_window_flops,
    "select-and-scatter": _reduce_flops,
    "scatter": _scatter_flops,
}
"""The opcodes whose flops are not one per result element, each with its rule."""

_MATMULS = frozenset({"dot", "convolution"})


def _flop_dtype(module: HloModule, inst: Instruction) -> str:
    """The element type the flops run in: a matmul's operands', else the result's."""
    if (inst.opcode in _MATMULS or is_library_matmul(inst)) and inst.operands:
        operand = module.instruction(inst.operands[0])
        if operand is not None and operand.shape.array is not None:
            return operand.shape.array.dtype
    return _dtype(inst)


def _dtype(inst: Instruction) -> str:
    arrays = inst.shape.arrays
    return arrays[0].dtype if arrays else ""


def _elements(module: HloModule, name: str) -> int:
    inst = module.instruction(name)
    return sum(a.elements for a in inst.shape.arrays) if inst is not None else 0


def operand_dims(module: HloModule, inst: Instruction, position: int) -> tuple[int, ...] | None:
    if position >= len(inst.operands):
        return None
    operand = module.instruction(inst.operands[position])
    return operand.shape.array.dims if operand is not None and operand.shape.array is not None else None


def _ints(text: str | None) -> tuple[int, ...]:
    """``{1,2}`` -> ``(1, 2)``."""
    if not text:
        return ()
    match = _LIST.search(text)
    body = match.group(1) if match else text
    return tuple(int(part) for part in body.split(",") if part.strip().lstrip("-").isdigit())

