"""An involuntary full rematerialization of a value the program computes (not one of its inputs):
named as its line writes it, at that line, its gathers labelled with it, and a fix that applies
to an intermediate: the value resharded in steps the partitioner takes with one all-to-all each,
compiled and verified.

Expected values come from the programs themselves: the names and lines from this file's text
(by a mark), the gathers and all-to-alls counted in HLO text compiled here by JAX alone, the
fix written out by hand below (``with_sharding_constraint`` through ``P('y', 'x', None)``).
"""

from __future__ import annotations

import re
from math import prod
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import shardscope
from shardscope.render.partitioner import warning_json, warning_lines
from test_partitioner_warnings import shardy  # noqa: F401  (a fixture: Shardy on and off where JAX has both)

mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
ROWS, SEQUENCE = P("y", None, "x"), P(None, ("x", "y"), None)
THROUGH = P("y", "x", None)  # x moved from dim 2 to dim 1, then y from dim 0 after it: an all-to-all each
acts = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=NamedSharding(mesh, ROWS))
resid = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=NamedSharding(mesh, SEQUENCE))


@jax.jit
def block(acts, resid):
    h = jnp.tanh(acts)  # THE TANH
    return h + resid


@jax.jit
def block_in_one_line(acts, resid):
    out = jnp.tanh(acts) + resid  # THE TANH IN A SUM
    return out * 2.0


@jax.jit
def block_in_one_line_fixed(acts, resid):
    """The fix, written by hand: the tanh resharded where it is written, through P('y', 'x', None)."""
    out = jax.lax.with_sharding_constraint(
        jax.lax.with_sharding_constraint(jnp.tanh(acts), NamedSharding(mesh, THROUGH)),
        NamedSharding(mesh, SEQUENCE)) + resid
    return out * 2.0


@jax.jit
def sequence_parallel(acts):
    g = jax.nn.gelu(acts * 2.0)  # THE GELU
    return jax.lax.with_sharding_constraint(g, NamedSharding(mesh, SEQUENCE))


@jax.jit
def sequence_parallel_in_steps(acts):
    """The fix, written by hand: g resharded through P('y', 'x', None)."""
    g = jax.nn.gelu(acts * 2.0)
    g = jax.lax.with_sharding_constraint(g, NamedSharding(mesh, THROUGH))
    return jax.lax.with_sharding_constraint(g, NamedSharding(mesh, SEQUENCE))


def _line(mark: str) -> int:
    (line,) = [n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith(mark)]
    return line


def _instructions(text: str, kind: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(rf"= .*\s{kind}\(", line)]


def _result_bytes(line: str) -> int:
    """Bytes of an instruction's result (its shapes before the opcode, a tuple's summed)."""
    head = line.split("=", 1)[1].split(" all-to-all(")[0]
    return sum(4 * prod(int(d) for d in dims.split(",") if d) for dims in re.findall(r"f32\[([\d,]*)\]", head))


def test_a_gelu_constrained_to_sequence_parallel_is_named_g_and_resharded_in_two_all_to_alls(shardy):
    inspection = shardscope.inspect(sequence_parallel, acts)  # first: the compiles below would be its cache hits
    (warning,) = inspection.rematerializations
    original = inspection.call.compiled.as_text()
    gathers = {re.search(r"%([\w.\-]+) =", line).group(1) for line in _instructions(original, "all-gather")}
    by_hand = sequence_parallel_in_steps.lower(acts).compile().as_text()
    all_to_alls = _instructions(by_hand, "all-to-all")
    assert len(gathers) == 2 and len(all_to_alls) == 2 and not _instructions(by_hand, "all-gather")

    where = f"test_intermediate_remat.py:{_line('# THE GELU')} (sequence_parallel)"
    assert (warning.value, warning.value_source) == ("g", where)
    assert (warning.source_layout, warning.target) == ("P('y', None, 'x')", "P(None, ('x', 'y'), None)")
    assert set(warning.collectives) == gathers
    assert {c.value for c in inspection.compiled.collectives if c.name in gathers} == {"g"}
    fix = warning.fix
    assert fix is not None and fix.verified and fix.through == ("P('y', 'x', None)",)
    assert dict(fix.kinds_after) == {"all-to-all": len(all_to_alls)}
    assert fix.bytes_after == sum(_result_bytes(line) for line in all_to_alls)
    text = " ".join(" ".join(warning_lines(warning)).split())
    assert "jit(sequence_parallel)" not in text and "in_shardings" not in text and "not compiled" not in text
    assert "g = jax.lax.with_sharding_constraint(g, NamedSharding(mesh, P('y', 'x', None)))" in text
    assert warning_json(warning)["fix"]["through"] == ["P('y', 'x', None)"]


