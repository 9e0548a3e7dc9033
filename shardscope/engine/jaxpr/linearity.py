"""The deferrable search: which loops a reduction's result reaches only by being added into a carry.

A value is followed forward through operations that are linear in it (the table of
:mod:`shardscope.engine.jaxpr.linear_rules`: additions, casts, reshapes, slices, sums, scaling by a factor), into and out of ``cond`` branches and ``select_n``, calls
(``pjit``, ``closed_call``, ``remat``, ``custom_jvp_call``/``custom_vjp_call``) and inner loops
that only add it into a carry. A factor, a branch predicate or a ``select_n`` selector must be
the same on every device (else the sum over devices would not commute with it) and must not
come from the reduction's result or from any accumulator it reaches, in this iteration or a
later one. And nothing else may be added into the accumulator (a constant, a parameter, a
reset to another value): psum-ing it after the loop would count that term once per device.
Anything else ends the search: a wrong "deferrable" is worse than a missed one.
"""

from __future__ import annotations

from typing import Callable

from shardscope.engine.jaxpr.linear_rules import LINEAR
from shardscope.engine.jaxpr.model import Block, Equation, Value
from shardscope.engine.jaxpr.valueflow import BlockFacts, ValueIndex, input_role

_SLOT_WRITES = frozenset({"dynamic_update_slice"})
"""Linear, but each iteration's value written into its own slot is kept, not accumulated (a
scan's stacked output written by hand): the search stops there, as it does at a scan's ys."""


