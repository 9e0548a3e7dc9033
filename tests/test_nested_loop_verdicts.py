"""A collective inside two loops whose operand changes with the inner loop only.

A scan over stacked layers inside a scan over micro-batches, FSDP (the stack sharded over
``data``): each inner iteration gathers its layer's weights, 3 layers x 3 micro-batches = 9
runs. Across micro-batches the weights never change: the outer loop can run the inner loop's
gathers once, 3 runs, keeping all 3 layers gathered. Each layer's gradient, stacked by the
backward scan and accumulated over micro-batches, is deferrable, and its accumulator is the
whole stack of unscattered gradients. Expected facts are read from the compiled text here.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

import _compiled_programs as programs
from shardscope.engine.hlo.compiled import compiled_plan

LAYERS, MICRO, WIDTH, BATCH, DEVICES = 3, 3, 32, 16, 8


def _loss(w, x):
    def layer(h, wl):
        return jnp.tanh(h @ wl), None

    h, _ = lax.scan(layer, x, w)
    return jnp.mean(h ** 2)


def _step(w, xs):
    def body(acc, x):
        return acc + jax.grad(_loss)(w, x), None

    acc, _ = lax.scan(body, jnp.zeros_like(w), xs)
    return acc


def _compiled_text(shardy):
    mesh = jax.make_mesh((DEVICES,), ("data",), devices=jax.devices()[:DEVICES])
    w = jax.device_put(np.full((LAYERS, WIDTH, WIDTH), 0.1, np.float32), NamedSharding(mesh, P(None, "data", None)))
    xs = jax.device_put(np.ones((MICRO, BATCH, WIDTH), np.float32), NamedSharding(mesh, P(None, "data", None)))
    with programs.partitioner(shardy):
        return mesh, jax.jit(_step).lower(w, xs).compile().as_text()


def _computation_of(text: str, name: str) -> str:
    """The computation whose body defines instruction ``name``."""
    current = ""
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            current = head.group(1)
        elif re.match(rf"^\s+(?:ROOT )?%{re.escape(name)} = ", line):
            return current
    raise AssertionError(name)


def _loop_running(text: str, body: str) -> str:
    """The while instruction whose body is ``body``."""
    return re.search(rf"%([\w.\-]+) = \(.*?\) while\([^)]*\), condition=%?[\w.\-]+, body=%?{re.escape(body)}\b",
                     text).group(1)


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_a_gather_that_changes_with_the_inner_loop_only_is_invariant_across_the_outer_one(shardy):
    mesh, text = _compiled_text(shardy)
    gathers = re.findall(r"%(all-gather[\w.\-]*) = f32\[(\d+),(\d+)\]\S* all-gather\(", text)
    assert gathers
    plan = compiled_plan(text, mesh=mesh)
    for name, rows, cols in gathers:
        inner = _loop_running(text, _computation_of(text, name))
        outer = _loop_running(text, _computation_of(text, inner))
        assert not re.search(r"/while/body/", re.search(rf"%{re.escape(outer)} = .*", text).group())  # the step's own scan
        (c,) = [c for c in plan.collectives if c.name == name]
        assert c.executions == LAYERS * MICRO
        assert c.verdict.kind == "loop_invariant", c.verdict.reason
        assert c.verdict.loop_ids == (outer,) and c.verdict.executions_after == LAYERS
        assert c.verdict.hoist_bytes == LAYERS * int(rows) * int(cols) * 4  # every layer's gathered weights


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_a_stacked_gradient_accumulated_over_micro_batches_is_sized_as_the_whole_stack(shardy):
    mesh, text = _compiled_text(shardy)
    plan = compiled_plan(text, mesh=mesh)
    sums = [c for c in plan.collectives if c.kind in ("all-reduce", "reduce-scatter") and len(c.loops) == 2]
    assert sums
    for c in sums:
        assert c.verdict.kind == "deferrable", c.verdict.reason
        layer = WIDTH * WIDTH * 4  # one layer's unscattered f32 gradient
        assert f"{LAYERS * layer:,} B accumulator" in c.verdict.reason
