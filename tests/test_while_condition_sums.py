"""A power iteration in a ``while_loop`` whose condition sums the error over devices.

The condition's ``psum`` compiles to an all-reduce in the loop's condition computation (read
from the compiled text here), not its body. The body sums a tuple ``(w, sq)`` and drops
``sq``: the compiled body all-reduces ``w`` alone (f32[16]), so the psum of ``sq`` never runs;
it is dead, not a second row of the body's sum with no compiled instruction.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope


def _program():
    mesh = Mesh(np.array(jax.devices()[:4]), ("d",))

    def local(a, v):
        def cond(state):
            v, i, err = state
            return (lax.psum(err, "d") > 1e-6) & (i < 50)

        def body(state):
            v, i, _ = state
            w = a.T @ (a @ v)
            w, sq = lax.psum((w, jnp.sum(w) + 1.0), "d")
            w = w / jnp.linalg.norm(w)
            return w, i + 1, jnp.sum((a @ (w - v)) ** 2)

        start = lax.pcast(jnp.float32(1.0), "d", to="varying")
        return lax.while_loop(cond, body, (v, 0, start))[0]

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("d"), P()), out_specs=P()))
    a = jax.device_put(np.eye(16, dtype=np.float32), NamedSharding(mesh, P("d")))
    v = jax.device_put(np.ones(16, np.float32), NamedSharding(mesh, P()))
    return fn, (a, v)


def _computations_with_all_reduce(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            current = head.group(1)
        elif (m := re.match(r"^\s+(?:ROOT )?%([\w.\-]+) = (\S+) all-reduce\(", line)):
            found.setdefault(current, []).append(m.group(2))
    return found


def test_a_sum_in_the_condition_is_placed_there_and_the_dropped_half_of_the_body_sum_is_dead():
    fn, args = _program()
    text = fn.lower(*args).compile().as_text()
    loop = re.search(r" while\([^)]*\), condition=%?([\w.\-]+), body=%?([\w.\-]+)", text)
    reduces = _computations_with_all_reduce(text)
    assert reduces[loop.group(1)] == ["f32[]"]  # the error's sum, in the condition
    assert [s.split("{")[0] for s in reduces[loop.group(2)]] == ["f32[16]"]  # w's sum alone: sq's is gone

    inspection = shardscope.inspect(fn, *args)
    in_condition = [p for p in inspection.paired if p.compiled is not None and p.compiled.computation == loop.group(1)]
    (test,) = in_condition
    assert "in the while condition" in test.pairing() and "condition" in test.verdict.reason
    assert all(p.compiled is not None or p.dead for p in inspection.paired)
    assert sum(p.dead for p in inspection.paired) == 1
    assert "no compiled instruction was found" not in str(inspection)
    assert not inspection.flagged
