"""The single steps a summed value may take on its way to a loop's accumulator, in a compiled module.

Each rule says of one instruction reading the value (at one operand position) whether its
result is still a linear function of the values being accumulated, as moving the sum over
devices out of the loop needs: the sum of each device's result must be the result of the sum.
That holds for moves and slices, ``pad`` and ``reduce`` with zeros, ``add``/``subtract``/
``concatenate`` with other linear values, a ``select`` (or a slice's offsets) the same on every
device, a scaling by a factor the same on every device, a ``dynamic-update-slice`` into a
buffer that is linear too, and a scatter-add into a linear buffer (or of a linear update at
indices the same on every device). One step is linear with a coefficient that differs between
devices: a ``select`` against zeros that keeps the value on exactly one device of each group
(``masks``); the walk lets it go on only into another sum over the same groups
(:mod:`shardscope.engine.hlo.accumulation` says why that sum undoes it). It holds for no other step: a ``maximum``, a comparison, a dot with
a device's own data, a collective. What a step needs of its other operands (linear too, or
independent of the accumulated values) is checked once the walk is done
(:mod:`shardscope.engine.hlo.accumulation`), since a value may reach it later.

The rules are a table, one per opcode (as XLA's own ``WhileLoopAllReduceCodeMotion`` lists the
steps it accepts); :class:`LinearSteps` looks them up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from shardscope.engine.hlo.flow import FORWARDING, Flow
from shardscope.engine.hlo.loop_facts import LoopFacts
from shardscope.engine.hlo.replication import Replication
from shardscope.engine.hlo.text import Instruction
from shardscope.collective_kinds import ALL_REDUCE, ALL_REDUCE_DONE

FOLLOW, DROPPED, FAIL = "follow", "dropped", "fail"


ON_THE_WAY = FORWARDING | {"slice"}
"""Opcodes that carry the value on element for element (a slice keeps some of them)."""

_MOVES = ON_THE_WAY | {"negate", "reverse", "broadcast"}


@dataclass(frozen=True)
class Step:
    """What one instruction does with the accumulated value it reads.

    ``kind``: ``follow`` (its result is linear in it: go on from there), ``dropped`` (it drops it:
    a ``select`` on a constant that takes the other operand) or ``fail``. ``linear`` are the
    other operands that must be linear in the accumulated values too (or zero), ``clean`` those
    that must not depend on them (a factor, a predicate, offsets); ``stacked`` when the value is
    written into a slot (a dynamic-update-slice's update), ``scattered`` when only the device's
    own shard of it goes on (a dynamic-slice at offsets from the device's id), ``mixes`` when the
    result is no longer the sum alone, ``masks`` when it keeps the value on one device of each
    group and zeros elsewhere."""

    kind: str
    linear: tuple[int, ...] = ()
    clean: tuple[int, ...] = ()
    stacked: bool = False
    scattered: bool = False
    mixes: bool = False
    masks: bool = False


_FAIL = Step(FAIL)
_FOLLOW = Step(FOLLOW)


class LinearSteps:
    """The linear steps of one module's values for one collective's groups (the flow through
    fusions, the loops' facts, what is the same on every device)."""

    def __init__(self, flow: Flow, facts: LoopFacts, replication: Replication, factors: Replication) -> None:
        self.flow = flow
        self.facts = facts
        self.replication = replication
        self.factors = factors

    def step(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        """What ``user`` does with the accumulated value it reads at ``position`` (``pure``: the
        value is the collective's sum alone, not yet mixed with a carry) inside ``loop``."""
        if user.opcode in _MOVES:
            return _FOLLOW if position == 0 else _FAIL
        rule = _RULES.get(user.opcode)
        return rule(self, user, position, pure, loop, collective) if rule is not None else _FAIL

    def same_everywhere(self, inst: Instruction | None) -> bool:
        """True when ``inst`` is the same on every device of the collective's groups."""
        return inst is not None and self.replication.replicated(self.flow.resolve(inst))

    def factor_same_everywhere(self, inst: Instruction | None) -> bool:
        """True when ``inst`` is the same on every device without being another sum's result
        (only a scalar sum may be a factor: :meth:`reduced_alike`)."""
        return inst is not None and self.factors.replicated(self.flow.resolve(inst))

    def operands_same_everywhere(self, inst: Instruction, first: int) -> bool:
        """The operands of ``inst`` from ``first`` on (a slice's offsets) are the same on every device."""
        return all(self.same_everywhere(self.flow.producer(inst, k)) for k in range(first, len(inst.operands)))

    def zero_value(self, inst: Instruction | None) -> bool:
        """True for a zero, or a ``select`` on a constant predicate that takes one (a reset the
        compiler did not fold)."""
        for _ in range(8):
            if inst is None:
                return False
            inst = self.flow.resolve(inst)
            if self.flow.is_zero(inst):
                return True
            if inst.opcode != "select":
                return False
            constant = self._constant_predicate(self.flow.producer(inst, 0))
            if constant is None:
                return False
            inst = self.flow.producer(inst, 1 if constant else 2)
        return False

    def adds(self, inst: Instruction) -> bool:
        """``inst`` (a scatter, an all-reduce) combines values with a computation that adds its two parameters."""
        combiner = self.flow.module.computations.get((inst.attribute("to_apply") or "").lstrip("%"))
        root = combiner.root if combiner is not None else None
        return combiner is not None and root is not None and root.opcode == "add" \
            and sorted(root.operands) == sorted(p.name for p in combiner.parameters)

    def zero(self, inst: Instruction, position: int) -> bool:
        """Operand ``position`` of ``inst`` is a zero (a constant, or a broadcast of one)."""
        found = self.flow.producer(inst, position)
        return found is not None and self.flow.is_zero(found)

    # ------------------------------------------------------------------ the rules

    def _pad(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        return _FOLLOW if position == 0 and self.zero(user, 1) else _FAIL

    def _reduce(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        """A sum of elements (``reduce`` by an add from zero) is linear."""
        if position != 0 or len(user.operands) != 2 or not self.zero(user, 1):
            return _FAIL
        combiner = self.flow.module.computations.get((user.attribute("to_apply") or "").lstrip("%"))
        root = combiner.root if combiner is not None else None
        return _FOLLOW if root is not None and root.opcode == "add" else _FAIL

    def _added(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        if len(user.operands) != 2:
            return _FAIL
        return Step(FOLLOW, linear=(1 - position,), mixes=True)

    def _concatenated(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        return Step(FOLLOW, linear=tuple(k for k in range(len(user.operands)) if k != position), mixes=True)

    def _multiplied(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        """``value * c`` with ``c`` the same on every device (a mean's ``1/N``, a schedule's
        weight; or another all-reduce's scalar over the same devices, a normaliser summed in the
        loop): the sum over devices of a scaled value is the scaled sum."""
        if len(user.operands) != 2:
            return _FAIL
        factor = self.flow.producer(user, 1 - position)
        if self.reduced_alike(factor, collective):
            return _FOLLOW
        return Step(FOLLOW, clean=(1 - position,)) if self.factor_same_everywhere(factor) else _FAIL

    def _divided(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        if position != 0 or not self.factor_same_everywhere(self.flow.producer(user, 1)):
            return _FAIL
        return Step(FOLLOW, clean=(1,))

    def _selected(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        """``select(p, value, other)`` with ``p`` the same on every device: linear when ``other``
        is (a zero drops the value in some iterations; T5X's merge keeps the running total in
        others); a constant ``p`` takes one operand always (the other is dropped)."""
        if position not in (1, 2):
            return _FAIL
        predicate = self.flow.producer(user, 0)
        constant = self._constant_predicate(predicate)
        if constant is not None:
            return _FOLLOW if constant == (position == 1) else Step(DROPPED)
        if self.same_everywhere(predicate):
            return Step(FOLLOW, linear=(3 - position,), clean=(0,), mixes=True)
        if self.zero(user, 3 - position) and self.replication.one_device_keeps(predicate, position == 1):
            return Step(FOLLOW, clean=(0,), masks=True)
        return _FAIL

    def _scattered_add(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        """``scatter(buffer, indices, updates)`` that adds: ``buffer`` plus the updates placed at
        the indices. Linear in the buffer (the updates added in), and in the updates when the
        indices are the same on every device (the buffer added in)."""
        if len(user.operands) != 3 or not self.adds(user):
            return _FAIL
        if position == 0:
            return Step(FOLLOW, linear=(2,), clean=(1,), mixes=True)
        if position == 2 and self.same_everywhere(self.flow.producer(user, 1)):
            return Step(FOLLOW, linear=(0,), clean=(1,), mixes=True)
        return _FAIL

    def _sliced(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        """A ``dynamic-slice`` at offsets the same on every device; at offsets from the device's id
        that the loop does not change, the device's own shard of the sum (the partitioner's
        reduce-scatter written as an all-reduce and a slice): a sum alone may take it."""
        if position != 0:
            return _FAIL
        offsets = tuple(range(1, len(user.operands)))
        if self.operands_same_everywhere(user, 1):
            return Step(FOLLOW, clean=offsets)
        if pure and self.facts.offsets_fixed(user, loop):
            return Step(FOLLOW, scattered=True)
        return _FAIL

    def _updated(self, user: Instruction, position: int, pure: bool, loop: Instruction, collective: Instruction) -> Step:
        """``dynamic-update-slice(buffer, update, offsets)`` with offsets the same on every device:
        linear in the buffer and the update together."""
        if position not in (0, 1) or not self.operands_same_everywhere(user, 2):
            return _FAIL
        offsets = tuple(range(2, len(user.operands)))
        return Step(FOLLOW, linear=(1 - position,), clean=offsets, stacked=position == 1, mixes=True)

    # ------------------------------------------------------------------ helpers

    def _constant_predicate(self, inst: Instruction | None) -> bool | None:
        """The value of a predicate that is a constant (or a broadcast of one), else None."""
        for _ in range(8):
            if inst is None:
                return None
            inst = self.flow.resolve(inst)
            if inst.opcode == "constant":
                text = inst.literal.strip().strip("{}").strip()
                return {"true": True, "false": False}.get(text)
            if inst.opcode not in ("broadcast", "copy", "bitcast", "reshape"):
                return None
            inst = self.flow.producer(inst, 0)
        return None

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
        if inst is None or inst is collective or inst.opcode not in (ALL_REDUCE, ALL_REDUCE_DONE):
            return False
        if inst.opcode == ALL_REDUCE_DONE:
            inst = self.flow.producer(inst, 0)
        groups = collective.attribute("replica_groups")
        scalar = inst is not None and not inst.shape.is_tuple and all(a.elements == 1 for a in inst.shape.arrays)
        return inst is not None and scalar and groups is not None and inst.attribute("replica_groups") == groups \
            and inst.attribute("use_global_device_ids") == collective.attribute("use_global_device_ids")


_RULES: dict[str, Callable[..., Step]] = {
    "pad": LinearSteps._pad,
    "reduce": LinearSteps._reduce,
    "add": LinearSteps._added,
    "subtract": LinearSteps._added,
    "concatenate": LinearSteps._concatenated,
    "multiply": LinearSteps._multiplied,
    "divide": LinearSteps._divided,
    "select": LinearSteps._selected,
    "dynamic-slice": LinearSteps._sliced,
    "dynamic-update-slice": LinearSteps._updated,
    "scatter": LinearSteps._scattered_add,
}
"""The steps other than moves, by opcode (anything not here is not linear)."""
