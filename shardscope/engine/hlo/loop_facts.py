"""What a while loop of a compiled module changes, and which of its values every device shares.

What changes between iterations, which the verdicts of :mod:`shardscope.engine.hlo.verdicts`
rest on: every instruction inside the loop (nested computations too) computed from a carry
element the body does not pass on as it got it (seen through copies, tuples and the loops
inside the body, which XLA:TPU threads a loop-invariant weight through), or from something that
differs each time anyway (random numbers, host transfers). What is the same on every device is
:mod:`shardscope.engine.hlo.replication`'s.
"""

from __future__ import annotations

import functools
from typing import Iterable

from shardscope.engine.hlo.flow import FORWARDING, Flow
from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.memo import cached_method
from shardscope.engine.hlo.text import Computation, HloModule, Instruction

_NONDETERMINISTIC = frozenset({"rng", "rng-get-and-update-state", "infeed", "recv", "recv-done", "custom-call", "send",
                               "send-done", "outfeed"})
_CALLS = {"call": ("to_apply", "calls"), "async-start": ("calls",)}
_BRANCH_ROLES = frozenset({"branch", "true_computation", "false_computation"})


class LoopFacts:
    """The loops of one module: their bodies and conditions, what changes in them, what is shared."""

    def __init__(self, module: HloModule, flow: Flow, counts: LoopCounts) -> None:
        self.module = module
        self.flow = flow
        self.counts = counts

    def called(self, loop: Instruction | None, role: str) -> Computation | None:
        """The loop's ``body`` or ``condition`` computation."""
        if loop is None:
            return None
        name = next((c for r, c in loop.called_computations if r == role), None)
        return self.module.computations.get(name or "")

    def loops_of(self, body: str) -> list[Instruction]:
        """The while instructions that run ``body``."""
        return self._loops_by_body.get(body, [])

    @functools.cached_property
    def _loops_by_body(self) -> dict[str, list[Instruction]]:
        found: dict[str, list[Instruction]] = {}
        for inst in self.module.instructions():
            if inst.opcode == "while":
                for role, callee in inst.called_computations:
                    if role == "body":
                        found.setdefault(callee, []).append(inst)
        return found

    # ------------------------------------------------------------------ what changes

    @cached_method
    def varying(self, loop_name: str) -> frozenset[str]:
        """Every instruction inside the loop (nested computations too) that depends on a carry
        element the loop changes, or on something that differs between iterations anyway."""
        loop = self.module.instruction(loop_name)
        body = self.called(loop, "body")
        if body is None or body.root is None:
            return frozenset(inst.name for c in self.module.computations.values() for inst in c.instructions)
        param = body.parameters[0] if body.parameters else None
        seeds: list[Instruction] = []
        root_operands = body.root.operands if body.root.opcode == "tuple" else ()
        for inst in body.instructions:
            if inst.opcode in _NONDETERMINISTIC:
                seeds.append(inst)
            elif param is not None and inst.opcode == "get-tuple-element" and inst.operands == (param.name,):
                i = inst.tuple_index
                passed = i is not None and i < len(root_operands) and self._unchanged(root_operands[i], param.name, i)
                if not passed:
                    seeds.append(inst)
        if param is not None and any(u.opcode != "get-tuple-element" for u, _ in body.users.get(param.name, ())):
            seeds.append(param)
        return frozenset(self._reach(seeds))

    def _unchanged(self, name: str, param: str, index: int, depth: int = 0) -> bool:
        """True when the value ``name`` is the carry element ``index`` of the body whose parameter
        is ``param``, as it came in: through copies, tuples, and loops inside the body that pass
        it on unchanged (XLA:TPU threads a loop-invariant weight through the inner loops)."""
        inst = self.module.instruction(name)
        for _ in range(64):
            if inst is None or depth > 8:
                return False
            inst = self.flow.resolve(inst)
            if inst.opcode == "copy" and inst.operands:
                inst = self.module.instruction(inst.operands[0])
                continue
            if inst.opcode != "get-tuple-element" or inst.tuple_index is None or not inst.operands:
                return False
            if inst.operands == (param,):
                return inst.tuple_index == index
            source = self.flow.resolve(self.module.instruction(inst.operands[0]) or inst)
            element = inst.tuple_index
            if source.opcode == "tuple" and element < len(source.operands):
                inst = self.module.instruction(source.operands[element])
            elif source.opcode == "while" and self._passes_on(source, element, depth):
                start = self.module.instruction(source.operands[0]) if source.operands else None
                start = self.flow.resolve(start) if start is not None else None
                if start is None or start.opcode != "tuple" or element >= len(start.operands):
                    return False
                inst = self.module.instruction(start.operands[element])
            else:
                return False
        return False

    def _passes_on(self, loop: Instruction, element: int, depth: int) -> bool:
        """The loop's body gives back carry element ``element`` as it got it."""
        body = self.called(loop, "body")
        root = body.root if body is not None else None
        param = body.parameters[0] if body is not None and body.parameters else None
        if root is None or param is None or root.opcode != "tuple" or element >= len(root.operands):
            return False
        return self._unchanged(root.operands[element], param.name, element, depth + 1)

    def _reach(self, seeds: Iterable[Instruction]) -> set[str]:
        """Names of everything computed from ``seeds``, into called computations (a fusion counts
        as one step), element by element through tuples: an inner loop or a conditional that
        takes a changing value in one element of its operand tuple changes only what that
        element reaches (a layer scan inside a micro-batch loop still reads the same weights).
        A value's element is None when all of it changes."""
        seen: set[tuple[str, int | None]] = set()
        stack: list[tuple[Instruction, int | None]] = [(inst, None) for inst in seeds]
        while stack:
            inst, element = stack.pop()
            if (inst.name, element) in seen or (inst.name, None) in seen:
                continue
            seen.add((inst.name, element))
            computation = self.module.computations[inst.computation]
            if inst is computation.root:
                stack += self._to_callers(computation.name, element)
            for user, position in computation.users.get(inst.name, ()):
                stack += self._into(user, position, element)
        # a tuple some of whose elements change is not itself changed: what reads the other
        # elements (a get-tuple-element of them) was never reached
        return {name for name, element in seen if element is None}

    def _into(self, user: Instruction, position: int, element: int | None) -> list[tuple[Instruction, int | None]]:
        """What a changing operand ``position`` of ``user`` (its ``element``, or all of it) changes."""
        if user.opcode == "tuple":
            return [(user, position)]
        if user.opcode == "get-tuple-element":
            return [(user, None)] if element is None or user.tuple_index == element else []
        if user.opcode == "while":
            reached: list[tuple[Instruction, int | None]] = [(user, element)]
            for role in ("body", "condition"):
                called = self.called(user, role)
                reached += [(p, element) for p in called.parameters] if called is not None else []
            return reached
        if user.opcode == "conditional":
            branches = [c for r, c in user.called_computations if r in _BRANCH_ROLES]
            if position == 0 or position > len(branches):
                return [(user, None)]  # the branch taken changes: so may every result
            branch = self.module.computations.get(branches[position - 1])
            return [(p, element) for p in branch.parameters] if branch is not None else [(user, None)]
        roles = _CALLS.get(user.opcode, ())
        reached = [(user, None)]
        for role, callee in user.called_computations if user.opcode in _CALLS else ():
            computation = self.module.computations.get(callee)
            if computation is not None and (roles is None or role in roles):
                reached += [(p, None) for p in computation.parameters]
        return reached

    def _to_callers(self, computation: str, element: int | None) -> list[tuple[Instruction, int | None]]:
        """A changing root of a loop's body (or a branch's) changes the loop's (the
        conditional's) result there, and the body's next iteration."""
        reached: list[tuple[Instruction, int | None]] = []
        for caller, role in self.module.callers.get(computation, ()):
            if caller.opcode == "while" and role == "body":
                body = self.called(caller, "body")
                condition = self.called(caller, "condition")
                reached += [(caller, element)] + [(p, element) for c in (body, condition) if c is not None
                                                  for p in c.parameters]
            elif caller.opcode == "conditional" and role in _BRANCH_ROLES:
                reached.append((caller, element))
        return reached

    def condition_reads(self, body: Computation, carry: int) -> bool:
        """True when a loop running ``body`` reads carry element ``carry`` (or the whole carry)
        in its condition."""
        for loop in self.loops_of(body.name):
            condition = self.called(loop, "condition")
            if condition is None or not condition.parameters:
                continue
            param = condition.parameters[0]
            if any(u.opcode != "get-tuple-element" or u.tuple_index == carry for u, _ in condition.users.get(param.name, ())):
                return True
        return False

    def offsets_fixed(self, dynamic_slice: Instruction, loop: Instruction) -> bool:
        """The dynamic-slice's offsets do not change inside ``loop`` (each device's shard of a sum
        the partitioner scatters: the offsets come from the device's id)."""
        varying = self.varying(loop.name)
        offsets = [self.flow.producer(dynamic_slice, k) for k in range(1, len(dynamic_slice.operands))]
        return bool(offsets) and not any(o is None or self._depends_on(o, varying) for o in offsets)

    def _depends_on(self, inst: Instruction, varying: frozenset[str], depth: int = 0) -> bool:
        """True when ``inst`` (inside fusions too) is computed from one of ``varying``."""
        inst = self.flow.resolve(inst)
        if inst.name in varying or depth > 24:
            return True
        if inst.opcode in ("parameter", "constant", "partition-id", "replica-id", "iota", "get-tuple-element"):
            return False  # a get-tuple-element of a changing element would be among ``varying``
        return any(p is None or self._depends_on(p, varying, depth + 1)
                   for p in (self.flow.producer(inst, k) for k in range(len(inst.operands))))