def test_a_tanh_added_to_a_residual_in_another_layout_is_named_h_at_its_line(shardy):
    inspection = shardscope.inspect(block, acts, resid)
    (warning,) = inspection.rematerializations
    if warning.op_name == "resid":  # GSPMD moves the residual to h's layout: an input, fixed as it comes in
        assert warning.fix is not None and warning.fix.verified and not warning.fix.through
        return
    where = f"test_intermediate_remat.py:{_line('# THE TANH')} (block)"
    assert (warning.value, warning.value_source) == ("h", where)
    assert {c.value for c in inspection.compiled.collectives if c.name in warning.collectives} == {"h"}
    assert warning.fix is not None and warning.fix.verified and warning.fix.through == ("P('y', 'x', None)",)


def test_an_intermediate_without_a_compiled_fix_is_not_told_to_change_in_shardings():
    """A value no argument carries (here one read from a log line alone, no program to compile)."""
    from shardscope.engine.hlo.partitioner_warnings import read_warning
    from shardscope.engine.hlo.replica_groups import MeshShape

    message = ("[SPMD] Involuntary full rematerialization. The compiler cannot go from sharding "
               "{devices=[2,1,4]<=[4,2]T(1,0)} to {devices=[1,8,1]<=[8]} efficiently for HLO operation %tanh.0 = "
               "f32[2,16,2]{2,1,0} tanh(%param), sharding={devices=[2,1,4]<=[4,2]T(1,0)}, "
               "metadata={op_name=\"jit(block)/tanh\" stack_frame_id=7}. As the last resort, SPMD will replicate.")
    warning = read_warning(message, MeshShape(("x", "y"), (4, 2)))
    assert warning.is_intermediate and warning.fix is None and warning.local_shape == (2, 16, 2)
    text = " ".join(" ".join(warning_lines(warning)).split())
    assert "in_shardings" not in text and "with_sharding_constraint" in text


def test_an_operand_of_its_line_is_named_by_its_expression_and_resharded_where_it_is_written(shardy):
    """``out = jnp.tanh(acts) + resid``: the value the partitioner gathers is the tanh (its
    warning's instruction), an operand of the line, not ``out`` (the sum the line assigns). It
    is named as written (the marked line's text), at that line, and the fix reshards the tanh:
    compiled by hand here, it has all-to-alls only, as many and as large as the fix says."""
    inspection = shardscope.inspect(block_in_one_line, acts, resid)
    (warning,) = inspection.rematerializations
    if warning.op_name == "resid":  # GSPMD moves the residual to the tanh's layout: an input, fixed as it comes in
        return
    marked = _line("# THE TANH IN A SUM")
    written = Path(__file__).read_text().splitlines()[marked - 1]
    expression = written.split("=", 1)[1].split("+")[0].strip()
    assert expression == "jnp.tanh(acts)"
    assert (warning.value, warning.value_source) == (expression, f"test_intermediate_remat.py:{marked} (block_in_one_line)")
    assert {c.value for c in inspection.compiled.collectives if c.name in warning.collectives} == {expression}

    by_hand = block_in_one_line_fixed.lower(acts, resid).compile().as_text()
    all_to_alls = _instructions(by_hand, "all-to-all")
    assert all_to_alls and not _instructions(by_hand, "all-gather")
    fix = warning.fix
    assert fix is not None and fix.verified and fix.through == ("P('y', 'x', None)",)
    assert dict(fix.kinds_after) == {"all-to-all": len(all_to_alls)}
    assert fix.bytes_after == sum(_result_bytes(line) for line in all_to_alls)
    text = " ".join(" ".join(warning_lines(warning)).split())
    assert "out = jax.lax" not in text
    assert (f"write jax.lax.with_sharding_constraint(jax.lax.with_sharding_constraint({expression}, NamedSharding(mesh, "
            "P('y', 'x', None))), NamedSharding(mesh, P(None, ('x', 'y'), None))) in its place") in text
