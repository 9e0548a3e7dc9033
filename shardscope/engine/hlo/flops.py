"""The floating-point operations of one HLO instruction, by a rule per opcode.

A ``dot`` is ``2 x result elements x contracted size`` (one multiply and one add per term); a
``convolution`` ``2 x result elements x kernel elements / output features``; a library matmul
(a ``custom-call`` to cuBLAS or oneDNN) as a dot; a reduction one per element it reads; other
arithmetic one per result element; data movement (copies, slices, transposes, broadcasts...)
none. A fusion's flops are those of the instructions it fuses (:func:`fused_flops`).
"""

from __future__ import annotations

import re
from math import prod
from typing import Callable, Iterator

from shardscope.engine.hlo.text import HloModule, Instruction

FREE_OPCODES = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all", "partition-id", "replica-id",
    "opt-barrier", "add-dependency", "domain", "copy-done", "async-done", "async-update", "send-done", "recv-done",
    "all-reduce-done", "all-gather-done", "collective-permute-done",
})
"""Instructions that move no data and compute nothing (names, tuples, views, the ends of async pairs)."""

_MOVES = frozenset({
    "copy", "copy-start", "transpose", "reshape", "broadcast", "slice", "dynamic-slice", "dynamic-update-slice",
    "concatenate", "pad", "reverse", "gather", "scatter", "iota", "bitcast-convert", "get-dimension-size",
    "set-dimension-size", "custom-call", "infeed", "outfeed", "send", "recv", "rng-get-and-update-state",
})
"""Instructions that move data and compute (almost) nothing: bytes, no flops."""

_CONTROL = frozenset({"while", "call", "conditional", "async-start", "fusion"})
_LIST = re.compile(r"\{([^}]*)\}")


def fused_flops(module: HloModule, inst: Instruction) -> tuple[float, str, bool]:
    """``(flops, dtype, matmul)`` of one run of ``inst``: a fusion's are its fused instructions'
    (the dtype and unit of its largest part)."""
    if inst.opcode != "fusion":
        flops = instruction_flops(module, inst)
        return flops, _flop_dtype(module, inst), inst.opcode in _MATMULS or is_library_matmul(inst)
    total, best, dtype, matmul = 0.0, -1.0, _dtype(inst), False
    for part in _fused(module, inst):
        flops = instruction_flops(module, part)
        total += flops
        if flops > best:
            best, dtype, matmul = flops, _flop_dtype(module, part), part.opcode in _MATMULS or is_library_matmul(part)
    return total, dtype, matmul


def _fused(module: HloModule, inst: Instruction, depth: int = 0) -> Iterator[Instruction]:
    """The instructions a fusion computes, nested fusions opened."""
    for role, name in inst.called_computations:
        computation = module.computations.get(name)
        if computation is None or role != "calls" or depth > 16:
            continue
        for part in computation.instructions:
            if part.opcode == "fusion":
                yield from _fused(module, part, depth + 1)
            else:
                yield part


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
    lhs = _operand_dims(module, inst, 0)
    contracting = _ints(inst.attribute("lhs_contracting_dims"))
    if lhs is None or inst.shape.array is None:
        return 0.0
    return 2.0 * inst.shape.array.elements * prod(lhs[d] for d in contracting if d < len(lhs))


def _convolution_flops(module: HloModule, inst: Instruction) -> float:
    """``2 x result elements x kernel elements / the kernel's output features`` (the terms each
    output element sums, whatever the feature grouping)."""
    kernel = _operand_dims(module, inst, 1)
    labels = (inst.attribute("dim_labels") or "").split("->")[0].split("_")
    if kernel is None or inst.shape.array is None or len(labels) != 2 or "o" not in labels[1]:
        return 0.0
    out_features = kernel[labels[1].index("o")] or 1
    return 2.0 * inst.shape.array.elements * prod(kernel) / out_features


def _custom_call_flops(module: HloModule, inst: Instruction) -> float:
    """A library matmul (``__cublas$gemm``, ``__cublas$lt$matmul``, oneDNN's): a dot's flops, its
    contracting dimensions from ``gemm_backend_config``; any other custom call: none known."""
    if not is_library_matmul(inst):
        return 0.0
    config = inst.backend_config
    gemm = config.get("gemm_backend_config", {}) if isinstance(config, dict) else {}
    numbers = gemm.get("dot_dimension_numbers", {}) if isinstance(gemm, dict) else {}
    contracting = tuple(int(d) for d in numbers.get("lhs_contracting_dimensions", ()))
    lhs = _operand_dims(module, inst, 0)
    result = inst.shape.arrays[0] if inst.shape.arrays else None
    if lhs is None or result is None or not contracting:
        return 0.0
    return 2.0 * result.elements * prod(lhs[d] for d in contracting if d < len(lhs))


def is_library_matmul(inst: Instruction) -> bool:
    """True for a ``custom-call`` to a library's matmul (``__cublas$gemm``, ``__cublas$lt$matmul``, oneDNN's)."""
    target = (inst.attribute("custom_call_target") or "").lower()
    return inst.opcode == "custom-call" and ("gemm" in target or "matmul" in target)


def _reduce_flops(module: HloModule, inst: Instruction) -> float:
    """One per element read (a variadic reduce's inputs are the first half of its operands)."""
    inputs = max(1, len(inst.operands) // 2)
    return float(sum(_elements(module, name) for name in inst.operands[:inputs]))


_FLOP_RULES: dict[str, Callable[[HloModule, Instruction], float]] = {
    "dot": _dot_flops,
    "convolution": _convolution_flops,
    "custom-call": _custom_call_flops,
    "reduce": _reduce_flops,
    "reduce-window": _reduce_flops,
    "select-and-scatter": _reduce_flops,
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


def _operand_dims(module: HloModule, inst: Instruction, position: int) -> tuple[int, ...] | None:
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
