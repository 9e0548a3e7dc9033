"""A what-if's compiled check flags another kind of collective that runs more often, also when the
original's count of it is unknown (a ``while_loop`` whose trip count is an argument)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from shardscope.engine.hlo.compiled import plan_of
from shardscope.whatif.checks import plan_check


def _plan(gathers: int):
    """A program whose ``while_loop`` (trips: the argument ``n``) all-gathers ``gathers`` values per
    iteration, and all-reduces once after it."""
    mesh = jax.make_mesh((4,), ("x",))

    def step(x, n):
        def body(carry):
            i, acc = carry
            for k in range(gathers):
                acc = acc + jax.lax.all_gather(acc * (k + 2), "x", tiled=True)[:2]
            return i + 1, acc
        _, acc = jax.lax.while_loop(lambda c: c[0] < n, body, (0, x))
        return jax.lax.psum(acc, "x")

    f = jax.shard_map(step, mesh=mesh, in_specs=(P("x"), P()), out_specs=P())
    x = jax.device_put(jnp.ones(8), NamedSharding(mesh, P("x")))
    return plan_of(jax.jit(f).trace(x, jnp.int32(3)))


def test_a_kind_whose_unknown_count_grew_fails_the_check():
    before, after = _plan(1), _plan(2)
    gathers = lambda plan: [c for c in plan.collectives if c.kind == "all-gather"]  # noqa: E731
    # counted independently: XLA's all-gathers in the loop, their values, each run an unknown number of times
    assert [c.executions for c in gathers(before)] == [None]
    assert sum(max(1, len(c.operands)) for c in gathers(after) if c.in_loop) == 2
    check = plan_check(before, after, "all-reduce", [])
    assert check.grew == {"all-gather": (None, None)}
    assert not check.ok
    assert "all-gather" in check.reason()
    assert plan_check(before, before, "all-reduce", []).grew == {}
