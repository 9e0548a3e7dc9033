"""The specs a jit step's shard_map fix passes as ``in_specs`` are the arguments' own, as JAX
gives them, where the ``shard_map`` is over every axis they name: only a partial-auto one (other
axes left to the partitioner) rewrites them to name its manual axes alone."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardscope.engine.hlo.fixes import Signature, deferral_fix
from shardscope.whatif.what_if import subject_of

MICRO = 4


def _loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["W"]) - y) ** 2)


@jax.jit
def _step(params, xs, ys):
    def body(acc, xy):
        return jax.tree.map(jnp.add, acc, jax.grad(_loss)(params, *xy)), None

    acc, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    return acc


def test_a_one_axis_step_keeps_its_arguments_specs_as_jax_gives_them():
    """The batches placed ``P(None, 'data', None)`` are passed so in the fix's ``in_specs`` (a
    re-rendering dropped the trailing None)."""
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    rng = np.random.default_rng(0)

    def placed(shape, spec):
        return jax.device_put(rng.normal(size=shape).astype(np.float32), NamedSharding(mesh, spec))

    args = ({"W": placed((16, 4), P())}, placed((MICRO, 64, 16), P(None, "data", None)),
            placed((MICRO, 64, 4), P(None, "data", None)))
    (finding,) = [c for c in subject_of(_step, args).plan.collectives if c.verdict.kind == "deferrable"]
    call = re.search(r"jax\.shard_map\(step, mesh=mesh, in_specs=(.*?), out_specs", finding.verdict.fix)
    assert call is not None, finding.verdict.fix
    assert call.group(1) == "(P(), P(None, 'data', None), P(None, 'data', None))"


def test_a_full_manual_fix_keeps_a_tuple_entry_and_its_trailing_none():
    """Summed over both axes of the specs, nothing is left to the partitioner: the batch's spec is
    the argument's own text; the parameters, split over the axes the sum runs over, enter whole
    (``P()``): inside the shard_map the step's code needs each weight whole (a row slice of
    ``W`` fails ``x @ W``)."""
    signature = Signature((("params", ("P(('data', 'model'), None)",)), ("xs", ("P(None, ('data', 'model'))",))), 8)
    fix = deferral_fix("auto", "params['W']", ("data", "model"), 1, "4", "1", signature)
    assert "in_specs=(P(), P(None, ('data', 'model')))" in fix, fix
    assert "replicated over them" in fix, fix
