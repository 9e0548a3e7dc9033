"""What a step of dispatches calls its values, lines and fixes: an eager ``jnp.mean`` of each
call's per-example losses between 3 jitted calls that all-gather an FSDP weight (the mean is a
``reduce_sum``, which all-reduces the losses over the batch's devices, then a division by the
count: a sum across the calls still, whose one reduction after the loop would do).

The counts expected are the test's own: each module compiled alone here (the callee on the
weight's and batch's shardings; the eager sum on the losses' sharding, as JAX dispatches it),
its collectives counted in the compiled text. Lines are found in this file's text by a mark.
"""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _support import DEMOS
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope
from test_targets import needs_libtpu

CALLS = 3
mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
W = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))  # FSDP: rows split
XS = [jax.ShapeDtypeStruct((32, 64), jnp.float32, sharding=NamedSharding(mesh, P("data", None))) for _ in range(CALLS)]


@jax.jit
def per_example_loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2, axis=1)


def step(w, xs):
    total = 0.0
    for x in xs:
        losses = per_example_loss(w, x)
        total = total + jnp.mean(losses)  # THE EAGER MEAN
    return total


def _line(mark: str) -> int:
    (line,) = [n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith(mark)]
    return line


def _count(text: str, kind: str) -> int:
    return len(re.findall(rf" {kind}(?:-start)?\(", text))


def test_an_eager_mean_between_three_calls_is_named_at_the_users_line_with_a_fix_that_applies():
    callee = per_example_loss.lower(W, XS[0]).compile()
    gathers = _count(callee.as_text(), "all-gather")
    losses = jax.tree.leaves(callee.output_shardings)[0]
    # the mean's first eager step, as the step dispatches it: a reduce_sum of the losses
    summed = jax.jit(jnp.sum).lower(jax.ShapeDtypeStruct((32,), jnp.float32, sharding=losses)).compile().as_text()
    reduces = _count(summed, "all-reduce")
    assert (gathers, reduces) == (1, 1)  # the weight gathered in each call; each eager mean all-reduces the losses

    inspection = shardscope.inspect(step, W, XS)
    by_dispatch = {f.dispatch: f for f in inspection.dispatches.findings}
    eager = by_dispatch["reduce_sum"]
    assert (eager.executions, eager.summed, eager.avoidable) == (reduces * CALLS, CALLS, reduces * (CALLS - 1))
    assert f"{CALLS} calls" in eager.reason and f"{CALLS - 1} of its {CALLS} runs" in eager.reason
    where = f"test_dispatch_words.py:{_line('# THE EAGER MEAN')} (step)"
    assert eager.collective.source == where and f"made at {where}" in eager.reason
    assert "shard_map" not in eager.fix and "once after the loop" in eager.fix

    gather = by_dispatch["per_example_loss"]
    assert (gather.kind, gather.executions, gather.verdict_kind) == ("all-gather", gathers * CALLS, "needed")
    assert gather.collective.value == "w"
    assert "on its own, not only their sum" not in gather.reason and "brings w to each call" in gather.reason


@needs_libtpu
def test_a_step_of_dispatches_checked_on_a_target_suggests_no_target(shardscope_cli):
    given = "tpu:v5e:2x4"  # 8 chips: this process's 8 devices
    result = shardscope_cli("check", DEMOS / "dispatch_step.py", "--function", "step", "--target", given)
    assert result.returncode == 1, result.stderr
    text = " ".join(result.stdout.split())
    assert f"not compiled for {given}" in text and "--target" not in text


READS_A_VALUE = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
W = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P()))
XS = [jax.ShapeDtypeStruct((32, 64), jnp.float32, sharding=NamedSharding(mesh, P("data", None))) for _ in range(3)]


@jax.jit
def loss_fn(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)


@shardscope.program(args=(W, XS))
def step(w, xs):
    total = 0.0
    for x in xs:
        loss = loss_fn(w, x)
        if loss > 0:  # THE READ
            total = total + loss
    return total
'''


def test_a_value_read_in_a_step_is_a_github_annotation_at_its_line(shardscope_cli, tmp_path):
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "reads.py"
    path.write_text(READS_A_VALUE)
    (line,) = [n for n, text in enumerate(READS_A_VALUE.splitlines(), 1) if text.endswith("# THE READ")]
    result = shardscope_cli("check", "src/reads.py", "--format", "github", cwd=tmp_path)
    assert result.returncode == 2
    (command,) = [text for text in result.stdout.splitlines() if text.startswith("::error")]
    assert command.startswith(f"::error file=src/reads.py,line={line},title=")
    assert str(tmp_path) not in result.stdout + result.stderr and f"reads.py:{line}" in command
