"""The bytes one HLO instruction moves to and from the device's main memory, at its boundary.

What it reads (its operands) and writes (its result): a fusion's internals stay in registers and
caches. An operand a fusion reads only through slices counts the slices (a scan reads one step
of its stacked inputs per iteration), a ``dynamic-update-slice`` writes its update in place,
not the whole buffer, and an array the compiler placed in another memory space than the
device's main memory (a layout with ``S(1)``: a TPU's on-chip VMEM, where XLA:TPU keeps a small
loop's carry) moves none. Sizes are logical (a TPU's tile padding is left out).
"""

from __future__ import annotations

import re

from shardscope.engine.hlo.flops import NO_TRAFFIC_CALLS, is_library_matmul
from shardscope.engine.hlo.text import Computation, HloModule, Instruction, Shape

_SLICES = frozenset({"slice", "dynamic-slice", "gather"})
_OTHER_MEMORY = re.compile(r"S\([1-9][0-9]*\)")
"""A layout's memory space other than the default (0, the device's main memory)."""


def boundary_bytes(module: HloModule, inst: Instruction) -> float:
    """Bytes one run of ``inst`` reads and writes: operands and result at its boundary."""
    if inst.opcode in ("slice", "dynamic-slice"):
        return 2.0 * memory_bytes(inst.shape)  # reads what it keeps
    if inst.opcode == "dynamic-update-slice":
        return 2.0 * _nbytes(module, inst.operands[1]) if len(inst.operands) > 1 else 0.0
    if inst.opcode == "custom-call" and (inst.attribute("custom_call_target") or "").strip('"') in NO_TRAFFIC_CALLS:
        return 0.0
    if inst.opcode == "copy-start" and inst.shape.is_tuple and inst.shape.elements:  # (destination, source, context)
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape.elements[0]))
    if is_library_matmul(inst) and inst.shape.is_tuple and inst.shape.elements:  # (result, workspace)
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape.elements[0]))
    if inst.opcode != "fusion":
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape))
    computation = _fused_computation(module, inst)
    if computation is None:
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape))
    in_place = _updated_in_place(module, computation)
    slices = any(part.opcode in _SLICES or part.opcode == "fusion" for part in computation.instructions)
    parameters = computation.parameters  # by number: a fusion's operand i is its parameter i
    read = 0.0
    for position, name in enumerate(inst.operands):
        parameter = parameters[position] if position < len(parameters) else None
        if parameter is None or parameter.parameter_number != position:
            read += _nbytes(module, name)
        else:
            read += _read_bytes(module, computation, parameter, in_place, slices)
    return read + _written_bytes(module, computation)


def _read_bytes(module: HloModule, computation: Computation, parameter: Instruction, in_place: set[str],
                slices: bool) -> float:
    """What a fusion reads of one operand: nothing of a buffer it updates in place, the slices
    of one it only slices, else all of it."""
    if parameter.name in in_place or _OTHER_MEMORY.search(parameter.shape.text):
        return 0.0
    if not slices:
        return float(memory_bytes(parameter.shape))
    sliced = _sliced_bytes(module, computation, parameter, 0)
    return float(memory_bytes(parameter.shape)) if sliced is None else sliced


def _sliced_bytes(module: HloModule, computation: Computation, parameter: Instruction, depth: int) -> float | None:
    """The bytes read of ``parameter`` when every use only slices it (through nested fusions
    too: a scan's fused body slices its layer's weights in an inner fusion), else None."""
    users = computation.users.get(parameter.name, ())
    if not users or depth > 8:
        return None
    total = 0.0
    for user, position in users:
        if user.opcode in _SLICES and position == 0:
            total += memory_bytes(user.shape)
            continue
        inner = _fused_computation(module, user) if user.opcode == "fusion" else None
        inner_parameters = inner.parameters if inner is not None else []
        if inner is None or position >= len(inner_parameters):
            return None
        part = _sliced_bytes(module, inner, inner_parameters[position], depth + 1)
        if part is None:
            return None
        total += part
    return total


def _written_bytes(module: HloModule, computation: Computation) -> float:
    """What a fusion writes: its result, an in-place update's update only."""
    root = computation.root
    if root is None:
        return 0.0
    parts = [module.instruction(name) for name in root.operands] if root.opcode == "tuple" else [root]
    total = 0.0
    for part in parts:
        if part is None:
            continue
        if part.opcode == "dynamic-update-slice" and len(part.operands) > 1:
            update = module.instruction(part.operands[1])
            total += memory_bytes(update.shape) if update is not None else 0
        else:
            total += memory_bytes(part.shape)
    return total


def _updated_in_place(module: HloModule, computation: Computation) -> set[str]:
    """The fusion parameters its root updates in place (operand 0 of a root dynamic-update-slice)."""
    root = computation.root
    if root is None:
        return set()
    parts = root.operands if root.opcode == "tuple" else (root.name,)
    found = set()
    for name in parts:
        part = module.instruction(name)
        if part is not None and part.opcode == "dynamic-update-slice" and part.operands:
            buffer = module.instruction(part.operands[0])
            if buffer is not None and buffer.opcode == "parameter":
                found.add(buffer.name)
    return found


def _fused_computation(module: HloModule, inst: Instruction) -> Computation | None:
    name = next((callee for role, callee in inst.called_computations if role == "calls"), None)
    return module.computations.get(name or "")


def _nbytes(module: HloModule, name: str) -> int:
    inst = module.instruction(name)
    return memory_bytes(inst.shape) if inst is not None else 0


def memory_bytes(shape: Shape) -> int:
    """The bytes of ``shape`` that live in the device's main memory (leaves laid out in another
    memory space, ``S(1)``, count none)."""
    if shape.array is not None:
        return 0 if _OTHER_MEMORY.search(shape.text) else shape.array.nbytes
    return sum(memory_bytes(element) for element in shape.elements)
