"""Value-level def -> use links of a :class:`Program`, across loop, call and branch boundaries.

The dataflow graph (:mod:`shardscope.engine.jaxpr.dataflow`) has one node per equation, so a loop with
two carries is one node and everything after it depends on both. Naming a collective after the
parameter it reduces, or telling whether a reduction only accumulates into a carry, needs to
follow single values: a loop's output ``k`` comes from its body's output ``k``, a body input
from the loop's operand at the same position (aligned from the right, as JAX passes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Hashable, Iterable, Iterator, TypeVar

from shardscope.engine.jaxpr.model import Block, Equation, Program, qualify


@dataclass
class BlockFacts:
    """One block with the equation that owns it, and who uses each of its values."""

    block: Block
    owner: Equation | None  # None for the program itself
    outer: "BlockFacts | None"
    uses: dict[str, list[tuple[Equation, int]]] = field(default_factory=dict)  # value -> (user, operand position)
    output_positions: dict[str, list[int]] = field(default_factory=dict)
    producers: dict[str, tuple[Equation, int]] = field(default_factory=dict)  # value -> (definer, output k)
    input_positions: dict[str, int] = field(default_factory=dict)

    @cached_property
    def carries(self) -> list[str]:
        """The block's carry inputs in order (a loop body's accumulators); computed once, as a
        loop body holds every parameter among its inputs and each collective asks again."""
        return [v.name for v in self.block.inputs if input_role(v.name) == "carry"]


class ValueIndex:
    """Who defines and who uses every value of a program, block by block."""

    def __init__(self, program: Program) -> None:
        self.blocks: dict[str, BlockFacts] = {}
        self.block_of: dict[str, BlockFacts] = {}  # equation id -> the block it sits in
        self._operands: dict[str, dict[str, str]] = {}  # block id -> {input name: outer operand}
        # each value's program outputs reached and program inputs come from, found once for all questions
        self._reached: dict[tuple[str, str], frozenset[int]] = {}
        self._came_from: dict[tuple[str, str], frozenset[int]] = {}
        self._add(program.root, None, None)

    def _add(self, block: Block, owner: Equation | None, outer: BlockFacts | None) -> None:
        facts = BlockFacts(block, owner, outer)
        self.blocks[block.id] = facts
        facts.input_positions = {v.name: i for i, v in enumerate(block.inputs)}
        for eqn in block.equations:
            self.block_of[eqn.id] = facts
            for position, value in enumerate(eqn.inputs):
                facts.uses.setdefault(value.name, []).append((eqn, position))
            for k, value in enumerate(eqn.outputs):
                facts.producers[value.name] = (eqn, k)
            for sub in eqn.blocks:
                self._add(sub, eqn, facts)
        for position, value in enumerate(block.outputs):
            facts.output_positions.setdefault(value.name, []).append(position)

    def sub_input(self, eqn: Equation, sub: Block, operand_position: int) -> str | None:
        """The input of ``sub`` that receives ``eqn``'s operand at ``operand_position``."""
        if eqn.primitive == "while" and sub.role == "cond":
            consts = sum(1 for v in sub.inputs if ".cond_const" in v.name)
            carry_start = len(eqn.inputs) - (len(sub.inputs) - consts)
            if operand_position < consts:
                return sub.inputs[operand_position].name
            if operand_position >= carry_start:
                return sub.inputs[consts + operand_position - carry_start].name
            return None
        k = operand_position - (len(eqn.inputs) - len(sub.inputs))
        return sub.inputs[k].name if 0 <= k < len(sub.inputs) else None

    def operand_of(self, facts: BlockFacts, input_name: str) -> str | None:
        """The outer value that feeds ``facts``' input ``input_name`` (None at the program's inputs)."""
        if facts.owner is None:
            return None
        if facts.block.id not in self._operands:
            eqn, sub = facts.owner, facts.block
            feeds = {}
            for k, operand in enumerate(eqn.inputs):
                inner = self.sub_input(eqn, sub, k)
                if inner is not None:
                    feeds[inner] = operand.name
            self._operands[facts.block.id] = feeds
        return self._operands[facts.block.id].get(input_name)

    def started_as(self, block_id: str, name: str) -> int | None:
        """The program input (position) value ``name`` of block ``block_id`` is as it came in,
        unchanged on its way into the block (a loop's carry: the argument it starts as, whatever
        the loop then adds to it); None for a value computed on the way."""
        for _ in range(64):
            facts = self.blocks[block_id]
            if name in facts.producers or name not in facts.input_positions:
                return None
            if facts.owner is None or facts.outer is None:
                return facts.input_positions[name]
            outer = self.operand_of(facts, name)
            if outer is None:
                return None
            block_id, name = facts.outer.block.id, outer
        return None

    def forward(self, block_id: str, names: Iterable[str]) -> set[tuple[str, int]]:
        """Which program outputs the values ``names`` of block ``block_id`` reach: ``{("", k)}``."""
        return {("", k) for name in names for k in closure((block_id, name), self._successors, self._reached)}

    def reach(
        self,
        seeds: Iterable[tuple[str, str]],
        *,
        stop_at: frozenset[str] = frozenset(),
        loop_outputs: bool = False,
        back_edges: bool = False,
    ) -> tuple[set[tuple[str, str]], set[int]]:
        """Every value the ``seeds`` (``(block id, name)``) flow into, and the program outputs they
        reach (each step is :meth:`_successors`')."""
        outputs: set[int] = set()
        seen: set[tuple[str, str]] = set()
        stack = list(seeds)
        while stack:
            key = stack.pop()
            if key in seen:
                continue
            seen.add(key)
            nexts, reached = self._successors(key, stop_at=stop_at, loop_outputs=loop_outputs, back_edges=back_edges)
            stack.extend(nexts)
            outputs.update(reached)
        return seen, outputs

    def _successors(
        self,
        key: tuple[str, str],
        *,
        stop_at: frozenset[str] = frozenset(),
        loop_outputs: bool = False,
        back_edges: bool = False,
    ) -> tuple[list[tuple[str, str]], list[int]]:
        """The values one value flows into directly, and the program outputs it is.

        Every output of an equation depends on every input of it; a sub-jaxpr's input on the
        operand that feeds it, and the equation's output ``k`` on the sub-jaxpr's output ``k``; a
        while loop's condition reaches nothing (it only decides how often the body runs); a
        ``cond``'s predicate reaches all its outputs (it picks the branch). Outputs of the blocks
        in ``stop_at`` are not followed out of them. With ``loop_outputs``, an operand of a loop
        also reaches every output of the loop (what a body spells out iteration by iteration,
        counted coarsely). With ``back_edges``, a loop body's output ``k`` also reaches the carry
        ``k`` the next iteration starts from (in the body and in a while's condition).
        """
        nexts: list[tuple[str, str]] = []
        outputs: list[int] = []
        facts = self.blocks[key[0]]
        for eqn, position in facts.uses.get(key[1], ()):
            if eqn.blocks:
                for sub in eqn.blocks:
                    inner = self.sub_input(eqn, sub, position)
                    if inner is not None:
                        nexts.append((sub.id, inner))
                if (loop_outputs and eqn.kind == "loop") or (eqn.kind == "cond" and position == 0):
                    nexts.extend((facts.block.id, v.name) for v in eqn.outputs if v.name != "_")
            else:
                nexts.extend((facts.block.id, v.name) for v in eqn.outputs if v.name != "_")
        if facts.block.id in stop_at:
            return nexts, outputs
        for k in facts.output_positions.get(key[1], ()):
            if back_edges:
                nexts.extend(self._next_iteration(facts, k))
            if facts.owner is None or facts.outer is None:  # the program's own block has neither
                outputs.append(k)
            elif facts.block.role != "cond" and k < len(facts.owner.outputs):
                out = facts.owner.outputs[k]
                if out.name != "_":
                    nexts.append((facts.outer.block.id, out.name))
        return nexts, outputs

    def _next_iteration(self, facts: BlockFacts, k: int) -> list[tuple[str, str]]:
        """The carry inputs a loop body's output ``k`` becomes on the next iteration (body and condition)."""
        if facts.owner is None or facts.owner.kind != "loop" or facts.block.role != "body":
            return []
        found = []
        for block in facts.owner.blocks:
            carries = self.blocks[block.id].carries
            if k < len(carries):
                found.append((block.id, carries[k]))
        return found

    def backward(self, block_id: str, names: list[str]) -> set[int]:
        """Which program inputs (positions) the values ``names`` of block ``block_id`` come from."""
        return {k for name in names for k in closure((block_id, name), self._sources, self._came_from)}

    def _sources(self, key: tuple[str, str]) -> tuple[list[tuple[str, str]], list[int]]:
        """The values one value is computed from directly, and the program input it is: an
        equation's inputs (or its blocks' outputs), a block input's outer operand, and a loop
        body's carry input its own carry output too (the last iteration's)."""
        facts = self.blocks[key[0]]
        producer = facts.producers.get(key[1])
        if producer is not None:
            return self._producer_sources(facts, *producer), []
        if key[1] not in facts.input_positions:
            return [], []  # a literal
        if facts.owner is None or facts.outer is None:  # the program's own block has neither
            return [], [facts.input_positions[key[1]]]
        outer = self.operand_of(facts, key[1])
        fed = [] if outer is None else [(facts.outer.block.id, outer)]
        return fed + self._carry_back(facts, key[1]), []

    def _producer_sources(self, facts: BlockFacts, eqn: Equation, k: int) -> list[tuple[str, str]]:
        """What an equation's output ``k`` is computed from: its inputs, or its blocks' outputs ``k``."""
        if not eqn.blocks:
            return [(facts.block.id, v.name) for v in eqn.inputs]
        return [(sub.id, sub.outputs[k].name) for sub in eqn.blocks if sub.role != "cond" and k < len(sub.outputs)]

    def _carry_back(self, facts: BlockFacts, input_name: str) -> list[tuple[str, str]]:
        """A loop body's carry input also comes from the body's own carry output (last iteration)."""
        if ".carry" not in input_name or facts.owner is None or facts.owner.kind != "loop":
            return []
        body = next(b for b in facts.owner.blocks if b.role == "body")
        first_carry = next(i for i, v in enumerate(facts.block.inputs) if ".carry" in v.name)
        k = facts.input_positions[input_name] - first_carry
        return [(body.id, body.outputs[k].name)] if k < len(body.outputs) else []

    def owner_chain(self, eqn_id: str) -> Iterator[BlockFacts]:
        """The blocks around an equation, innermost first, up to the program."""
        facts: BlockFacts | None = self.block_of[eqn_id]
        while facts is not None:
            yield facts
            facts = facts.outer


