"""The Graph tab's folded drawing: the collectives and the paths into them, the ops between folded.

A real model's loop body is its whole backward pass: drawn in full, the graph is dozens of boxes,
most of them off the right edge. What the tab is for is where each collective's value comes from
and where it becomes varying: the parameters (a block input that reaches a cast), their casts (a
``pvary`` moves no data but decides where the sum lands), the loops, and the op that computes
each collective's operand. Those stay; every other op, and the inputs that reach no cast (the
chunk's data, the loop's carry), are folded into the edges between them, and the box below a fold
says how many it hides. ``f`` in the tab shows every op again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import networkx as nx


@dataclass(frozen=True)
class Folded:
    """What a fold hid above one kept node: ``ops`` equations and ``inputs`` block inputs."""

    ops: int = 0
    inputs: int = 0

    def text(self) -> str:
        """``⋮ 39 ops + 2 inputs`` (empty when nothing was folded)."""
        parts = [f"{n} {word}{'s' if n > 1 else ''}" for n, word in ((self.ops, "op"), (self.inputs, "input")) if n]
        return f"⋮ {' + '.join(parts)}" if parts else ""


def fold(graph: nx.DiGraph, sinks: Sequence[str]) -> tuple[nx.DiGraph, dict[str, Folded]]:
    """``graph`` (what feeds ``sinks``) with only the kept nodes: ``sinks``, the nodes feeding a
    sink directly, the loops, the casts some input reaches and the inputs that reach a kept cast;
    a kept node is fed by the kept nodes that reach it through folded ones only. Returns that
    graph (the nodes keep their attributes) and, per kept node, what was folded on its paths up
    to the kept nodes feeding it."""
    kinds = dict(graph.nodes(data="kind"))
    inputs = [node for node, kind in kinds.items() if kind == "input"]
    fed = _reached(graph, inputs, graph.successors)
    casts = {node for node, kind in kinds.items() if kind == "cast" and node in fed}  # not a constant's cast
    keep = set(sinks) | casts | {node for node, kind in kinds.items() if kind == "loop"}
    for sink in sinks:
        keep.update(graph.predecessors(sink))
    keep |= set(inputs) & _reached(graph, list(casts), graph.predecessors)
    folded = nx.DiGraph()
    folded.add_nodes_from((node, graph.nodes[node]) for node in graph.nodes if node in keep)
    hidden: dict[str, Folded] = {}
    for node in folded.nodes:
        above = _reached(graph, [node], graph.predecessors, stop=keep, edges=lambda parent, n=node: folded.add_edge(parent, n))
        hidden[node] = Folded(sum(1 for n in above if kinds.get(n) != "input"), sum(1 for n in above if kinds.get(n) == "input"))
    return folded, hidden


def _reached(graph: nx.DiGraph, starts: list[str], step, stop: set[str] | None = None, edges=None) -> set[str]:
    """The nodes reached from ``starts`` (not themselves) one ``step`` at a time; a node in
    ``stop`` is not walked through, only reported to ``edges``."""
    seen: set[str] = set()
    stack = list(starts)
    while stack:
        for other in step(stack.pop()):
            if stop is not None and other in stop:
                if edges is not None:
                    edges(other)
                continue
            if other not in seen:
                seen.add(other)
                stack.append(other)
    return seen
