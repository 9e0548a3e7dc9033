"""The work of a compiled module: each instruction's flops and memory bytes, loops counted.

XLA's ``cost_analysis()`` counts a while body once (and raises on the compile-only GPU
executable); here each instruction the module runs is counted as often as it runs per call:
the trip counts of the loops around it (:class:`~shardscope.engine.hlo.loops.LoopCounts`)
multiplied together. For each instruction that runs on its own (an instruction of the entry, a
loop body or condition, a called computation; a fusion counts as one):

- **flops** (:mod:`~shardscope.engine.hlo.flops`: a rule per opcode, a fusion's those of what
  it fuses);
- **bytes** moved to and from the device's main memory at its boundary
  (:mod:`~shardscope.engine.hlo.traffic`: slices read what they keep, in-place updates write
  their update, on-chip buffers move none).

Collectives are not counted here: their time is the interconnect's
(:attr:`ModuleWork.collectives` lists them for that model). Both prints of a module (the CPU's,
a target's) read alike; sizes are logical (a TPU's tile padding is left out).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shardscope.engine.hlo.band import call_kinds, outside_band_kinds
from shardscope.engine.hlo.flops import (FREE_OPCODES, FlopCount, accessed_bytes, flop_counts, launches_kernel,
                                         unmodelled_parts)
from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.sites import COLLECTIVE_OPCODES
from shardscope.engine.hlo.text import Computation, HloModule, Instruction, Shape
from shardscope.engine.hlo.traffic import boundary_bytes


UNKNOWN_LOOP = "while loop of unknown trip count"
"""How :attr:`ModuleWork.unmodelled` names a loop whose iterations the module does not fix."""


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
    counts: tuple[FlopCount, ...] = ()
    """The flops by kind (dtype, matrix unit, precision): a fusion's parts may differ; a
    gather's accesses too (:attr:`FlopCount.access`, not in :attr:`flops`)."""
    accessed_bytes: float = 0.0
    """Of :attr:`bytes`, those a gather reads row by row from main memory (per run): timed by
    its accesses, not at the streaming bandwidth."""
    launches: bool = True
    """Whether it runs as a kernel of its own (not an asynchronous start, nor a call that only
    allocates or relabels): each run outside a loop pays the chip's
    :attr:`~shardscope.hardware.chips.Chip.kernel_s`."""
    looped: bool = False
    """Whether it runs in a while loop's body or condition (its launches are in the loop's
    per-iteration overhead)."""
    computation: str = ""
    """The computation it runs in (a loop's body: ``windowed_dot_general_body_rs``)."""
    steps_collective: bool = False
    """Whether it is XLA:TPU's async collective fusion, a step of a collective beside its own
    compute (the collective's time overlaps this work by construction)."""

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
    unmodelled: tuple[tuple[str, int], ...] = ()
    """What the estimate has no rule for, with how many instructions of each (``("sort", 2)``,
    ``("top-k", 1)``, ``("while loop of unknown trip count", 1)``): with any, the estimate is a
    lower bound."""
    outside_band: tuple[tuple[str, int], ...] = ()
    """Instructions of the kinds a chip's corpus measured outside the estimate's band, with how
    many of each (:mod:`~shardscope.engine.hlo.band`: ``("grouped convolution", 1)``)."""
    arguments: int = 0
    """The arrays a call takes (the entry's parameters, a tuple's leaves counted): the host hands
    each one to the chip (:attr:`~shardscope.hardware.chips.Chip.argument_s`)."""
    results: int = 0
    """The arrays a call returns (the leaves of the entry's root): the host makes an array of each
    (:attr:`~shardscope.hardware.chips.Chip.result_s`)."""

    @property
    def kernels(self) -> int:
        """Kernel launches per call outside loops: every instruction but the starts of asynchronous
        copies and slices (which only queue a transfer) and the calls that only allocate or relabel
        (:data:`~shardscope.engine.hlo.flops.NO_TIME_CALLS`). A loop's kernels are left out: its
        iterations have their own overhead, measured with their kernels in it."""
        return sum(i.runs for i in self.instructions if i.launches and not i.looped)

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
        self.unmodelled: dict[str, int] = {}
        self.outside_band: dict[str, int] = {}
        self.loops = 0

    def run(self) -> ModuleWork:
        entry = self.module.entry
        if entry is not None:
            self.computation(entry, 1, 0)
        unknown = tuple(dict.fromkeys(self.unknown))
        if unknown:
            self.unmodelled[UNKNOWN_LOOP] = len(unknown)
        arguments = sum(_leaves(p.shape) for p in entry.parameters) if entry is not None else 0
        root = entry.root if entry is not None else None
        results = _leaves(root.shape) if root is not None else 0
        kinds = tuple(self.outside_band.items()) + tuple(call_kinds(arguments, results))
        return ModuleWork(tuple(self.found), self.iterations, unknown, self.conditionals, tuple(self.collectives),
                          tuple(self.unmodelled.items()), kinds, arguments, results)

    def computation(self, computation: Computation, runs: int, depth: int) -> None:
        if depth > 64:
            return
        for inst in computation.instructions:
            self.instruction(inst, runs, depth, computation.name)

    def instruction(self, inst: Instruction, runs: int, depth: int, where: str = "") -> None:
        opcode = inst.opcode
        if opcode in COLLECTIVE_OPCODES or _is_wrapped_collective(self.module, inst):
            self.collectives.append((inst.name, runs))
            if opcode == "fusion" and any(not c.access and c.flops for c in flop_counts(self.module, inst)):
                # XLA:TPU's async collective fusion: the compute it overlaps with the collective (a
                # layer's matmul beside its weights' all-gather) runs in the same fusion
                self.found.append(replace(self.cost(inst, runs, where), steps_collective=True))
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
        elif opcode not in FREE_OPCODES and not opcode.endswith("-done"):
            self.found.append(self.cost(inst, runs, where))

    def loop(self, inst: Instruction, runs: int, depth: int) -> None:
        trips = self.counts.trip_count(inst.name)
        if trips is None:
            self.unknown.append(inst.name)
            trips = 1
        self.iterations += runs * trips
        self.loops += 1
        for role, name in inst.called_computations:
            self.called(name, runs * (trips + 1 if role == "condition" else trips), depth)
        self.loops -= 1

    def called(self, name: str, runs: int, depth: int) -> None:
        computation = self.module.computations.get(name)
        if computation is not None:
            self.computation(computation, runs, depth + 1)

    def cost(self, inst: Instruction, runs: int, where: str = "") -> InstructionWork:
        for label in unmodelled_parts(self.module, inst):
            self.unmodelled[label] = self.unmodelled.get(label, 0) + 1
        for kind in outside_band_kinds(self.module, inst):
            self.outside_band[kind] = self.outside_band.get(kind, 0) + 1
        counts = flop_counts(self.module, inst)
        flops = [c for c in counts if not c.access]  # a gather's rows and pieces are accesses, not flops
        largest = flops[0] if flops else FlopCount(0.0, inst.shape.arrays[0].dtype if inst.shape.arrays else "", "vector")
        return InstructionWork(inst.name, inst.opcode, inst.metadata.op_name, sum(c.flops for c in flops),
                               boundary_bytes(self.module, inst), largest.dtype, largest.matmul, runs, counts,
                               accessed_bytes(self.module, inst), launches_kernel(inst), self.loops > 0, where)


def _leaves(shape: Shape) -> int:
    """How many arrays ``shape`` holds (a tuple's leaves, nested tuples opened)."""
    return 1 if shape.array is not None else sum(_leaves(element) for element in shape.elements)


def _is_wrapped_collective(module: HloModule, inst: Instruction) -> bool:
    """An async-start or fusion whose computation holds a collective (the GPU's and TPU's wrapped forms)."""
    if inst.opcode not in ("async-start", "fusion"):
        return False
    for role, name in inst.called_computations:
        computation = module.computations.get(name)
        if computation is not None and any(i.opcode in COLLECTIVE_OPCODES for i in computation.instructions):
            return True
    return False
