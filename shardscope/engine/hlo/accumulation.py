"""Whether a collective's values only accumulate into a while loop's carry: one walk over the body.

A sum over devices can leave a loop when the loop's result is a linear function of the sums it
makes, with coefficients the same on every device: then each device can accumulate its own
value and one sum after the loop gives what the loop gave (the initial value placed on one
device). :class:`AccumulationWalk` proves it for one loop body, from the values the collective
gives there (``seeds``):

- every use of a seed, and of everything computed from it, is a linear step
  (:mod:`shardscope.engine.hlo.linear_steps`): a move, a slice, an add of another linear value,
  a ``select`` or a conditional whose predicate is the same on every device and whose branches
  are linear in it (T5X's ``lax.cond(i == 0, m, prev + m)``), a scaling by a factor the same on
  every device, a ``dynamic-update-slice`` into a linear buffer;
- what reaches the body's result (the next iteration's carry) makes those carry elements
  accumulators, and each accumulator is then followed the same way: read only by linear steps
  that lead back into accumulators (an SGD step's weights, which the next gradient reads, are
  no accumulator);
- every other operand such a step adds is linear too (or zero), every factor, predicate and
  offset independent of the accumulated values; the loop's condition reads no accumulator.

One step is linear with coefficients that differ between devices: the SPMD partitioner's
scatter-add into a replicated buffer (a gathered embedding's gradient; its buffer ``acc + A``
when XLA folded the accumulator's add, and the dense part's sum ``A = AR(g_d)``, into the
scatter) keeps the buffer on one device of each group (``select(partition-id != 0, 0, acc +
A)``, the mask ``m_d``: 1 on exactly one device ``d*`` of each group, 0 elsewhere), scatters
each device's own rows ``u_d`` into it and sums it over the group:
``acc' = AR(m_d * (acc + A) + scatter(u_d))``. Derivation, for a value ``v`` the walk masks
(``v_d``: its value on device ``d``) and a sum ``AR`` over the same groups that the masked value
reaches through steps ``L`` linear and the same on every device, other terms ``w_d`` added:

- ``AR(m_d * L(v_d) + w_d) = L(v_d*) + sum_d w_d`` (the one device ``d*`` keeps ``v``);
- ``v`` is made of the carry and of sums over the same groups (the walk's seeds, the fold's
  own result; every other term it adds is checked linear in them), each the same on every device
  of the group, and of no device's own shard (refused: ``scattered``): ``v_d* = v``;
- so ``acc' = L(acc) + L(A) + sum_d w_d``: a linear function of the carry and the sums, the same
  on every device, as an accumulation is. Rewritten, each device keeps its own accumulator
  ``a_d' = L(a_d + g_d) + w_d`` (the mask and both sums dropped), and
  ``sum_d a_d' = L(sum_d a_d) + L(A) + sum_d w_d``: with ``sum_d a_d = acc`` before (the initial
  value on one device), the same after; one sum after the loop gives the loop's result.

Where ``m_d`` keeps ``v`` on no device, or on several, or the same ``v`` also reaches the sum
unmasked, the first line fails (``v`` dropped, or summed several times). The walk therefore lets
a masked value go only on linear steps the same on every device into such a sum (``fold``: an
all-reduce that adds over the same groups as the collective, every way there masked); the sum
then leaves the loop with the collective (a ``partner``, unless it is the collective) and its
result goes on, unmasked. A masked value reaches no carry, no tuple, no conditional. The terms
``w_d`` a step adds after the mask are the sum's own terms: no linearity is asked of them.

Tuples, conditionals and fusions are seen through element by element. A loop inside the body
whose carry already accumulates the values (checked at that loop's level) passes them on:
``threaded``. When an operand that must be linear is another collective's value of the same
kind, the two can only leave together (XLA:GPU's peeled copy of a loop's last iteration):
:class:`NotAccumulated` names it as a ``partner`` and the caller walks again with both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from shardscope.engine.hlo.flow import Flow
from shardscope.engine.hlo.linear_steps import DROPPED, FAIL, LinearSteps
from shardscope.engine.hlo.loop_facts import LoopFacts
from shardscope.engine.hlo.text import Computation, Instruction
from shardscope.collective_kinds import ALL_REDUCE, ALL_REDUCE_DONE, ALL_REDUCE_START

SEED, CARRY, MIXED, MASKED, UNMASKED = 1, 2, 4, 8, 16
"""Where a reached value comes from: the collective's sum alone; read back from a carry it was added
into (the next iteration's); mixed with another value (``out - y``, an inner loop's accumulator);
kept on one device of each group (a ``select`` against zeros on the device's id) or not (a
value reached both ways has both)."""

_BRANCH_ROLES = frozenset({"branch", "true_computation", "false_computation"})

Value = tuple[Instruction, "int | None"]
"""An instruction and the tuple element of it that is meant (None: the whole value)."""


@dataclass(frozen=True)
class Accumulated:
    """The values only accumulate: into the body's result positions ``carries``; ``stacked``
    when through a dynamic-update-slice's update (each iteration's value in its own slot),
    ``scattered`` when only the device's own shard of the sum reaches them, ``masked`` when they
    reach them kept on one device of each group and summed over it again (the partitioner's
    scatter into a replicated buffer)."""

    carries: tuple[int, ...]
    stacked: bool = False
    scattered: bool = False
    masked: bool = False


@dataclass(frozen=True)
class NotAccumulated:
    """Why the values do not only accumulate: ``carry_read`` when they reach a carry the loop also
    reads otherwise (the next iteration uses the sum), ``in_condition`` when the loop's condition
    reads it, ``added_term`` when something else is added in with them; ``read_by`` the
    instruction whose use of them (or of a value computed from them) is no linear step, the first
    the walk met (None when the refusal is no such use); ``partner`` is another
    value the walk met added in (a collective of the same kind): walked together, they may.
    ``partners`` are the other values the walk met added in (another value of the same combined
    instruction, another sum of the same kind): walked together with them, the values may."""

    carry_read: bool = False
    in_condition: bool = False
    added_term: bool = False
    partners: tuple[Instruction, ...] = ()
    read_by: Instruction | None = None


@dataclass
class _Checks:
    linear: list[tuple[Instruction, int | None]] = field(default_factory=list)  # None: the instruction itself
    clean: list[tuple[Instruction, int]] = field(default_factory=list)


class AccumulationWalk:
    """One walk over ``body`` (of ``loop``) from ``seeds``, the values ``collective`` gives there.

    ``threaded`` names, per inner while loop, the carry elements that accumulate the same values
    (found at that loop's level): an accumulated value may enter and leave the inner loop there.
    ``partner_of`` says whether an instruction is another collective's value that could be
    accumulated with these (it returns that value's instruction, else None): all met in one walk
    are returned together."""

    def __init__(self, flow: Flow, steps: LinearSteps, facts: LoopFacts, loop: Instruction, body: Computation,
                 collective: Instruction, threaded: dict[str, frozenset[int]] | None = None,
                 partner_of: Callable[[Instruction], Instruction | None] | None = None) -> None:
        self.flow = flow
        self.steps = steps
        self.facts = facts
        self.loop = loop
        self.body = body
        self.collective = collective
        self.threaded = threaded or {}
        self.partner_of = partner_of or (lambda inst: None)
        self.reached: dict[tuple[str, int | None], int] = {}
        self.carries: set[int] = set()
        self.checks = _Checks()
        self.stacked = self.scattered = self.masked = False
        self.folded: dict[str, Instruction] = {}  # sums that undo a mask: partners unless seeds
        self._seeds: set[str] = set()
        self._stack: list[tuple[Instruction, int | None, int]] = []
        self._refusal: NotAccumulated | None = None

    def run(self, seeds: list[Value], inits: list[tuple[Instruction, int]] | None = None) -> Accumulated | NotAccumulated:
        """The carries ``seeds`` accumulate into, or why they do not. ``inits`` are operands that
        must be linear too (an inner loop's initial accumulators, when the seeds are its results)."""
        self.checks.linear += list(inits or ())
        self._seeds = {inst.name for inst, element in seeds if element is None} | {
            user.name for inst, element in seeds if element is not None
            for user, _ in self.flow.uses(inst) if user.opcode == "get-tuple-element" and user.tuple_index == element}
        for inst, element in seeds:
            self._push(inst, element, SEED | UNMASKED)
        while self._stack and self._refusal is None:
            inst, element, bits = self._stack.pop()
            for user, position, el in self._uses(inst, element, bits):
                if not self._take(user, position, el, bits):
                    break
        if self._refusal is not None:
            return self._refusal
        return self._finish()

    # ------------------------------------------------------------------ the walk

    def _push(self, inst: Instruction, element: int | None, bits: int) -> None:
        key = (inst.name, element)
        seen = self.reached.get(key, 0)
        if seen | bits != seen or key not in self.reached:
            self.reached[key] = seen | bits
            self._stack.append((inst, element, seen | bits))
            if element is None:  # what an operand resolves to (a fusion's root) is reached too
                resolved = self.flow.resolve(inst)
                self.reached[(resolved.name, None)] = self.reached.get((resolved.name, None), 0) | bits

    def _uses(self, inst: Instruction, element: int | None, bits: int) -> Iterator[tuple[Instruction, int, int | None]]:
        """``(user, position, element)`` of each use of the value, through branch results and
        fusions (a fused computation's root is its fusion's result); the tuple element taken out
        (a get-tuple-element of it) is reached in turn."""
        computation = self.flow.computation(inst)
        conditional = self._conditional_of(computation) if inst is computation.root else None
        if conditional is not None:  # a branch's result (element): the conditional's
            for branch in self._branches(conditional):
                if branch.root is not None:
                    self.checks.linear.append((branch.root, element))
            self._push(conditional, element, bits)
            return
        for user, position in self.flow.uses(inst):
            if element is not None and user.opcode == "get-tuple-element":
                if user.tuple_index == element:
                    self._push(user, None, bits)
                continue
            yield user, position, element

    def _take(self, user: Instruction, position: int, element: int | None, bits: int) -> bool:
        """Follow one use; False (with the refusal set) where it is not a linear step."""
        if bits & MASKED:
            return self._masked(user, position, element, bits)
        if user is self.body.root:
            return self._accumulate(position) if element is None else self._fail(bits)
        if user.opcode == "conditional" and position >= 1:
            return self._into_branch(user, position, element, bits)
        if element is not None:
            return self._threaded(user, element, bits)
        if user.opcode == "tuple":
            self._push(user, position, bits)
            return True
        if user.opcode == "get-tuple-element":
            return self._fail(bits)
        step = self.steps.step(user, position, bits & ~UNMASKED == SEED, self.loop, self.collective)
        if step.kind == DROPPED:
            return True
        if step.kind == FAIL:
            return self._fail(bits, user)
        self.checks.linear += [(user, k) for k in step.linear]
        self.checks.clean += [(user, k) for k in step.clean]
        self.stacked |= step.stacked
        self.scattered |= step.scattered
        self.masked |= step.masks
        self._push(user, None, (bits | (MIXED if step.mixes else 0)) if not step.masks else (bits & ~UNMASKED) | MASKED)
        return True

    def _masked(self, user: Instruction, position: int, element: int | None, bits: int) -> bool:
        """A value kept on one device of each group: on by linear steps the same on every device
        (what they add in is the sum's to add: not checked), into a sum that undoes the mask."""
        if element is not None or user is self.body.root or user.opcode in ("tuple", "get-tuple-element", "conditional"):
            return self._fail(bits, user)
        folded = self._folded(user, position)
        if folded is not None:
            if bits & UNMASKED:
                return self._fail(bits, user)  # also reached unmasked: the sum would add it N times
            self.folded.setdefault(folded.name, folded)
            self._push(folded, None, (bits & ~MASKED) | UNMASKED | MIXED)
            return True
        step = self.steps.step(user, position, False, self.loop, self.collective)
        if step.kind == DROPPED:
            return True
        if step.kind == FAIL or step.masks or step.scattered or step.stacked:
            return self._fail(bits, user)
        self.checks.clean += [(user, k) for k in step.clean]
        self._push(user, None, bits)
        return True

    def _folded(self, user: Instruction, position: int) -> Instruction | None:
        """The sum of operand ``position`` when ``user`` is a sum that undoes a mask: an
        all-reduce (or its start: then its done) that adds over the collective's groups; of a
        combined one, the get-tuple-element that takes that operand's sum out."""
        if user.opcode not in (ALL_REDUCE, ALL_REDUCE_START) or not self.steps.replication.same_groups(
                user.attribute("replica_groups")) \
                or user.attribute("use_global_device_ids") != self.collective.attribute("use_global_device_ids"):
            return None
        if not self.steps.adds(user):
            return None
        result = user
        if user.opcode == ALL_REDUCE_START:
            done = [u for u, _ in self.flow.uses(user) if u.opcode == ALL_REDUCE_DONE]
            if len(done) != 1:
                return None
            result = done[0]
        if len(user.operands) == 1:
            return result
        taken = [u for u, _ in self.flow.uses(result) if u.opcode == "get-tuple-element" and u.tuple_index == position]
        return taken[0] if len(taken) == 1 else None

    def _into_branch(self, conditional: Instruction, position: int, element: int | None, bits: int) -> bool:
        """Into a branch of a conditional whose predicate is the same on every device."""
        if not self.steps.same_everywhere(self.flow.producer(conditional, 0)):
            return self._fail(bits)
        branches = self._branches(conditional)
        branch = branches[position - 1] if position - 1 < len(branches) else None
        if branch is None or not branch.parameters:
            return self._fail(bits)
        self.checks.clean.append((conditional, 0))
        self._push(branch.parameters[0], element, bits)
        return True

    def _threaded(self, user: Instruction, element: int, bits: int) -> bool:
        """An element of a tuple meets ``user``: an inner loop that accumulates it passes it on."""
        if user.opcode == "while" and element in self.threaded.get(user.name, frozenset()):
            self._push(user, element, bits | MIXED)
            return True
        return self._fail(bits)

    def _accumulate(self, position: int) -> bool:
        """The value is the next iteration's carry element ``position``: an accumulator, followed in turn."""
        if position in self.carries:
            return True
        self.carries.add(position)
        if self.facts.condition_reads(self.body, position):
            self._refusal = NotAccumulated(carry_read=True, in_condition=True)
            return False
        param = self.body.parameters[0] if self.body.parameters else None
        if param is None:
            return self._fail(CARRY)
        users = self.body.users.get(param.name, ())
        if any(u.opcode != "get-tuple-element" for u, _ in users):
            return self._fail(CARRY)
        for user, _ in users:
            if user.tuple_index == position:
                self._push(user, None, CARRY | UNMASKED)
        return True

    def _fail(self, bits: int, read_by: Instruction | None = None) -> bool:
        """Refuse: the value (from where ``bits`` say) meets a use that is no linear step (``read_by``)."""
        self._refusal = NotAccumulated(carry_read=bool(bits & CARRY), read_by=read_by)
        return False

    # ------------------------------------------------------------------ the checks

    def _finish(self) -> Accumulated | NotAccumulated:
        if self.masked and self.scattered:
            return NotAccumulated()
        for inst, k in self.checks.clean:
            if self._tainted(self.flow.producer(inst, k)):
                return NotAccumulated()
        partners: dict[str, Instruction] = {}
        for inst, position in self.checks.linear:
            operand = self.flow.producer(inst, position) if position is not None else self.flow.resolve(inst)
            if operand is None or self._tainted(operand) or self.steps.zero_value(operand):
                continue
            partner = self.partner_of(operand)
            if partner is None:
                return NotAccumulated(added_term=True)
            partners.setdefault(partner.name, partner)
        for name, folded in self.folded.items():
            if name in self._seeds:
                continue
            partner = self.partner_of(folded)
            if partner is None:
                return NotAccumulated(added_term=True)
            partners.setdefault(partner.name, partner)
        if partners:
            return NotAccumulated(partners=tuple(partners.values()))
        if not self.carries:
            return NotAccumulated()
        return Accumulated(tuple(sorted(self.carries)), self.stacked, self.scattered, self.masked)

    def _tainted(self, inst: Instruction | None) -> bool:
        return inst is not None and (inst.name, None) in self.reached

    # ------------------------------------------------------------------ conditionals

    def _conditional_of(self, computation: Computation) -> Instruction | None:
        """The conditional whose branch ``computation`` is (None for any other computation)."""
        callers = self.flow.module.callers.get(computation.name, ())
        found = [c for c, role in callers if c.opcode == "conditional" and role in _BRANCH_ROLES]
        return found[0] if len(found) == 1 and len(callers) == 1 else None

    def _branches(self, conditional: Instruction) -> list[Computation]:
        return [self.flow.module.computations[c] for r, c in conditional.called_computations
                if r in _BRANCH_ROLES and c in self.flow.module.computations]
