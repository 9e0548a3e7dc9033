"""A chain of dependent collectives written by a Python loop (``x = psum(x * 1.01, 'data')``, or a
``ppermute``): each compiled collective pairs with its own equation, and the analysis takes steps
linear in the chain.

Every link has the same line, kind and bytes, so every compiled collective has the whole chain
as candidates; a psum is named by the output it reaches (through all the later links), a
ppermute by the input it comes from (through all the earlier ones). A chain of 1,000 psums took
261 s: pairing compared the candidates as values, and the walk naming each link went over the
rest of the chain once per link. The counts of steps are the measure (a timing would follow the
machine's load). The expected pairs come from the compiled text (the collectives in the order
each reads the one before) and from the jaxpr (its equations in order).
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope
from shardscope.engine.hlo import pairing
from shardscope.engine.jaxpr.valueflow import ValueIndex

LINKS = 300


RING = [(i, (i + 1) % 8) for i in range(8)]
LINKS_OF = {  # the equation's primitive prefix, the HLO opcode, one link, the output's spec
    "psum": ("psum", "all-reduce", lambda x: lax.psum(x * 1.01, "data"), P()),
    "ppermute": ("ppermute", "collective-permute", lambda x: lax.ppermute(x * 1.01, "data", RING), P("data")),
}


def _chain(kind: str):
    _, _, link, out_spec = LINKS_OF[kind]
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))

    def local(x):
        for _ in range(LINKS):
            x = link(x)
        return x

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("data"), out_specs=out_spec))
    return fn, (np.ones(64, np.float32),)


def _in_chain_order(text: str, opcode: str) -> list[str]:
    """The collectives of the compiled text, first to last: each one's operands lead back (through
    the fusion that scales it) to the collective before it, and the first's to none."""
    operands = {name: re.findall(r"%([\w.\-]+)", args) for name, args in
                re.findall(r"^\s+(?:ROOT )?%([\w.\-]+) = \S+ [\w\-]+\(([^)]*)\)", text, re.M)}
    reduces = re.findall(rf"^\s+(?:ROOT )?%([\w.\-]+) = \S+ {opcode}\(", text, re.M)

    def before(name: str) -> str | None:
        stack, seen = list(operands[name]), set()
        while stack:
            current = stack.pop()
            if current in reduces:
                return current
            if current not in seen:
                seen.add(current)
                stack += operands.get(current, [])
        return None

    after = {before(name): name for name in reduces}
    order, current = [], after.get(None)
    while current is not None:
        order.append(current)
        current = after.get(current)
    return order


def _links_in_order(fn, args, prefix: str) -> list[str]:
    """The shard_map body's equations of the chain in the jaxpr's order, as ``primitive_k`` (the
    k-th of its primitive: how an equation id names it)."""
    (body,) = [eqn.params["jaxpr"] for eqn in fn.trace(*args).jaxpr.eqns if eqn.primitive.name == "shard_map"]
    seen: dict[str, int] = {}
    found = []
    for eqn in body.eqns:
        name = eqn.primitive.name
        if name.startswith(prefix):
            found.append(f"{name}_{seen.get(name, 0)}")
        seen[name] = seen.get(name, 0) + 1
    return found


@pytest.mark.parametrize("kind", LINKS_OF)
def test_each_collective_of_a_chain_pairs_with_its_own_equation_in_linear_steps(kind, monkeypatch: pytest.MonkeyPatch):
    prefix, opcode, _, _ = LINKS_OF[kind]
    fn, args = _chain(kind)
    text = fn.lower(*args).compile().as_text()
    chain = _in_chain_order(text, opcode)
    equations = _links_in_order(fn, args, prefix)
    assert len(chain) == len(equations) == LINKS

    compared = stepped = 0
    matches = pairing._matches

    def counted_matches(*a, **k):
        nonlocal compared
        compared += 1
        return matches(*a, **k)

    def counted(step):
        def wrapped(*a, **k):
            nonlocal stepped
            stepped += 1
            return step(*a, **k)
        return wrapped

    monkeypatch.setattr(pairing, "_matches", counted_matches)
    for step in ("_successors", "_sources", "_producer_sources"):  # a step forward, back, and what both read
        monkeypatch.setattr(ValueIndex, step, counted(getattr(ValueIndex, step)))
    inspection = shardscope.inspect(fn, *args)

    by_name = {c.name: c for c in inspection.compiled.collectives}
    assert [by_name[name].equations for name in chain] == [(f"shard_map_0/{e}",) for e in equations]
    assert all(c.written_by == "program" for c in by_name.values()) and not inspection.compiled.unmatched_equations
    assert compared <= 3 * LINKS, f"{compared} candidates read to pair {LINKS} {opcode}s"
    assert stepped <= 20 * LINKS, f"{stepped} value steps to name {LINKS} {prefix}s"