class AdditivePaths:
    """The deferrable search of one reduction ``eqn``."""

    def __init__(self, index: ValueIndex, eqn: Equation) -> None:
        self.index = index
        self.eqn = eqn
        self.start = index.block_of[eqn.id]
        self.values = [v.name for v in eqn.outputs if v.name != "_"]
        # Everything computed from the result, in this iteration or later ones through the
        # carries it reaches (its accumulators): no factor or predicate may come from here.
        self.tainted, _ = index.reach(
            ((self.start.block.id, name) for name in self.values), loop_outputs=True, back_edges=True
        )
        self.vma_checked = _vma_checked(self.start)
        self._purity: dict[tuple, bool] = {}
        self._depth = 0
        self.added_term = False
        """Set by :meth:`loops` when an accumulator the result reaches has something else added
        into it (weight decay): why the sum cannot leave that loop."""

    def loops(self) -> tuple[Equation, ...]:
        """The loops (innermost first) whose carries only accumulate the reduction's result."""
        facts, values = self.start, self.values
        found: list[Equation] = []
        while facts.owner is not None and facts.outer is not None:  # the program's own block has neither
            positions = self.linear_outputs(facts, values)
            if not positions:
                break
            owner = facts.owner
            if owner.kind == "loop":
                if facts.block.role != "body" or not self._accumulates(facts, positions):
                    break  # a while's condition, or a carry the iteration reads
                found.append(owner)
            elif owner.kind == "cond":
                if not self._safe(facts.outer, owner.inputs[0], set()):
                    break
            elif owner.primitive == "shard_map" or len(owner.blocks) != 1:
                break  # leaving shard_map leaves the devices; a call with several bodies is unknown
            values = [owner.outputs[k].name for k in positions if k < len(owner.outputs)]
            values = [name for name in values if name != "_"]
            facts = facts.outer
        return tuple(found)

    def linear_outputs(self, facts: BlockFacts, names: list[str]) -> set[int] | None:
        """The outputs of ``facts``' block that ``names`` reach, all linearly (None if a use is not)."""
        closure, stack, positions = set(names), list(names), set[int]()
        while stack:
            name = stack.pop()
            positions.update(facts.output_positions.get(name, ()))
            for user, position in facts.uses.get(name, ()):
                outputs = self._step(facts, user, position, closure)
                if outputs is None:
                    return None
                for out in outputs:
                    if out != "_" and out not in closure:
                        closure.add(out)
                        stack.append(out)
        return positions

    # ------------------------------------------------------------------ one use

    def _step(self, facts: BlockFacts, user: Equation, position: int, closure: set[str]) -> list[str] | None:
        """The outputs of ``user`` that are linear in its operand ``position`` (None: not linear)."""
        if user.kind == "loop":
            return self._through_loop(user, position, closure)
        if user.kind == "cond":
            return self._through_cond(facts, user, position, closure)
        if user.blocks:
            return self._through_call(user, closure)
        rule = LINEAR.get(user.primitive)
        count = len(user.inputs)
        if rule is None or user.primitive in _SLOT_WRITES or position not in rule.linear_in(count):
            return None
        if all(self._safe(facts, user.inputs[k], closure) for k in rule.factors(count, position)):
            return [v.name for v in user.outputs]
        return None

    def _safe(self, facts: BlockFacts, value: Value, closure: set[str]) -> bool:
        """True when ``value`` (a factor or a selector) is the same on every device and not tainted.

        Only a ``shard_map`` traced with ``check_vma=True`` says which values vary; without it
        every value looks the same on every device, so none is taken to be.
        """
        return (
            self.vma_checked
            and value.name not in closure
            and not value.varying
            and (facts.block.id, value.name) not in self.tainted
        )

    # ------------------------------------------------------------------ nothing else added in

    def _pure(self, facts: BlockFacts, name: str, inputs: frozenset[str]) -> bool:
        """True when ``name`` is a linear function of the reduction's result and of ``inputs``
        (block inputs known to be such) alone, through safe factors: no other term is added in.

        ``acc + psum(g)`` is; ``acc + psum(g) + 1.0``, ``acc + psum(g) + w`` or a branch that
        resets ``acc`` to ``w`` are not: psum-ing such an accumulator once after the loop would
        count the extra term once per device. Zero (a literal, or zeros made from one) is pure,
        and so is another reduction of the same kind over the same axes (deferred with it).
        """
        key = (facts.block.id, name, inputs)
        if key not in self._purity:
            if self._depth >= _MAX_DEPTH:
                return False  # too long a chain to follow: not proven, so not deferrable
            self._purity[key] = False  # a cycle is not a proof
            self._depth += 1
            try:
                self._purity[key] = self._pure_uncached(facts, name, inputs)
            finally:
                self._depth -= 1
        return self._purity[key]

    def _pure_uncached(self, facts: BlockFacts, name: str, inputs: frozenset[str]) -> bool:
        if name in inputs or (facts is self.start and name in self.values) or _is_zero_literal(name):
            return True
        produced = facts.producers.get(name)
        if produced is None:
            return False  # another input of the block: a parameter, a constant
        eqn, k = produced
        if _is_zero(facts, name) or self._same_reduction(eqn):
            return True
        rule = LINEAR.get(eqn.primitive)
        if not (eqn.blocks or rule is not None):
            return False
        def pure(i: int) -> bool:  # asked lazily (_pure is memoised): one impure term ends a sum
            return self._pure(facts, eqn.inputs[i].name, inputs)

        count = len(eqn.inputs)
        if eqn.kind == "cond":
            return self._safe(facts, eqn.inputs[0], set()) and all(
                self._pure_inside(eqn, branch, pure, k) for branch in eqn.blocks
            )
        if eqn.kind == "loop":
            body = next((b for b in eqn.blocks if b.role == "body"), None)
            if body is None or any(b.role == "cond" for b in eqn.blocks):
                return False
            return self._pure_inside(eqn, body, pure, k)
        if eqn.blocks:
            return eqn.primitive != "shard_map" and len(eqn.blocks) == 1 and self._pure_inside(eqn, eqn.blocks[0], pure, k)
        assert rule is not None
        linear = sorted(rule.linear_in(count))

        def safe(position: int) -> bool:  # the factors when the pure value enters at ``position``
            return all(self._safe(facts, eqn.inputs[k], set()) for k in rule.factors(count, position))

        if rule.adds:  # every term pure (zero, or from the sum), the factors safe
            return bool(linear) and safe(linear[0]) and all(pure(i) for i in linear)
        return any(pure(i) and safe(i) for i in linear)  # a product: one pure operand, the others factors

    def _same_reduction(self, eqn: Equation) -> bool:
        """True for another reduction like this one (same primitive, same axes): the fix defers
        every reduction into the accumulator at once, so their sum after the loop is theirs."""
        return eqn.primitive == self.eqn.primitive and eqn.params == self.eqn.params

    def _pure_inside(self, eqn: Equation, sub: Block, pure: Callable[[int], bool], k: int) -> bool:
        """True when output ``k`` of ``sub`` is pure in the inputs that receive ``eqn``'s pure operands."""
        if k >= len(sub.outputs):
            return False
        inner = frozenset(
            name for i in range(len(eqn.inputs)) if pure(i)
            for name in [self.index.sub_input(eqn, sub, i)] if name is not None
        )
        return self._pure(self.index.blocks[sub.id], sub.outputs[k].name, inner)

    def _through_cond(self, facts: BlockFacts, cond: Equation, position: int, closure: set[str]) -> list[str] | None:
        """A value entering a ``cond``: linear when every branch is, and the predicate is safe."""
        if position == 0 or not self._safe(facts, cond.inputs[0], closure):
            return None
        reached: set[int] = set()
        for branch in cond.blocks:
            inside = self._inside(cond, branch, closure)
            if inside is None:
                return None
            reached |= inside
        return [cond.outputs[k].name for k in sorted(reached) if k < len(cond.outputs)]

    def _through_call(self, call: Equation, closure: set[str]) -> list[str] | None:
        """A value entering a call with one body (``pjit``, ``remat``, ...): linear when the body is."""
        if call.primitive == "shard_map" or len(call.blocks) != 1:
            return None
        inside = self._inside(call, call.blocks[0], closure)
        if inside is None:
            return None
        return [call.outputs[k].name for k in sorted(inside) if k < len(call.outputs)]

    def _inside(self, eqn: Equation, sub: Block, closure: set[str]) -> set[int] | None:
        """The outputs of ``sub`` that the operands of ``eqn`` in ``closure`` reach, linearly."""
        inner = [self.index.sub_input(eqn, sub, k) for k, v in enumerate(eqn.inputs) if v.name in closure]
        return self.linear_outputs(self.index.blocks[sub.id], [name for name in inner if name is not None])

    def _through_loop(self, loop: Equation, position: int, closure: set[str]) -> list[str] | None:
        """A value entering an inner loop's carry that the loop only adds to: that carry's output."""
        body = next((b for b in loop.blocks if b.role == "body"), None)
        if body is None or any(b.role == "cond" for b in loop.blocks):
            return None  # a while's condition could read the accumulator
        if sum(1 for v in loop.inputs if v.name in closure) != 1:
            return None  # two operands from the reduction: the body could multiply them
        inner = self.index.sub_input(loop, body, position)
        if inner is None or input_role(inner) != "carry":
            return None
        facts = self.index.blocks[body.id]
        k = facts.carries.index(inner)
        if self.linear_outputs(facts, [inner]) != {k}:
            return None
        return [loop.outputs[k].name]

    def _accumulates(self, facts: BlockFacts, positions: set[int]) -> bool:
        """True when each body output in ``positions`` is its carry plus what the iteration adds.

        The carry input must reach that output, linearly, and nothing else: an accumulator that
        the iteration reads for anything but adding to it is not a plain sum. A while loop's
        condition must not read the accumulators either.
        """
        carries = facts.carries
        for k in positions:
            if k >= len(carries):
                return False  # a scan's stacked output (ys): every iteration's value is kept
            if self.linear_outputs(facts, [carries[k]]) != {k}:
                return False
            if not self._pure(facts, facts.block.outputs[k].name, frozenset({carries[k]})):
                self.added_term = True
                return False  # something else is added in: the sum after the loop would count it n times
        assert facts.owner is not None  # called for a loop's body only
        for block in facts.owner.blocks:
            if block.role == "cond" and any((block.id, v.name) in self.tainted for v in block.outputs):
                return False
        return True


