"""What check says of each collective on a target: its value as the program names it, its axes,
its line, and a verdict cell that reads as the CPU's table does.

Expected values come from the module compiled here (which collectives sit in while bodies,
their replica groups and metadata) and from the program's own source (the lines its values are
written on), never from shardscope's output.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh as JaxMesh
from rich.console import Console

import _target_verdict_programs as programs
from _tpu_text import all_reduces
from shardscope.pipeline.check import inspect_on
from shardscope.render.findings import collectives_table
from shardscope.render.targets import placements_table
from test_target_verdicts import _on_target
from test_targets import needs_libtpu


def _table_rows(table) -> list[list[str]]:
    console = Console(width=400, record=True)
    console.print(table)
    return [[c.strip() for c in line.split("│")][1:-1] for line in console.export_text().splitlines()
            if line.startswith("│")]


def _cpu_rows(table) -> list[list[str]]:
    console = Console(width=400, record=True)
    console.print(table)
    return [line.split() for line in console.export_text().splitlines() if line.strip()[:1].isdigit()]


# --- item 12: a collective outside every loop reads the same in both tables -----------------

@needs_libtpu
def test_a_collective_outside_every_loop_has_no_loop_verdict_on_the_target_as_on_the_cpu():
    """The TPU moves the gradients' sum out of the micro-batch loop (counted in the module compiled
    here: an all-reduce at depth 0): its row in the target's table says ``-`` for the verdict,
    as the CPU's findings table does for every collective outside loops."""
    target = "tpu:v5e:2x4"
    found = all_reduces(_on_target(programs.worst_loss_adamw, target))
    outside = [shape for shape, depth in found if not depth]
    assert outside and any(depth for _, depth in found), found

    built = programs.worst_loss_adamw(JaxMesh(np.array(jax.devices()[:8]), ("data",)))
    inspection = inspect_on(target, built.fn, built.args, {})
    (plan,) = inspection.targets
    rows = [row for row in _table_rows(placements_table([("train_step", plan)], "program")) if row[0] == "train_step"]
    header = ["program", "collective", "value", "loops", "runs/call", "verdict"]
    loops, verdict = header.index("loops"), header.index("verdict")
    assert len([r for r in rows if r[loops] == "-"]) == len(outside), rows
    for row in rows:
        assert (row[verdict] == "-") == (row[loops] == "-"), row

    cpu = _cpu_rows(collectives_table(inspection.paired))  # the CPU's convention, the same rule
    for row in cpu:
        assert (row[-1] == "-") == (row[3] == "-"), row


# --- item 8: the fix on a target fixes what stays there; the shard_map route is whole ----------

def _spec_words(arg) -> str:
    """``P(None, 'data')``: the one spec of an argument's leaves, as a user writes it."""
    specs = {tuple(leaf.sharding.spec) for leaf in jax.tree.leaves(arg)}
    (spec,) = specs
    return "P(" + ", ".join("None" if e is None else repr(e) for e in spec) + ")"


@needs_libtpu
def test_the_loss_the_tpu_keeps_in_the_loop_gets_its_own_fix_there(tmp_path, shardscope_cli):
    """The TPU moves the gradients' sum out of the loop and keeps the loss's (one scalar
    all-reduce in a while body, counted here): check prints the target's fix for that sum, the
    loss accumulated per device and summed once, with no cast of the parameters in it."""
    import math

    from test_target_verdicts import _elements, _program_file
    from _tpu_text import collectives
    from test_target_verdicts import _ALL_REDUCE

    target = "tpu:v5e:2x4"
    in_loops = [shape for shape, depth in collectives(_on_target(programs.total_loss_adamw, target), _ALL_REDUCE) if depth]
    assert [_elements(shape) for shape in in_loops] == [1]
    built = programs.total_loss_adamw(JaxMesh(np.array(jax.devices()[:8]), ("data",)))
    specs = "(" + ", ".join(_spec_words(a) for a in built.args) + ")"
    devices = math.prod(built.args[2].sharding.mesh.shape.values())

    path = _program_file(tmp_path, "total_loss_adamw", 8)
    words = " ".join(shardscope_cli("check", path, "--target", target).stdout.split())
    fix = words.split(f"train_step: fix on v5e:2x4 for its all-reduce of out[2]: ", 1)[1].split(" train_step: ")[0]
    assert "pcast" not in fix and "reduced={'data'})), params)" not in fix
    assert "add each iteration's out[2] into an accumulator started unreduced" in fix
    assert f"in_specs={specs}" in fix
    assert f"where each device adds its own out[2] into the accumulator and lax.psum(acc, 'data') / {devices} runs once" in fix


def test_the_shard_map_route_has_one_spec_per_argument_and_sums_the_loss():
    """jit + shardings, a loss summed over 4 micro-batches beside the gradients: on the CPU one
    combined all-reduce carries both. The fix's shard_map has one in_spec per argument of
    ``train_step`` (its signature, read here, and each argument's own sharding) and says that the
    loss, then each device's own, needs its psum over ``data`` and the division by its 8 devices."""
    import inspect as python_inspect
    import math

    import shardscope

    built = programs.total_loss_adamw(JaxMesh(np.array(jax.devices()[:8]), ("data",)))
    assert len(python_inspect.signature(built.fn).parameters) == len(built.args) == 4
    specs = "(" + ", ".join(_spec_words(a) for a in built.args) + ")"
    devices = math.prod(built.args[2].sharding.mesh.shape.values())
    inspection = shardscope.inspect(built.fn, *built.args)
    (c,) = [c for c in inspection.paired if c.in_loop]
    fix = " ".join(c.verdict.fix.split())
    assert f"jax.shard_map(step, mesh=mesh, in_specs={specs}, out_specs=P()" in fix
    assert "lax.pcast(params, 'data', to='varying')" in fix
    assert f"each device's out[2] covers its own shard of the batch only: return lax.psum(it, 'data') / {devices}" in fix
