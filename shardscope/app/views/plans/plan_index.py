"""Where every equation of a plan sits, for the plan tree's lazy nodes and for n/N.

Computed once per plan and cheap (no labels are made): each equation's path of node keys and
position in its block, and the collectives below each node with their runs per call, so a gap
node can say what it hides without its equations having nodes.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardscope.app.views.plans.plan_labels import Inside

if TYPE_CHECKING:
    from shardscope.engine.jaxpr.model import Block, Equation
    from shardscope.pipeline.analysis import PlanResult


@dataclass
class Entry:
    """What a tree node stands for: an equation, or one of an equation's several sub-blocks."""

    key: str  # the equation id, or block_key() of a sub-block
    equation: Equation | None = None
    block: Block | None = None  # a block node, the root, or a gap's block
    populated: bool = False
    gap: tuple[int, int] | None = None  # equations [start, stop) of ``block`` not shown yet

    def child_blocks(self) -> list[Block]:
        """The blocks whose equations are this node's children (or whose nodes are)."""
        if self.block is not None:
            return [self.block]
        return list(self.equation.blocks) if self.equation is not None else []


@dataclass(frozen=True)
class BlockCollectives:
    """The collectives right in one block, by position, with running totals: any stretch's :class:`Inside` at once."""

    positions: tuple[int, ...]  # ascending
    runs: tuple[int, ...]  # running totals, one longer than ``positions``: runs per call (the known ones)
    unknown: tuple[int, ...]  # ... how many have runs not known statically
    in_loops: tuple[int, ...]  # ... how many sit in loops

    def between(self, start: int, stop: int) -> Inside:
        """The collectives at positions ``[start, stop)`` (a bisection: a plan may have thousands)."""
        i, j = bisect_left(self.positions, start), bisect_left(self.positions, stop)
        return Inside(j - i, None if self.unknown[j] - self.unknown[i] else self.runs[j] - self.runs[i],
                      self.in_loops[j] - self.in_loops[i])


@dataclass(frozen=True)
class PlanIndex:
    """Where every equation sits, computed once per plan (cheap: no labels are made)."""

    paths: dict[str, tuple[str, ...]]  # equation id -> keys of the nodes above it, outermost first
    positions: dict[str, int]  # equation id -> its position in its block
    collectives: dict[str, Any]  # equation id -> shardscope.engine.jaxpr.dataflow.Collective
    order: tuple[str, ...]  # collective equation ids in program order
    inside: dict[str, Inside]  # node key -> the collectives below it
    in_blocks: dict[str, BlockCollectives] = field(default_factory=dict)  # node key -> those right in its block

    def inside_between(self, parent_key: str, start: int, stop: int) -> Inside:
        """The collectives right in ``parent_key``'s block at positions ``[start, stop)``."""
        found = self.in_blocks.get(parent_key)
        return Inside() if found is None else found.between(start, stop)


def block_key(eqn: Equation, block: Block) -> str:
    """The node key of one of an equation's several sub-blocks (a body's id is its equation's)."""
    return f"{eqn.id}::{block.role}"


def index_plan(plan: PlanResult) -> PlanIndex:
    """Index ``plan`` (a :class:`~shardscope.pipeline.analysis.PlanResult`) for lazy display and search."""
    paths: dict[str, tuple[str, ...]] = {}
    positions: dict[str, int] = {}

    def walk(block: Block, path: tuple[str, ...]) -> None:
        for position, eqn in enumerate(block.equations):
            paths[eqn.id] = path
            positions[eqn.id] = position
            if len(eqn.blocks) == 1:
                walk(eqn.blocks[0], path + (eqn.id,))
            else:
                for sub in eqn.blocks:
                    walk(sub, path + (eqn.id, block_key(eqn, sub)))

    walk(plan.program.root, ())
    collectives = {c.equation_id: c for c in plan.collectives}
    # [count, known runs, unknown runs, in loops] below each node; each collective's runs once
    tallies: dict[str, list[int]] = {}
    in_block: dict[str, list[tuple[int, int | None, bool]]] = {}
    for c in plan.collectives:
        path = paths.get(c.equation_id)
        if path is None:
            continue
        runs, in_loop = c.executions, c.in_loop
        for key in path:
            tally = tallies.setdefault(key, [0, 0, 0, 0])
            tally[0] += 1
            if runs is None:
                tally[2] += 1
            else:
                tally[1] += runs
            tally[3] += in_loop
        in_block.setdefault(path[-1] if path else "root", []).append((positions[c.equation_id], runs, in_loop))
    inside = {key: Inside(count, None if unknown else runs, in_loops) for key, (count, runs, unknown, in_loops) in tallies.items()}
    return PlanIndex(paths, positions, collectives, tuple(collectives), inside,
                     {key: _block_collectives(found) for key, found in in_block.items()})


def _block_collectives(found: list[tuple[int, int | None, bool]]) -> BlockCollectives:
    found = sorted(found, key=lambda item: item[0])
    runs, unknown, in_loops = [0], [0], [0]
    for _, run, in_loop in found:
        runs.append(runs[-1] + (run or 0))
        unknown.append(unknown[-1] + (run is None))
        in_loops.append(in_loops[-1] + in_loop)
    return BlockCollectives(tuple(p for p, _, _ in found), tuple(runs), tuple(unknown), tuple(in_loops))
