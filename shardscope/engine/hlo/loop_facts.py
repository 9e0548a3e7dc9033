"""What a while loop of a compiled module changes, and which of its values every device shares.

Two facts the verdicts of :mod:`shardscope.engine.hlo.verdicts` rest on:

- what changes between iterations: every instruction inside the loop (nested computations too)
  computed from a carry element the body does not pass through as it got it, or from something
  that differs each time anyway (random numbers, host transfers);
- what is the same on every device, as XLA's replication analysis would say of the values a JAX
  loop makes: constants and the loop's own induction variable, combined by arithmetic and
  comparisons (a predicate ``i == 0``, an offset ``i * 8``); a device's id or any data differ.
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
_REPLICATED_OPS = frozenset({"constant", "iota", "compare", "add", "subtract", "multiply", "divide", "remainder", "negate",
                             "maximum", "minimum", "and", "or", "not", "xor", "select", "clamp", "broadcast"}) | FORWARDING


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
                passed = i is not None and i < len(root_operands) and self._is_carry_element(root_operands[i], param.name, i)
                if not passed:
                    seeds.append(inst)
        if param is not None and any(u.opcode != "get-tuple-element" for u, _ in body.users.get(param.name, ())):
            seeds.append(param)
        return frozenset(self._reach(seeds))

    def _is_carry_element(self, name: str, param: str, index: int) -> bool:
        inst = self.module.instruction(name)
        return inst is not None and inst.opcode == "get-tuple-element" and inst.operands == (param,) and inst.tuple_index == index

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

    # ------------------------------------------------------------------ the same on every device

    def indices_replicated(self, inst: Instruction, first: int, body: Computation) -> bool:
        """The offsets of a dynamic-slice (``first`` = 1) or dynamic-update-slice (2) are the
        same on every device."""
        return all(self.replicated(self.flow.producer(inst, k), body) for k in range(first, len(inst.operands)))

    def replicated(self, inst: Instruction | None, body: Computation, depth: int = 0) -> bool:
        """``inst`` computes the same value on every device: made of constants and the loop's
        induction variable (a predicate ``i == 0``, an offset ``i * 8``); a device's id or any
        data make it differ."""
        if inst is None or depth > 24:
            return False
        inst = self.flow.resolve(inst)
        param = body.parameters[0] if body.parameters else None
        if inst.opcode == "get-tuple-element" and param is not None and inst.operands == (param.name,):
            return inst.tuple_index in self._induction_indices(body.name)
        if inst.opcode not in _REPLICATED_OPS:
            return False
        return all(self.replicated(self.flow.producer(inst, k), body, depth + 1) for k in range(len(inst.operands)))

    @cached_method
    def _induction_indices(self, body: str) -> frozenset[int]:
        """The carry indices that hold the induction variable of the loops running ``body``."""
        found = {v.index for v in (self.counts.induction_variable(w.name) for w in self.loops_of(body)) if v is not None}
        return frozenset(found)
