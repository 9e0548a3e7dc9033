"""Where a value of a compiled module goes and where it comes from, through fusions and calls.

The CPU compiler fuses the add of an accumulation into a loop fusion with the transposes and
copies before it, so a walk along def-use edges must see through fusion boundaries: a fusion's
operand ``k`` is its fused computation's ``parameter(k)``, and the fused root is the fusion's
result. :class:`Flow` gives that view: :meth:`uses` and :meth:`producer` cross into and out of
fused computations; everything else stays inside one computation (loops are the callers' job).
"""

from __future__ import annotations

import functools
import re
from typing import Iterator

from shardscope.engine.hlo_text import Computation, HloModule, Instruction

FORWARDING = frozenset({"bitcast", "convert", "reshape", "transpose", "copy"})
"""Opcodes that move a value without combining it with another one (element for element)."""


class Flow:
    """Def-use walks over one module, fusions transparent."""

    def __init__(self, module: HloModule) -> None:
        self.module = module

    @functools.cached_property
    def fusion_of(self) -> dict[str, Instruction]:
        """``{fused computation: the one fusion instruction that calls it}``."""
        found: dict[str, Instruction] = {}
        for inst in self.module.instructions():
            if inst.opcode == "fusion":
                for role, callee in inst.called_computations:
                    if role == "calls":
                        found[callee] = inst
        return found

    def computation(self, inst: Instruction) -> Computation:
        """The computation ``inst`` sits in."""
        return self.module.computations[inst.computation]

    def uses(self, inst: Instruction) -> Iterator[tuple[Instruction, int]]:
        """``(user, operand position)`` of every use of ``inst``'s result, a fusion's uses seen
        as the uses of its fused computation's parameter, and a fused root's as its fusion's."""
        computation = self.computation(inst)
        for user, position in computation.users.get(inst.name, ()):
            if user.opcode == "fusion":
                inner = self._fused_parameter(user, position)
                if inner is not None:
                    yield from self.uses(inner)
                    continue
            yield user, position
        if inst is computation.root and computation.name in self.fusion_of:
            yield from self.uses(self.fusion_of[computation.name])

    def producer(self, inst: Instruction, position: int) -> Instruction | None:
        """The instruction behind ``inst``'s operand ``position``: inside a fusion's computation
        when the operand is a fusion (its root), outside when it is a fused parameter."""
        if position >= len(inst.operands):
            return None
        found = self.module.instruction(inst.operands[position])
        return self.resolve(found) if found is not None else None

    def resolve(self, inst: Instruction) -> Instruction:
        """``inst`` with fusion boundaries removed: a fusion is its fused root, a fused
        computation's parameter the fusion's operand (repeatedly)."""
        while True:
            if inst.opcode == "fusion":
                callee = next((c for role, c in inst.called_computations if role == "calls"), None)
                root = self.module.computations[callee].root if callee in self.module.computations else None
                if root is None:
                    return inst
                inst = root
                continue
            if inst.opcode == "parameter" and inst.computation in self.fusion_of:
                fusion = self.fusion_of[inst.computation]
                number = inst.parameter_number or 0
                outer = self.module.instruction(fusion.operands[number]) if number < len(fusion.operands) else None
                if outer is None:
                    return inst
                inst = outer
                continue
            return inst

    def _fused_parameter(self, fusion: Instruction, position: int) -> Instruction | None:
        callee = next((c for role, c in fusion.called_computations if role == "calls"), None)
        computation = self.module.computations.get(callee or "")
        if computation is None or self.fusion_of.get(computation.name) is not fusion:
            return None
        params = computation.parameters
        return params[position] if position < len(params) else None

    def is_zero(self, inst: Instruction, depth: int = 0) -> bool:
        """True for a constant zero, or a broadcast or forwarding of one (through fusions)."""
        inst = self.resolve(inst)
        if depth > 8:
            return False
        if inst.opcode == "constant":
            return _ZERO.fullmatch(inst.literal) is not None
        if inst.opcode == "broadcast" or inst.opcode in FORWARDING:
            source = self.producer(inst, 0)
            return source is not None and self.is_zero(source, depth + 1)
        return False


_ZERO = re.compile(r"\{?\s*-?0(\.0*)?(e[+-]?0+)?\s*\}?|false")
