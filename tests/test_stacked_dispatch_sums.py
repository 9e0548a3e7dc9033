"""An eager reduction between dispatches whose results the step stacks and averages.

Three micro-batches, each ``losses.append(jnp.mean(per_example))``, then
``jnp.stack(losses).mean()``: the eager ``jnp.mean`` of a batch sharded over ``data`` is its own
module with its own all-reduce, 3 runs per step; the stack's mean adds their results up, so the
sums can run once on the stacked partial sums: 2 of the 3 runs need not happen. The count of
all-reduces comes from the eager module compiled here, and the deferral is checked numerically.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO = 3

PROGRAM = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import shardscope

mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
W = jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=NamedSharding(mesh, P()))
XS = [jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=NamedSharding(mesh, P("data"))) for _ in range(3)]


@jax.jit
def per_example_loss(w, x):
    return jnp.mean((x @ w) ** 2, axis=-1)


@shardscope.program(args=(W, XS))
def evaluate(w, xs):
    losses = []
    for x in xs:
        per_example = per_example_loss(w, x)
        losses.append(jnp.mean(per_example))
    return jnp.stack(losses).mean()
'''


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:4]), ("data",))


def test_the_eager_mean_runs_one_all_reduce_per_micro_batch_and_deferring_them_keeps_the_mean():
    mesh = _mesh()
    per_example = jax.device_put(np.arange(16, dtype=np.float32), NamedSharding(mesh, P("data")))
    text = jax.jit(jnp.mean).lower(per_example).compile().as_text()
    assert len(re.findall(r" all-reduce(?:-start)?\(", text)) == 1  # each eager mean: one all-reduce
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=16).astype(np.float32) for _ in range(MICRO)]
    inside = np.stack([b.mean() for b in batches]).mean()
    # each device's partial sums of its 4 examples, stacked across the calls, reduced once
    partial = np.stack([b.reshape(4, 4).sum(axis=1) for b in batches])  # [calls, devices]
    np.testing.assert_allclose(partial.sum(axis=1).sum() / (16 * MICRO), inside, rtol=1e-6)


def test_check_counts_three_calls_and_two_avoidable_runs(tmp_path, shardscope_cli):
    path = tmp_path / "eval_losses.py"
    path.write_text(PROGRAM)
    result = shardscope_cli("check", path, "--devices", "4")
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "results of 3 calls" in out and "2 of its 3 runs per step" in out


def test_the_inspection_flags_the_stacked_sums_across_the_calls():
    mesh = _mesh()
    w = jax.device_put(np.eye(8, dtype=np.float32), NamedSharding(mesh, P()))
    xs = [jax.device_put(np.ones((16, 8), np.float32), NamedSharding(mesh, P("data"))) for _ in range(MICRO)]

    @jax.jit
    def per_example_loss(w, x):
        return jnp.mean((x @ w) ** 2, axis=-1)

    def evaluate(w, xs):
        losses = []
        for x in xs:
            losses.append(jnp.mean(per_example_loss(w, x)))
        return jnp.stack(losses).mean()

    inspection = shardscope.inspect(evaluate, w, xs)
    flagged = inspection.dispatches.flagged
    assert [f.summed for f in flagged] == [MICRO] and sum(f.saved_calls for f in flagged) == MICRO - 1
