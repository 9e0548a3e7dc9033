"""A few of the verdict corpus's programs through ``shardscope check``, compiled here: the rows,
the summary and the exit status agree with what the compiled modules say.

What each module runs in its loops is counted here from the module JAX compiles for the same
program (``_tpu_text.loop_collectives``), never from shardscope's output; the stored corpus
(``test_verdict_corpus``) judges every program on every compiler, these only what the command
line adds: pairing the jaxpr's sums with the instructions that carry them, the rows, the exit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from _tpu_text import loop_collectives
from test_targets import needs_libtpu

ROOT = Path(__file__).parent.parent
CORPUS = Path(__file__).parent / "verdict_corpus"

pytestmark = pytest.mark.slow


@needs_libtpu
def test_the_train_step_demo_on_the_tpu_is_one_row_outside_loops_and_nothing_flagged(shardscope_cli):
    """XLA:TPU moves the merged all-reduce of both gradients out of the micro-batch loop (jax
    0.10.2 names it after the loop it left): one compiled instruction carries both of the
    jaxpr's psum_invariants, so the table has one row, no loop runs it, and nothing fails."""
    result = shardscope_cli("check", ROOT / "demos" / "train_step.py", "--function", "step", "--target", "tpu:v5e:2x4",
                            "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    on_tpu = program["targets"]["tpu:v5e:2x4"]
    (row,) = on_tpu["compiled_collectives"]
    assert row["loop_trip_counts"] == [] and row["executions"] == 1 and len(row["equations"]) == 2
    assert not on_tpu["staying_findings"]
    text = shardscope_cli("check", ROOT / "demos" / "train_step.py", "--function", "step", "--target", "tpu:v5e:2x4")
    tpu_part = text.stdout.split("on the CPU:")[0]
    rows = [line for line in tpu_part.splitlines() if re.match(r"\s+\d+\s+(all-reduce|psum)", line)]
    assert len(rows) == 1 and "0 inside loops" in " ".join(tpu_part.split())
    assert "none runs in a loop without needing to" in " ".join(tpu_part.split())
    assert "no compiled instruction was found" not in text.stdout


def test_an_sgd_step_merged_with_a_metric_is_needed_and_check_passes(shardscope_cli):
    """The SGD loops: every compiled sum in a loop carries the gradient the next step reads
    (counted in the module compiled here), so nothing is flagged, whatever the jaxpr says of the
    loss beside it; the exit status is 0 and every row says needed."""
    from shardscope.targets.host import ensure_devices

    ensure_devices(8)
    import jax

    from shardscope.sources.loading import import_file, marked_functions

    module, _ = import_file(CORPUS / "sgd_loop.py")
    programs, _ = marked_functions(module, CORPUS / "sgd_loop.py")
    program = programs["sgd_shard_map"]
    text = jax.jit(program.fn).trace(*program.spec.args).lower().compile().as_text()
    found = loop_collectives(text)
    assert found and all(("f32", 256) in values for _, _, _, values in found)  # the gradient, in every one

    result = shardscope_cli("check", CORPUS / "sgd_loop.py", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    for checked in report["programs"]:
        assert checked["flagged"] == 0
        assert {c["verdict"] for c in checked["compiled_collectives"] if c["loop_trip_counts"]} == {"needed"}


def test_t5x_s_cond_merge_is_deferrable_and_fails_check_with_its_rows_and_summary(shardscope_cli):
    """T5X's microbatched trainer under jit: the merged all-reduce of the gradients and the
    loss (merged through ``lax.cond(i == 0, m, prev + m)``) is deferrable on the CPU; the row,
    the summary's count and the exit status say so together."""
    result = shardscope_cli("check", CORPUS / "t5x_microbatches.py", "--function", "t5x_jit")
    assert result.returncode == 1, result.stdout + result.stderr
    words = " ".join(result.stdout.split())
    assert "1 collective runs in a loop without needing to" in words
    rows = [line for line in result.stdout.splitlines() if re.match(r"\s+\d+\s+all-reduce", line)]
    assert len(rows) == 1 and rows[0].rstrip().endswith("deferrable")
