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
