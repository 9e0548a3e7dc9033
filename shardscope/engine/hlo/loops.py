"""How many times each while loop of a compiled module runs.

The CPU compiler writes the count into the loop's ``backend_config``
(``"known_trip_count":{"n":"4"}``); the TPU compiler writes none. Then the count is derived
as XLA's own ``ComputeWhileLoopTripCount`` (``xla/service/while_loop_analysis.cc``) does for
the loops JAX makes: the condition compares one tuple element of the carry (the induction
variable) with a bound, the body adds a constant step to that element, and the loop starts it
from a constant. Copies, converts and fusions (the CPU fuses the compare and the add) are
seen through. A loop that fits none of this (a ``lax.while_loop`` whose bound is data) has an
unknown count: ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.engine.hlo.flow import Flow
from shardscope.engine.hlo.memo import cached_method
from shardscope.engine.hlo.text import Computation, HloModule, Instruction

_PASS_THROUGH = frozenset({"copy", "convert", "bitcast", "reshape"})
_ARITHMETIC = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b}
_FLIPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


@dataclass(frozen=True)
class InductionVariable:
    """The carry element a loop counts with: it starts at ``start``, moves by ``step`` each
    iteration and the loop runs while ``value <direction> bound``."""

    index: int
    start: int
    step: int
    direction: str
    bound: int

    @property
    def trip_count(self) -> int | None:
        """How many iterations run (None when the loop never ends or the step skips the bound)."""
        return _iterations(self.start, self.step, self.direction, self.bound)


class LoopCounts:
    """The trip count of every while loop of one module (derived ones cached)."""

    def __init__(self, module: HloModule, flow: Flow | None = None) -> None:
        self.module = module
        self.flow = flow or Flow(module)

    @cached_method
    def trip_count(self, loop_name: str) -> int | None:
        """The count XLA wrote (``known_trip_count``), else the one derived from the loop's
        condition, body and initial carry; None when neither is known."""
        loop = self.module.instruction(loop_name)
        if loop is None or loop.opcode != "while":
            return None
        if loop.known_trip_count is not None:
            return loop.known_trip_count
        variable = self.induction_variable(loop_name)
        return variable.trip_count if variable is not None else None

    @cached_method
    def induction_variable(self, loop_name: str) -> InductionVariable | None:
        """The loop's induction variable, when its condition, body and start have the simple form."""
        loop = self.module.instruction(loop_name)
        condition, body = self._called(loop, "condition"), self._called(loop, "body")
        if loop is None or condition is None or body is None or condition.root is None or not condition.parameters:
            return None
        compare = self.flow.resolve(condition.root)
        if compare.opcode != "compare" or len(compare.operands) != 2:
            return None
        direction = compare.attribute("direction") or ""
        for side in (0, 1):
            index = self._carry_index(self.flow.producer(compare, side), condition)
            if index is None:
                continue
            bound = self._constant(self.flow.producer(compare, 1 - side), loop, condition)
            step = self._step(body, index)
            start = self._initial(loop, index)
            if bound is not None and step is not None and start is not None:
                return InductionVariable(index, start, step, direction if side == 0 else _FLIPPED.get(direction, ""),
                                         bound)
        return None

    # ------------------------------------------------------------------ the three parts

    def _step(self, body: Computation, index: int) -> int | None:
        """The constant the body adds to carry element ``index`` (negative for a subtraction)."""
        root = body.root
        if root is None or root.opcode != "tuple" or index >= len(root.operands):
            return None
        update = self._through(self.flow.producer(root, index))
        if update is None or update.opcode not in ("add", "subtract") or len(update.operands) != 2:
            return None
        for side in (0, 1):
            if self._carry_index(self.flow.producer(update, side), body) == index:
                step = self._constant(self.flow.producer(update, 1 - side), None, body)
                if step is None or (update.opcode == "subtract" and side == 1):
                    return None
                return -step if update.opcode == "subtract" else step
        return None

    def _initial(self, loop: Instruction, index: int) -> int | None:
        """The value the loop starts carry element ``index`` from, when it is a constant."""
        init = self.flow.producer(loop, 0)
        init = self._through(init)
        if init is None or init.opcode != "tuple" or index >= len(init.operands):
            return None
        return self._constant(self.flow.producer(init, index), None, None)

    def _carry_index(self, inst: Instruction | None, computation: Computation) -> int | None:
        """The tuple index when ``inst`` reads one element of ``computation``'s parameter."""
        inst = self._through(inst)
        param = computation.parameters[0] if computation.parameters else None
        if inst is None or param is None or inst.opcode != "get-tuple-element":
            return None
        return inst.tuple_index if inst.operands == (param.name,) else None

    def _constant(self, inst: Instruction | None, loop: Instruction | None, computation: Computation | None,
                  depth: int = 0) -> int | None:
        """The integer ``inst`` always computes: constants and arithmetic on them; inside the
        loop's condition, also a carry element the body passes through unchanged from a
        constant start (a bound the loop carries)."""
        inst = self._through(inst)
        if inst is None or depth > 16:
            return None
        if inst.opcode == "constant":
            return _integer(inst.literal)
        if inst.opcode in _ARITHMETIC and len(inst.operands) == 2:
            a, b = (self._constant(self.flow.producer(inst, k), loop, computation, depth + 1) for k in (0, 1))
            return None if a is None or b is None else _ARITHMETIC[inst.opcode](a, b)
        if loop is not None and computation is not None:
            index = self._carry_index(inst, computation)
            if index is not None and self._passed_through(loop, index):
                return self._initial(loop, index)
        return None

    def _passed_through(self, loop: Instruction, index: int) -> bool:
        """True when the body returns carry element ``index`` as it received it."""
        body = self._called(loop, "body")
        root = body.root if body is not None else None
        if body is None or root is None or root.opcode != "tuple" or index >= len(root.operands):
            return False
        return self._carry_index(self.flow.producer(root, index), body) == index

    def _through(self, inst: Instruction | None) -> Instruction | None:
        """``inst`` with copies, converts, bitcasts, reshapes and fusion boundaries removed."""
        while inst is not None:
            inst = self.flow.resolve(inst)
            if inst.opcode not in _PASS_THROUGH or not inst.operands:
                return inst
            inst = self.flow.producer(inst, 0)
        return None

    def _called(self, loop: Instruction | None, role: str) -> Computation | None:
        if loop is None:
            return None
        name = next((c for r, c in loop.called_computations if r == role), None)
        return self.module.computations.get(name or "")


def _integer(literal: str) -> int | None:
    """A scalar integer constant's value (``5``, ``-1``, ``true``); None for anything else."""
    text = literal.strip().strip("{}").strip()
    if text in ("true", "false"):
        return int(text == "true")
    try:
        return int(text)
    except ValueError:
        return None


def _iterations(start: int, step: int, direction: str, bound: int) -> int | None:
    """How often ``i = start; while i <direction> bound: i += step`` runs its body."""
    holds = {"LT": start < bound, "LE": start <= bound, "GT": start > bound, "GE": start >= bound,
             "NE": start != bound, "EQ": start == bound}.get(direction)
    if holds is None:
        return None
    if not holds:
        return 0
    if direction == "EQ":
        return 1 if step != 0 else None
    if step == 0 or (direction in ("LT", "LE") and step < 0) or (direction in ("GT", "GE") and step > 0):
        return None
    distance = abs(bound - start)
    size = abs(step)
    if direction == "NE":
        return distance // size if distance % size == 0 and (bound - start) * step > 0 else None
    if direction in ("LE", "GE"):
        return distance // size + 1
    return -(-distance // size)