Node = TypeVar("Node", bound=Hashable)


def closure(start: Node, step: Callable[[Node], tuple[list[Node], list[int]]],
            known: dict[Node, frozenset[int]]) -> frozenset[int]:
    """The numbers ``step`` gives at ``start`` and at every node it leads to (``step``: a node's
    next nodes and its own numbers), each node's answer kept in ``known`` for the next question.

    Asked once per collective, a walk per question covers what every earlier question covered:
    a chain of a thousand dependent psums is a million steps. Kept per node, each is stepped
    once. A loop's carry leads back to itself, so the nodes are grouped into strongly connected
    components (Tarjan's, without recursion: a chain is deeper than Python's stack), the nodes
    of one component sharing one answer."""
    if start in known:
        return known[start]
    order: dict[Node, int] = {}
    low: dict[Node, int] = {}
    found: dict[Node, set[int]] = {}
    open_nodes: list[Node] = []
    is_open: set[Node] = set()
    frames: list[tuple[Node, Iterator[Node]]] = []

    def enter(node: Node) -> None:
        nexts, own = step(node)
        order[node] = low[node] = len(order)
        found[node] = set(own)
        open_nodes.append(node)
        is_open.add(node)
        frames.append((node, iter(nexts)))

    enter(start)
    while frames:
        node, nexts = frames[-1]
        for nxt in nexts:
            if nxt in known:
                found[node] |= known[nxt]
            elif nxt not in order:
                enter(nxt)
                break
            elif nxt in is_open:
                low[node] = min(low[node], order[nxt])
        else:
            frames.pop()
            if low[node] == order[node]:  # the root of its component: the component is complete
                members: list[Node] = []
                while not members or members[-1] != node:
                    members.append(open_nodes.pop())
                answer = frozenset().union(*(found[m] for m in members))
                for m in members:
                    is_open.discard(m)
                    known[m] = answer
            if frames:
                parent = frames[-1][0]
                low[parent] = min(low[parent], low[node])
                if node in known:
                    found[parent] |= known[node]
    return known[start]


def input_role(name: str) -> str:
    """``const``, ``carry``, ``xs``, ``cond_const`` or ``in``: what a block input is for."""
    label = name.rsplit(".", 1)[-1]
    return label.rstrip("0123456789")


def value_id(block_id: str, name: str) -> str:
    """A program-wide id for a value (the same form as the dataflow graph's input nodes)."""
    return qualify(block_id, name)
