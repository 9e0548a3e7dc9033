"""Values a conditional passes its branches are named by where they come from.

The program is JAX's own test ``test_cond_fori_reduced_fwd`` (tests/pjit_test.py): Explicit axes,
a ``lax.fori_loop`` whose body is a ``lax.cond`` that reshards ``k`` and ``v``, the step's own
parameters, to reduced. The partitioner gathers each in the branch, every iteration, though the
loop never changes them. Expected names come from the program's source (the reshards' first
arguments, the step's parameters); where the gathers run, from the compiled module's text.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P

import shardscope

TRIPS = 10


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class KV:
    k: jax.Array
    v: jax.Array


@jax.jit
def step(p1, kv_obj, k, v):
    def body(_, kv_store):
        return jax.lax.cond(
            p1,
            lambda: KV(jax.reshard(k, P(reduced={"x"})), jax.reshard(v, P(reduced={"x"}))),  # THE RESHARDS
            lambda: kv_store,
        )

    return jax.lax.fori_loop(0, TRIPS, body, kv_obj)


def _branch_gathers(text: str) -> list[str]:
    """The all-gathers of the computations a conditional in a while body calls, read from the text."""
    computations = dict(re.findall(r"^(?:ENTRY )?%([\w.\-]+) .*?\{\n(.*?)\n\}", text, re.M | re.S))
    bodies = set(re.findall(r"\bwhile\(.*\bbody=%([\w.\-]+)", text))
    branches = {name.strip().lstrip("%") for body in bodies for called in
                re.findall(r"conditional\(.*branch_computations=\{([^}]*)\}", computations[body])
                for name in called.split(",")}
    return [line for name in branches for line in computations[name].splitlines() if re.search(r" all-gather\(", line)]


def test_the_gathers_in_a_cond_in_a_fori_loop_are_named_by_the_parameters_they_reshard():
    """The two all-gathers run in a branch of the conditional in the loop's body (10 iterations;
    jax 0.12's XLA:CPU gathers the parameters before the loop instead); their operands reach the
    branch through the conditional's operand tuple and the loop's carry from the entry
    parameters ``k`` and ``v``: named ``k`` and ``v`` (the reshards' first arguments, the step's
    parameters), not by the line, and loop-invariant."""
    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:2])
    with jax.set_mesh(mesh):
        k = jax.device_put(np.arange(8.0, dtype=np.float32), P("x"))
        v = jax.device_put(np.arange(8.0, dtype=np.float32), P("x"))
        kv_obj = KV(jax.reshard(k, P(reduced={"x"})), jax.reshard(v, P(reduced={"x"})))
        args = (jnp.array(True), kv_obj, k, v)
        text = step.lower(*args).compile().as_text()
        inspection = shardscope.inspect(step, *args)
    in_branches = len(_branch_gathers(text))
    assert in_branches in (0, 2) and len(re.findall(r" all-gather\(", text)) == 2, text

    source = inspect.getsource(step)
    (line,) = [text for text in source.splitlines() if text.endswith("# THE RESHARDS")]
    resharded = re.findall(r"jax\.reshard\((\w+),", line)
    assert set(resharded) <= set(inspect.signature(step).parameters)
    gathers = [c for c in inspection.paired if c.kind == "all-gather"]
    assert sorted(c.value for c in gathers) == sorted(resharded)
    for c in gathers:  # jax 0.12's XLA:CPU moves them out of the loop itself: once per call there
        assert c.compiled.executions == (TRIPS if in_branches else 1)
        assert c.verdict_kind == ("loop_invariant" if in_branches else "needed"), c.verdict.reason