_MAX_DEPTH = 400
"""How many producers back the purity check follows before it gives up (and says needed)."""


def _vma_checked(facts: BlockFacts | None) -> bool:
    """True when the ``shard_map`` around ``facts`` was traced with ``check_vma=True``."""
    while facts is not None:
        owner = facts.owner
        if owner is not None and owner.primitive == "shard_map":
            params = dict(owner.params)
            return params.get("check_vma", params.get("check_rep", "True")) == "True"
        facts = facts.outer
    return False


def _is_zero_literal(name: str) -> bool:
    """True for a literal zero (``0.0``, ``0``, ``-0.0``, ``0j``)."""
    try:
        return complex(name) == 0
    except ValueError:
        return False


_ZERO_MAKERS = frozenset({"broadcast_in_dim", "convert_element_type", "reshape", "pvary", "pcast", "copy", "copy_p"})


def _is_zero(facts: BlockFacts, name: str) -> bool:
    """True when ``name`` is zeros made from a literal zero (``jnp.zeros_like``: a broadcast of 0.0)."""
    for _ in range(8):
        if _is_zero_literal(name):
            return True
        produced = facts.producers.get(name)
        if produced is None or produced[0].primitive not in _ZERO_MAKERS or not produced[0].inputs:
            return False
        name = produced[0].inputs[0].name
    return False
