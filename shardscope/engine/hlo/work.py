"""The work of a compiled module: each instruction's flops and memory bytes, loops counted.

XLA's ``cost_analysis()`` counts a while body once (and raises on the compile-only GPU
executable); here each instruction the module runs is counted as often as it runs per call:
the trip counts of the loops around it (:class:`~shardscope.engine.hlo.loops.LoopCounts`)
multiplied together. For each instruction that runs on its own (an instruction of the entry, a
loop body or condition, a called computation; a fusion counts as one):

- **flops**: a ``dot`` is ``2 x result elements x contracted size`` (one multiply and one add
  per term); a ``convolution`` ``2 x result elements x kernel elements / output features``; a
  reduction one per element it reads; other arithmetic one per result element; data movement
  (copies, slices, transposes, broadcasts...) none; a library matmul (a ``custom-call`` to
  cuBLAS or oneDNN) as a dot. A fusion's flops are those of the instructions it fuses.
- **bytes** moved to and from memory: what it reads (its operands) and writes (its result),
  at its boundary: a fusion's internals stay in registers and caches. An operand read only
  through slices counts the slices (a scan reads one step of its stacked inputs per iteration),
  and a ``dynamic-update-slice`` writes its update in place, not the whole buffer. An array
  the compiler placed in another memory space than the device's main memory (a layout with
  ``S(1)``: a TPU's on-chip VMEM, where XLA:TPU keeps a small loop's carry) moves no HBM bytes.

Collectives are not counted here: their time is the interconnect's
(:attr:`ModuleWork.collectives` lists them for that model). Both prints of a module (the CPU's,
a target's) read alike; sizes are logical (a TPU's tile padding is left out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod
from typing import Callable, Iterator

from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.sites import COLLECTIVE_OPCODES
from shardscope.engine.hlo.text import Computation, HloModule, Instruction, Shape

_FREE = frozenset({
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
_SLICES = frozenset({"slice", "dynamic-slice", "gather"})
_LIST = re.compile(r"\{([^}]*)\}")
_OTHER_MEMORY = re.compile(r"S\([1-9][0-9]*\)")
"""A layout's memory space other than the default (0, the device's main memory)."""


@dataclass(frozen=True)
class InstructionWork:
    """One instruction that runs on its own: its flops and bytes per run, and how often it runs.

    ``dtype`` is the element type its flops run in (a dot's operands, else its result's);
    ``matmul`` says a dot or convolution does them (the matrix units); ``runs`` is executions
    per call (every loop's trip count around it multiplied; a loop of unknown count counts once).
    """

    name: str
    opcode: str
    op_name: str
    flops: float
    bytes: float
    dtype: str
    matmul: bool
    runs: int

    @property
    def total_flops(self) -> float:
        """Flops per call: per run times runs."""
        return self.flops * self.runs

    @property
    def total_bytes(self) -> float:
        """Bytes per call: per run times runs."""
        return self.bytes * self.runs


@dataclass(frozen=True)
class ModuleWork:
    """Every instruction's work in one compiled module, loops counted.

    ``loop_iterations`` is how many iterations every while loop runs per call together (nested
    loops multiplied); ``unknown_loops`` the loops without a static trip count (counted as one
    iteration: the estimate is then a lower bound); ``conditionals`` how many conditionals run
    (every branch counted: an upper bound); ``collectives`` the collective instructions left
    to the interconnect's model, with their runs per call.
    """

    instructions: tuple[InstructionWork, ...]
    loop_iterations: int
    unknown_loops: tuple[str, ...] = ()
    conditionals: int = 0
    collectives: tuple[tuple[str, int], ...] = ()

    @property
    def flops(self) -> float:
        """Flops per call."""
        return sum(i.total_flops for i in self.instructions)

    @property
    def bytes(self) -> float:
        """Bytes moved to and from memory per call."""
        return sum(i.total_bytes for i in self.instructions)


def module_work(module: HloModule, counts: LoopCounts | None = None) -> ModuleWork:
    """The work of every instruction ``module``'s entry runs, loops counted (trip counts from
    ``counts``, made from the module when not given)."""
    return _Walk(module, counts or LoopCounts(module)).run()


class _Walk:
    """One pass from the entry down through loops, calls and branches (fused computations are
    read only to count their flops)."""

    def __init__(self, module: HloModule, counts: LoopCounts) -> None:
        self.module = module
        self.counts = counts
        self.found: list[InstructionWork] = []
        self.collectives: list[tuple[str, int]] = []
        self.unknown: list[str] = []
        self.iterations = 0
        self.conditionals = 0

    def run(self) -> ModuleWork:
        entry = self.module.entry
        if entry is not None:
            self.computation(entry, 1, 0)
        return ModuleWork(tuple(self.found), self.iterations, tuple(dict.fromkeys(self.unknown)), self.conditionals,
                          tuple(self.collectives))

    def computation(self, computation: Computation, runs: int, depth: int) -> None:
        if depth > 64:
            return
        for inst in computation.instructions:
            self.instruction(inst, runs, depth)

    def instruction(self, inst: Instruction, runs: int, depth: int) -> None:
        opcode = inst.opcode
        if opcode in COLLECTIVE_OPCODES or _is_wrapped_collective(self.module, inst):
            self.collectives.append((inst.name, runs))
            return
        if opcode == "while":
            self.loop(inst, runs, depth)
        elif opcode == "conditional":
            self.conditionals += runs
            for role, name in inst.called_computations:
                self.called(name, runs, depth)
        elif opcode in ("call", "async-start"):
            for role, name in inst.called_computations:
                if role in ("to_apply", "calls"):
                    self.called(name, runs, depth)
        elif opcode not in _FREE and not opcode.endswith("-done"):
            self.found.append(self.cost(inst, runs))

    def loop(self, inst: Instruction, runs: int, depth: int) -> None:
        trips = self.counts.trip_count(inst.name)
        if trips is None:
            self.unknown.append(inst.name)
            trips = 1
        self.iterations += runs * trips
        for role, name in inst.called_computations:
            self.called(name, runs * (trips + 1 if role == "condition" else trips), depth)

    def called(self, name: str, runs: int, depth: int) -> None:
        computation = self.module.computations.get(name)
        if computation is not None:
            self.computation(computation, runs, depth + 1)

    def cost(self, inst: Instruction, runs: int) -> InstructionWork:
        flops, dtype, matmul = fused_flops(self.module, inst)
        return InstructionWork(inst.name, inst.opcode, inst.metadata.op_name, flops, boundary_bytes(self.module, inst),
                               dtype, matmul, runs)


def _is_wrapped_collective(module: HloModule, inst: Instruction) -> bool:
    """An async-start or fusion whose computation holds a collective (the GPU's and TPU's wrapped forms)."""
    if inst.opcode not in ("async-start", "fusion"):
        return False
    for role, name in inst.called_computations:
        computation = module.computations.get(name)
        if computation is not None and any(i.opcode in COLLECTIVE_OPCODES for i in computation.instructions):
            return True
    return False


# --------------------------------------------------------------------------- flops


def fused_flops(module: HloModule, inst: Instruction) -> tuple[float, str, bool]:
    """``(flops, dtype, matmul)`` of one run of ``inst``: a fusion's are its fused instructions'
    (the dtype and unit of its largest part)."""
    if inst.opcode != "fusion":
        flops = instruction_flops(module, inst)
        return flops, _flop_dtype(module, inst), inst.opcode in _MATMULS or _is_library_matmul(inst)
    total, best, dtype, matmul = 0.0, -1.0, _dtype(inst), False
    for part in _fused(module, inst):
        flops = instruction_flops(module, part)
        total += flops
        if flops > best:
            best, dtype, matmul = flops, _flop_dtype(module, part), part.opcode in _MATMULS
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
    if inst.opcode in _FREE or inst.opcode in _MOVES or inst.opcode in _CONTROL or inst.shape.is_tuple:
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
    if not _is_library_matmul(inst):
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


def _is_library_matmul(inst: Instruction) -> bool:
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
    if (inst.opcode in _MATMULS or _is_library_matmul(inst)) and inst.operands:
        operand = module.instruction(inst.operands[0])
        if operand is not None and operand.shape.array is not None:
            return operand.shape.array.dtype
    return _dtype(inst)


def _dtype(inst: Instruction) -> str:
    arrays = inst.shape.arrays
    return arrays[0].dtype if arrays else ""


# --------------------------------------------------------------------------- bytes


def boundary_bytes(module: HloModule, inst: Instruction) -> float:
    """Bytes one run of ``inst`` reads and writes: operands and result at its boundary."""
    if inst.opcode in ("slice", "dynamic-slice"):
        return 2.0 * memory_bytes(inst.shape)  # reads what it keeps
    if inst.opcode == "dynamic-update-slice":
        return 2.0 * _nbytes(module, inst.operands[1]) if len(inst.operands) > 1 else 0.0
    if _is_library_matmul(inst) and inst.shape.is_tuple and inst.shape.elements:  # (result, workspace)
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape.elements[0]))
    if inst.opcode != "fusion":
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape))
    computation = _fused_computation(module, inst)
    if computation is None:
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape))
    in_place = _updated_in_place(module, computation)
    slices = any(part.opcode in _SLICES for part in computation.instructions)  # else no operand is only sliced
    parameters = computation.parameters  # by number: a fusion's operand i is its parameter i
    read = 0.0
    for position, name in enumerate(inst.operands):
        parameter = parameters[position] if position < len(parameters) else None
        if parameter is None or parameter.parameter_number != position:
            read += _nbytes(module, name)
        else:
            read += _read_bytes(computation, parameter, in_place, slices)
    return read + _written_bytes(module, computation)


def _read_bytes(computation: Computation, parameter: Instruction, in_place: set[str], slices: bool) -> float:
    """What a fusion reads of one operand: nothing of a buffer it updates in place, the slices
    of one it only slices, else all of it."""
    if parameter.name in in_place:
        return 0.0
    if not slices:
        return float(memory_bytes(parameter.shape))
    users = computation.users.get(parameter.name, ())
    if users and all(user.opcode in _SLICES and position == 0 for user, position in users):
        return float(sum(memory_bytes(user.shape) for user, _ in users))
    return float(memory_bytes(parameter.shape))


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
