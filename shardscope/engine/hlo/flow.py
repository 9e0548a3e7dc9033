"""Where a value of a compiled module goes and where it comes from, through fusions and calls.

The CPU compiler fuses the add of an accumulation into a loop fusion with the transposes and
copies before it, and wraps some loops in a ``call`` of their own (``xla_cpu_small_call``), so
a walk along def-use edges must see through those boundaries: the operand ``k`` of a fusion
or a call is its computation's ``parameter(k)``, and that computation's root is its result.
An ``async-start`` hands its operands to the computation it wraps the same way. :class:`Flow`
gives that view: :meth:`uses` and :meth:`producer` cross into and out of such computations;
loops and conditionals stay boundaries (they are the callers' job).
"""

from __future__ import annotations

import functools
import re
from typing import Iterator

from shardscope.engine.hlo.text import Computation, HloModule, Instruction

FORWARDING = frozenset({"bitcast", "convert", "reshape", "transpose", "copy"})
"""Opcodes that move a value without combining it with another one (element for element)."""

_INLINE_CALLS = {"fusion": ("calls",), "call": ("to_apply", "calls"), "async-start": ("calls",),
                 "fusion-start": ("calls",)}
"""The instructions whose computation runs as part of them, by the role it is called in."""

_SPLIT_FUSION = ("fusion-start", "fusion-done")
"""The GPU's asynchronous fusion (jax 0.12): the start reads the operands, the done gives the
fused computation's result."""


class Flow:
    """Def-use walks over one module, fusions transparent."""

    def __init__(self, module: HloModule) -> None:
        self.module = module

    @functools.cached_property
    def inlined_by(self) -> dict[str, Instruction]:
        """``{computation: the one fusion, call or async-start that runs it inline}``.

        A computation called from several places (never after XLA flattened the call graph)
        is left out: its parameters stay where they are.
        """
        found: dict[str, Instruction] = {}
        shared: set[str] = set()
        for inst in self.module.instructions():
            if inst.opcode in _INLINE_CALLS:
                for role, callee in inst.called_computations:
                    if role in _INLINE_CALLS[inst.opcode]:
                        shared |= {callee} if callee in found else set()
                        found[callee] = inst
        return {name: inst for name, inst in found.items() if name not in shared}

    def computation(self, inst: Instruction) -> Computation:
        """The computation ``inst`` sits in."""
        return self.module.computations[inst.computation]

    def uses(self, inst: Instruction) -> Iterator[tuple[Instruction, int]]:
        """``(user, operand position)`` of every use of ``inst``'s result, a fusion's uses seen
        as the uses of its fused computation's parameter, and a fused root's as its fusion's."""
        computation = self.computation(inst)
        for user, position in computation.users.get(inst.name, ()):
            if user.opcode in ("fusion", "call", _SPLIT_FUSION[0]):
                inner = self._fused_parameter(user, position)
                if inner is not None:
                    yield from self.uses(inner)
                    continue
            yield user, position
        caller = self.inlined_by.get(computation.name)
        if inst is computation.root and caller is not None and caller.opcode == _SPLIT_FUSION[0]:
            for done, _ in self.computation(caller).users.get(caller.name, ()):
                if done.opcode == _SPLIT_FUSION[1]:
                    yield from self.uses(done)
        elif inst is computation.root and caller is not None and caller.opcode != "async-start":
            yield from self.uses(caller)

    def producer(self, inst: Instruction, position: int) -> Instruction | None:
        """The instruction behind ``inst``'s operand ``position``: inside a fusion's computation
        when the operand is a fusion (its root), outside when it is a fused parameter."""
        if position >= len(inst.operands):
            return None
        found = self.module.instruction(inst.operands[position])
        return self.resolve(found) if found is not None else None

    def resolve(self, inst: Instruction) -> Instruction:
        """``inst`` with fusion and call boundaries removed: a fusion or a call is its
        computation's root, that computation's parameter the caller's operand (repeatedly)."""
        while True:
            if inst.opcode == _SPLIT_FUSION[1] and inst.operands:
                start = self.module.instruction(inst.operands[0])
                if start is None or start.opcode != _SPLIT_FUSION[0]:
                    return inst
                inst = start
            if inst.opcode in ("fusion", "call", _SPLIT_FUSION[0]):
                callee = next((c for role, c in inst.called_computations if role in _INLINE_CALLS[inst.opcode]), None)
                root = self.module.computations[callee].root if callee is not None and callee in self.module.computations else None
                if root is None:
                    return inst
                inst = root
                continue
            if inst.opcode == "parameter" and inst.computation in self.inlined_by:
                fusion = self.inlined_by[inst.computation]
                number = inst.parameter_number or 0
                outer = self.module.instruction(fusion.operands[number]) if number < len(fusion.operands) else None
                if outer is None:
                    return inst
                inst = outer
                continue
            return inst

    def _fused_parameter(self, fusion: Instruction, position: int) -> Instruction | None:
        roles = _INLINE_CALLS.get(fusion.opcode, ())
        callee = next((c for role, c in fusion.called_computations if role in roles), None)
        computation = self.module.computations.get(callee or "")
        if computation is None or self.inlined_by.get(computation.name) is not fusion:
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


    def is_constant(self, inst: Instruction, depth: int = 0) -> bool:
        """True for a constant, or a broadcast or forwarding of one (through fusions): the same
        value on every device."""
        inst = self.resolve(inst)
        if depth > 8:
            return False
        if inst.opcode == "constant":
            return True
        if inst.opcode == "broadcast" or inst.opcode in FORWARDING:
            source = self.producer(inst, 0)
            return source is not None and self.is_constant(source, depth + 1)
        return False


_ZERO = re.compile(r"\{?\s*-?0(\.0*)?(e[+-]?0+)?\s*\}?|false")
