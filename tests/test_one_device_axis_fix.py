"""A jit step on a data=8 x model=1 mesh: ``model`` splits nothing, so the shard_map fix is the
plain one over every axis (no ``axis_names`` left to the partitioner, no partial-auto words),
in the check's fix text and in the what-if's verified snippet alike."""

from __future__ import annotations

import textwrap

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import _what_if_programs as wp
from shardscope.sources.loading import import_file
from shardscope.whatif.what_if import VERIFIED, rewrites_of, subject_of

STEP = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh

mesh = Mesh(np.array(jax.devices()[:8]).reshape(8, 1), ("data", "model"))


def loss(params, x, y):
    h = jnp.tanh(x @ params["W1"] + params["b"])
    return jnp.mean((h @ params["W2"] - y) ** 2)


@jax.jit
def step(params, xs, ys):
    def body(acc, xy):
        l, g = jax.value_and_grad(loss)(params, *xy)
        return (acc[0] + l, jax.tree.map(jnp.add, acc[1], g)), None

    acc, _ = lax.scan(body, (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)), (xs, ys))
    return acc
'''


def _subject(tmp_path):
    path = tmp_path / "one_device_axis_step.py"
    path.write_text(textwrap.dedent(STEP))
    module = import_file(path)[0]
    rng = np.random.default_rng(7)

    def placed(shape, spec):
        return jax.device_put((rng.normal(size=shape) * 0.3).astype(np.float32), NamedSharding(module.mesh, spec))

    params = {"W1": placed((16, 32), P(None, "model")), "b": placed((32,), P("model")),
              "W2": placed((32, 8), P("model", None))}
    args = (params, placed((wp.MICRO, 32, 16), P(None, "data")), placed((wp.MICRO, 32, 8), P(None, "data")))
    return subject_of(module.step, args)


def test_a_one_device_axis_takes_the_full_manual_route(tmp_path):
    subject = _subject(tmp_path)
    (finding,) = [c for c in subject.plan.collectives if c.verdict.kind == "deferrable"]
    assert "stays with the partitioner" not in finding.verdict.fix
    assert "Either use Explicit axes" in finding.verdict.fix  # the one-axis fix's two routes
    assert "in_specs=(P(), P(None, 'data'), P(None, 'data')), out_specs=P(), axis_names={'data'})" in finding.verdict.fix
    rewrite = next(r for r in rewrites_of(subject) if r.status == VERIFIED and r.route == "shard_map")
    assert "axis_names" not in rewrite.patch.text and "stays with the partitioner" not in rewrite.patch.text
    decorator = next(line for line in rewrite.patch.text.splitlines() if line.startswith("@jax.shard_map("))
    # the parameters' specs name 'model' alone, of one device: P() inside, as the verified program reads them
    assert decorator == "@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, 'data'), P(None, 'data')), out_specs=P())"
