"""The single steps a summed value may take on its way to a loop's accumulator, in a compiled module.

Each says of one instruction whether it keeps the value a linear function of the sum, as the
sum over devices needs to move out of the loop: a move or a slice, ``pad`` with zeros, a
``select`` against zero on a predicate the same on every device, a scaling by a factor the same
on every device, or an ``add`` of two of the same collective's values. The walk that strings
them into a path to the carry is :class:`shardscope.engine.hlo.verdicts.CompiledClassifier`'s.
"""

from __future__ import annotations

from shardscope.engine.hlo.flow import FORWARDING, Flow
from shardscope.engine.hlo.loop_facts import LoopFacts
from shardscope.engine.hlo.text import Computation, Instruction
from shardscope.collective_kinds import ALL_REDUCE

_ALL_REDUCE_DONE = f"{ALL_REDUCE}-done"
"""The end of an asynchronous all-reduce (a GPU's), whose result is the sum."""

ON_THE_WAY = FORWARDING | {"slice"}
"""Opcodes that carry the value on element for element (a slice keeps some of them)."""


class LinearSteps:
    """The linear steps of one module's values (the flow through fusions, the loops' facts)."""

    def __init__(self, flow: Flow, facts: LoopFacts) -> None:
        self.flow = flow
        self.facts = facts

    def of_collective(self, inst: Instruction | None, collective: Instruction) -> bool:
        """True when ``inst`` is made of ``collective``'s results alone (a combined one's
        elements), through moves, slices, zero padding and adds: adding it to another of them
        keeps the sum linear in the collective."""
        for _ in range(64):
            if inst is None:
                return False
            inst = self.flow.resolve(inst)
            if inst is collective:
                return True
            if inst.opcode == "add":  # a sum of its values (each layer's gradient padded into the stack)
                return all(self.of_collective(self.flow.producer(inst, k), collective) for k in (0, 1))
            if inst.opcode not in ON_THE_WAY | {"get-tuple-element", "dynamic-slice"} and not self.zero_padded(inst, 0):
                return False
            inst = self.flow.producer(inst, 0)
        return False

    def zero_padded(self, pad: Instruction, position: int) -> bool:
        """``pad(value, 0)``: the value placed among zeros (the transpose of a slice, as the
        gradient of one layer of stacked weights is), linear in it."""
        padding = self.flow.producer(pad, 1) if pad.opcode == "pad" and position == 0 else None
        return padding is not None and self.flow.is_zero(padding)

    def scales(self, user: Instruction, position: int, body: Computation, collective: Instruction) -> bool:
        """``value * c``, ``c * value``, ``value / c`` or ``-value`` with ``c`` the same on every
        device (a constant, the loop's induction variable: a mean's ``1/N``, a schedule's
        weight; or another all-reduce's result over the same devices, a normaliser summed in
        the loop): the sum over devices of a scaled value is the scaled sum, still linear."""
        op = user.opcode
        if op == "negate":
            return True
        if op == "multiply" or (op == "divide" and position == 0):
            factor = self.flow.producer(user, 1 - position)
            return self.facts.replicated(factor, body) or self.reduced_alike(factor, collective)
        return False

    def reduced_alike(self, inst: Instruction | None, collective: Instruction) -> bool:
        """True when ``inst`` is (broadcast, moved) the scalar result of another all-reduce over
        the same replica groups as ``collective``, whose own result is not a scalar: the same on
        every device that sums with it. Only a scalar, as XLA's pass takes it: two sums
        multiplied together are each linear given the other, but not both at once, and a
        scalar reaches a larger product only through a broadcast, where its own search stops."""
        if collective.shape.is_tuple or all(a.elements == 1 for a in collective.shape.arrays):
            return False  # a scalar sum itself: its factor could be a sum scaled by it in turn
        for _ in range(16):
            if inst is None:
                return False
            inst = self.flow.resolve(inst)
            if inst.opcode not in FORWARDING and inst.opcode != "broadcast":
                break
            inst = self.flow.producer(inst, 0)
        if inst is None or inst is collective or inst.opcode not in (ALL_REDUCE, _ALL_REDUCE_DONE):
            return False
        if inst.opcode == _ALL_REDUCE_DONE:
            inst = self.flow.producer(inst, 0)
        groups = collective.attribute("replica_groups")
        scalar = inst is not None and not inst.shape.is_tuple and all(a.elements == 1 for a in inst.shape.arrays)
        return inst is not None and scalar and groups is not None and inst.attribute("replica_groups") == groups \
            and inst.attribute("use_global_device_ids") == collective.attribute("use_global_device_ids")

    def selects_zero(self, select: Instruction, position: int, body: Computation) -> bool:
        """``select(p, value, 0)`` or ``select(p, 0, value)`` with ``p`` the same on every device:
        the value dropped in some iterations, linearly."""
        if position not in (1, 2):
            return False
        other = self.flow.producer(select, 3 - position)
        return other is not None and self.flow.is_zero(other) and self.facts.replicated(self.flow.producer(select, 0), body)
