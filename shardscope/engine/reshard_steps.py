"""A way from one layout of a tensor to another in steps the SPMD partitioner takes efficiently.

Each step moves one mesh axis from the end of one dimension's axes to the end of another's
(``P('y', None, 'x')`` -> ``P('y', 'x', None)``): the partitioner does that with one all-to-all
over that axis. Where it cannot go from a layout to another directly (an "involuntary full
rematerialization": it gathers the whole tensor onto every device), a chain of such steps
through layouts it can reach is the reshard written in steps
(``with_sharding_constraint`` at each).
"""

from __future__ import annotations

from collections import deque
from math import prod
from typing import Mapping

Layout = tuple[tuple[str, ...], ...]
"""The mesh axes of each dimension, major first: ``(('y',), (), ('x',))`` is ``P('y', None, 'x')``."""

MAX_STEPS = 4
"""The longest chain looked for: a layout of rank r over k axes is at most k moves from another
with the same axes."""


def all_to_all_steps(source: Layout, target: Layout, shape: tuple[int, ...], axis_sizes: Mapping[str, int]
                     ) -> tuple[Layout, ...] | None:
    """The layouts after each step of the shortest chain from ``source`` to ``target`` (``target``
    last), each step one axis moved between dimensions, every layout dividing ``shape``; None
    when there is none within :data:`MAX_STEPS` (or the two hold other axes)."""
    if sorted(a for dim in source for a in dim) != sorted(a for dim in target for a in dim) or source == target:
        return None
    seen = {source}
    queue: deque[tuple[Layout, tuple[Layout, ...]]] = deque([(source, ())])
    while queue:
        layout, path = queue.popleft()
        if len(path) >= MAX_STEPS:
            continue
        for moved in _moves(layout):
            if moved in seen or not _divides(moved, shape, axis_sizes):
                continue
            if moved == target:
                return path + (moved,)
            seen.add(moved)
            queue.append((moved, path + (moved,)))
    return None


def spec_text(layout: Layout) -> str:
    """``P('y', 'x', None)``."""
    def entry(axes: tuple[str, ...]) -> str:
        return "None" if not axes else repr(axes[0]) if len(axes) == 1 else "(" + ", ".join(map(repr, axes)) + ")"

    return "P(" + ", ".join(entry(axes) for axes in layout) + ")"


def _moves(layout: Layout) -> list[Layout]:
    """Every layout one all-to-all away: the last axis of one dimension appended to another's."""
    found = []
    for i, axes in enumerate(layout):
        if not axes:
            continue
        for j in range(len(layout)):
            if j != i:
                moved = list(layout)
                moved[i] = axes[:-1]
                moved[j] = layout[j] + (axes[-1],)
                found.append(tuple(moved))
    return found


def _divides(layout: Layout, shape: tuple[int, ...], axis_sizes: Mapping[str, int]) -> bool:
    return all(n % prod(axis_sizes.get(a, 1) for a in axes) == 0 for n, axes in zip(shape, layout))
