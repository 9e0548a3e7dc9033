"""An all-to-all is one collective of one value, whatever form XLA prints it in.

XLA:CPU prints an array all-to-all in its tuple form: one operand per peer of its group, the
chunk each peer receives. That is one all-to-all of one value (a combiner made nothing), so it
is not "combined"; a combined all-reduce (XLA's combiner merging several gradients into one
tuple-shaped instruction) still is. Expected numbers are read from the compiled text here.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import _compiled_programs as programs
from shardscope.engine.hlo.compiled import plan_of
from shardscope.engine.joined.inspection import argument_names
from shardscope.render.findings import compiled_collective_json
from shardscope.engine.hlo.paired import paired_collectives


def _a2a_line(text: str) -> tuple[int, str]:
    """The operand count of the one all-to-all line of ``text`` and its replica groups."""
    line = re.search(r"^\s+%\S+ = .* all-to-all\((.*?)\), channel_id.*replica_groups=(\S+( \{[^}]*\})?)", text, re.M)
    return len(re.findall(r"%[\w.\-]+", line.group(1))), line.group(2)


def test_a_transposed_sharding_is_one_all_to_all_of_one_value():
    mesh = Mesh(np.array(jax.devices()[:8]), ("x",))

    @jax.jit
    def transpose_layout(a):
        return jax.lax.with_sharding_constraint(jnp.sin(a), NamedSharding(mesh, P(None, "x")))

    a = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P("x", None)))
    traced = transpose_layout.trace(a)
    compiled = traced.lower().compile()
    text = compiled.as_text()
    operands, _ = _a2a_line(text)
    assert operands == 8  # XLA:CPU's tuple form: one chunk per peer of the 8
    plan = plan_of(traced, compiled, input_names=argument_names(transpose_layout, (a,), {}))
    (c,) = plan.collectives
    assert c.kind == "all-to-all" and not c.combined and len(c.operands) == 1
    assert c.bytes_per_execution == 64 * 64 * 4 // 8  # one device's shard, all of it sent
    assert "combiner" not in c.describe()
    (p,) = paired_collectives((), plan)
    row = compiled_collective_json(p, c)
    # the value the partitioner moves, as the line writes it (issue 45, item 10), not the output it reaches
    assert row["operands"] == 1 and row["values"] == ["jnp.sin(a)"] and "combiner" not in row["pairing"]
    assert "combiner" not in p.pairing()


def test_a_shard_map_all_to_all_is_one_value():
    """A MoE's dispatch: ``lax.all_to_all`` under ``shard_map``, the program's own."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("expert",))

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=P("expert"), out_specs=P("expert"))
    def dispatch(tokens):
        return jax.lax.all_to_all(tokens, "expert", 0, 0, tiled=True) * 2.0

    tokens = jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=NamedSharding(mesh, P("expert")))
    traced = dispatch.trace(tokens)
    compiled = traced.lower().compile()
    plan = plan_of(traced, compiled, input_names=argument_names(dispatch, (tokens,), {}))
    (c,) = plan.collectives
    assert c.kind == "all-to-all" and not c.combined and len(c.operands) == 1
    assert c.bytes_per_execution == 16 * 8 * 4 // 4
    assert len(c.equations) == 1  # paired with the one all_to_all equation


def test_a_combined_all_reduce_is_still_combined():
    case, traced, compiled = programs.compile_case(programs.gspmd_accumulate)
    plan = plan_of(traced, compiled, input_names=argument_names(case.fn, case.args, {}))
    (c,) = plan.collectives
    shapes = re.search(r"^\s+%\S+ = \(([^)]*)\) all-reduce\(", compiled.as_text(), re.M).group(1).split(", ")
    assert len(shapes) == 2 and c.combined and len(c.operands) == 2
    assert "combiner merged 2 all-reduces" in c.describe()
