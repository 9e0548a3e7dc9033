"""Naming the values of a combined sum costs time linear in the values it carries.

A deep MLP unrolled by a Python loop: every layer's equations share one source line, and XLA's
combiner sums the layers' gradients in a few combined all-reduces. Each operand's gradient is
told apart from the other layers' by the equations it reads (not by comparing it with every
forward equation of its line, which made naming 600 gradients take most of ``check``'s time).
The count of type comparisons is the measure (a timing would follow the machine's load).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardscope.engine import pytree_paths
from shardscope.engine.hlo import equation_names
from shardscope.engine.hlo.compiled import plan_of
from shardscope.engine.joined.inspection import argument_names

LAYERS = 160


def _loss(params, x):
    for w in params:
        x = x + jnp.tanh(x @ w)
    return jnp.mean(x ** 2)


@jax.jit
def _step(params, x):
    grads = jax.grad(_loss)(params, x)
    return [w - 1e-3 * g for w, g in zip(params, grads)]


def _compiled_stack():
    """The unrolled stack traced and compiled, and its argument names; every layer's gradient is
    in a combined all-reduce (counted in the compiled text)."""
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    params = [jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, P())) for _ in range(LAYERS)]
    x = jax.ShapeDtypeStruct((64, 16), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    traced = _step.trace(params, x)
    compiled = traced.lower().compile()
    text = compiled.as_text()
    summed = sum(len(re.findall(r"f32\[16,16\]", m.group(1)))
                 for m in re.finditer(r"^\s+%\S+ = \(([^)]*)\) all-reduce\(", text, re.M))
    assert summed == LAYERS  # every layer's gradient in a combined all-reduce
    return traced, compiled, argument_names(_step, (params, x), {})


def _layer_gradients(plan) -> list[str]:
    return [op.value for c in plan.collectives if c.kind == "all-reduce" for op in c.operands if op.shape == "f32[16,16]"]


def test_the_gradients_of_an_unrolled_stack_are_named_in_linear_time(monkeypatch: pytest.MonkeyPatch):
    traced, compiled, names = _compiled_stack()

    compared = 0
    same_type = equation_names._same_type

    def counted(a, b):
        nonlocal compared
        compared += 1
        return same_type(a, b)

    monkeypatch.setattr(equation_names, "_same_type", counted)
    plan = plan_of(traced, compiled, input_names=names)
    values = _layer_gradients(plan)
    assert sorted(values) == sorted(f"grad(params[{k}])" for k in range(LAYERS))  # each layer's gradient, once
    assert compared <= 8 * LAYERS, f"{compared} type comparisons for {LAYERS} gradients"


def test_the_outputs_tell_the_gradients_of_one_line_apart_in_linear_time(monkeypatch: pytest.MonkeyPatch):
    """Each gradient of the combined sum has every layer's gradient as a candidate (one line made
    them all); the updated parameter it reaches (``out[k]``) tells which. The candidates' paths are
    read once for the line, not once per gradient (LAYERS times LAYERS: 62% of ``check`` on a
    1,000-layer stack under cProfile, and quadratic)."""
    traced, compiled, names = _compiled_stack()
    read = 0
    tail = pytree_paths.tail

    def counted(name):
        nonlocal read
        read += 1
        return tail(name)

    monkeypatch.setattr(pytree_paths, "tail", counted)
    pytree_paths._labels_by_tail.cache_clear()
    plan = plan_of(traced, compiled, input_names=names)
    assert sorted(_layer_gradients(plan)) == sorted(f"grad(params[{k}])" for k in range(LAYERS))
    assert read <= 4 * LAYERS, f"{read} paths read to tell {LAYERS} gradients apart"
