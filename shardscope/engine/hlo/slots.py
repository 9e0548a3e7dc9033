"""Whether each iteration writes a collective's result into its own slot of a stacked carry.

``losses.at[i].set(psum(loss))``, a scan's stacked outputs, XLA's own dynamic-update-slice
patterns: the collective's result (moved, reshaped, converted) is the update of a
``dynamic-update-slice`` (or of a chain of them) into a carry element that the loop reads for
nothing else, at offsets the same on every device. Then each device can write its own value
into the slot and one collective of the written slots after the loop gives every slot what the
collective in the loop gave it: whatever the combiner (a sum, a maximum, a minimum, a product),
since each slot combines its own values only. ``.at[i].set`` writes through a ``select`` that
keeps the slot's old value when the index is out of bounds (the same decision on every device).

The slots the loop never writes must come out of the collective after the loop as they went in:
either the buffer starts as the combiner leaves it (zeros for a sum or a product, a value the
same on every device for a maximum or a minimum), or the written slots are known, as XLA's
``WhileLoopAllReduceCodeMotion`` requires: the loop counts from 0 by 1, and each iteration
writes slot ``i`` (or ``bound - i``) of a dimension the update has size 1 in, at constant
offsets elsewhere; then the collective after the loop takes those slots only.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from shardscope.engine.hlo.flow import Flow
from shardscope.engine.hlo.linear_steps import LinearSteps
from shardscope.engine.hlo.loop_facts import LoopFacts
from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.text import Computation, Instruction

_MOVES = frozenset({"bitcast", "reshape", "convert", "copy", "transpose"})


@dataclass(frozen=True)
class Slot:
    """Each iteration's value goes into its own slot of carry element ``carry``; one collective
    after the loop moves ``buffer_bytes`` per device (the written slots, in the collective's type)."""

    carry: int
    buffer_bytes: int


class SlotFinder:
    """Stacked slots in one module's loops."""

    def __init__(self, flow: Flow, facts: LoopFacts, counts: LoopCounts) -> None:
        self.flow = flow
        self.facts = facts
        self.counts = counts

    def slot(self, value: Instruction, element: int | None, loop: Instruction, body: Computation, combiner: str,
             steps: LinearSteps, value_bytes: int) -> Slot | None:
        """The slot ``value`` (its tuple element ``element``) is written into each iteration of ``loop``, if any."""
        start = self._element(value, element)
        if start is None:
            return None
        found = self._chain(start, body, steps)
        if found is None:
            return None
        carry, chain, kept = found
        if not self._only_written(body, carry, chain[-1], kept):
            return None
        region = self._region(chain, loop, start)
        if region is None and (len(chain) > 1 or not self._neutral_start(loop, carry, combiner)):
            return None
        # per slot element, what the collective moves: its operand's bytes (a reduce-scatter's
        # whole unscattered value, in the collective's own type)
        element_bytes = value_bytes // max(1, prod(a.elements for a in start.shape.arrays))
        if region is not None:
            return Slot(carry, region * element_bytes)
        root = body.root
        carried = root.shape.element(carry) if root is not None and root.shape.is_tuple else None
        elements = sum(a.elements for a in carried.arrays) if carried is not None else 0
        return Slot(carry, elements * element_bytes)

    def _element(self, value: Instruction, element: int | None) -> Instruction | None:
        if element is None:
            return value
        taken = [u for u, _ in self.flow.uses(value) if u.opcode == "get-tuple-element" and u.tuple_index == element]
        return taken[0] if len(taken) == 1 else None

    def _chain(self, start: Instruction, body: Computation, steps: LinearSteps
               ) -> tuple[int, list[Instruction], Instruction | None] | None:
        """``(carry index, the dynamic-update-slices written through, the slice of the old slot a
        select keeps)``: the value's one path to the body's result, else None."""
        current, kept = start, None
        chain: list[Instruction] = []
        for _ in range(64):
            uses = list(self.flow.uses(current))
            if len(uses) != 1:
                return None
            user, position = uses[0]
            if user is body.root:
                return (position, chain, kept) if chain else None
            if user.opcode in _MOVES:
                current = user
                continue
            if user.opcode == "select" and position in (1, 2) and kept is None:
                kept = self._keeps_old_slot(user, position, steps)
                if kept is None:
                    return None
                current = user
                continue
            if user.opcode == "dynamic-update-slice" and position == 1 and steps.operands_same_everywhere(user, 2):
                if kept is not None and not self._same_slot(kept, user):
                    return None
                chain.append(user)
                current = user
                continue
            return None
        return None

    def _keeps_old_slot(self, select: Instruction, position: int, steps: LinearSteps) -> Instruction | None:
        """``select(p, value, old)`` with ``p`` the same on every device and ``old`` a slice of
        the slot being written (``.at[i].set`` drops an out-of-bounds write this way)."""
        old = self.flow.producer(select, 3 - position)
        if old is None or old.opcode != "dynamic-slice" or not steps.same_everywhere(self.flow.producer(select, 0)):
            return None
        return old

    def _same_slot(self, old: Instruction, update: Instruction) -> bool:
        """The slice ``old`` reads the slot ``update`` writes: the same buffer, the same offsets."""
        offsets = [self.flow.producer(old, k) for k in range(1, len(old.operands))]
        written = [self.flow.producer(update, k) for k in range(2, len(update.operands))]
        same_buffer = self.flow.producer(old, 0) is self.flow.producer(update, 0)
        return same_buffer and len(offsets) == len(written) and all(a is b for a, b in zip(offsets, written))

    def _only_written(self, body: Computation, carry: int, last: Instruction, kept: Instruction | None) -> bool:
        """The carry element is the last update's buffer and is read for nothing else (but the
        old slot a select keeps), nor by the loop's condition."""
        param = body.parameters[0] if body.parameters else None
        buffer = self.flow.producer(last, 0)
        while buffer is not None and buffer.opcode in ("bitcast", "copy"):
            buffer = self.flow.producer(buffer, 0)
        if param is None or buffer is None or buffer.opcode != "get-tuple-element" or buffer.tuple_index != carry \
                or buffer.operands != (param.name,):
            return False
        readers = set()
        stack = [buffer]
        while stack:
            for user, _ in self.flow.uses(stack.pop()):
                if user.opcode in ("bitcast", "copy"):
                    stack.append(user)
                else:
                    readers.add(user.name)
        allowed = {last.name} | ({kept.name} if kept is not None else set())
        gtes = [u for u, _ in body.users.get(param.name, ()) if u.opcode != "get-tuple-element" or u.tuple_index == carry]
        return readers <= allowed and gtes == [buffer] and not self.facts.condition_reads(body, carry)

    def _neutral_start(self, loop: Instruction, carry: int, combiner: str) -> bool:
        """The buffer starts as the combiner leaves it: the slots no iteration writes combine,
        after the loop, to what they were (zeros for a sum or a product, a value the same on
        every device for a maximum or minimum)."""
        init = self.flow.producer(loop, 0)
        element = self.flow.producer(init, carry) if init is not None and init.opcode == "tuple" else None
        if element is None:
            return False
        return self.flow.is_zero(element) if combiner in ("add", "multiply") else self.flow.is_constant(element)

    def _region(self, chain: list[Instruction], loop: Instruction, start: Instruction) -> int | None:
        """How many elements the iterations write, when the loop counts from 0 by 1 and every
        update writes slot ``i`` (or ``bound - i``) of a dimension it has size 1 in, at constant
        offsets elsewhere (XLA's rule); None otherwise."""
        variable = self.counts.induction_variable(loop.name)
        trips = variable.trip_count if variable is not None else None
        if variable is None or variable.start != 0 or variable.step != 1 or not trips:
            return None
        first = self.flow.producer(chain[0], 1)
        dims = list(first.shape.arrays[0].dims) if first is not None and first.shape.arrays else []
        stacked = False
        for dus in chain:
            update = self.flow.producer(dus, 1)
            sizes = update.shape.arrays[0].dims if update is not None and update.shape.arrays else ()
            for k in range(2, len(dus.operands)):
                offset = self.flow.producer(dus, k)
                if offset is not None and self.flow.resolve(offset).opcode == "constant":
                    continue
                dim = k - 2
                if not self._counts_iterations(offset, loop, variable.index, trips) or dim >= len(sizes) or sizes[dim] != 1:
                    return None
                if dim < len(dims):
                    dims[dim] = trips
                    stacked = True
        return prod(dims) if stacked else None

    def _counts_iterations(self, offset: Instruction | None, loop: Instruction, index: int, trips: int) -> bool:
        """``offset`` is the induction variable, or ``trips - 1 - i`` (the slots written back to front)."""
        offset = self.flow.resolve(offset) if offset is not None else None
        if offset is not None and offset.opcode == "subtract":
            first = self.flow.producer(offset, 0)
            bound = self.flow.resolve(first) if first is not None else None
            if bound is None or bound.opcode != "constant" or bound.literal.strip() != str(trips - 1):
                return False
            offset = self.flow.producer(offset, 1)
        while offset is not None and offset.opcode in ("copy", "convert", "bitcast", "reshape"):
            offset = self.flow.producer(offset, 0)
        body = self.facts.called(loop, "body")
        param = body.parameters[0] if body is not None and body.parameters else None
        return offset is not None and param is not None and offset.opcode == "get-tuple-element" \
            and offset.operands == (param.name,) and offset.tuple_index == index
