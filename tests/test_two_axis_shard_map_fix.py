"""The shard_map fix of a jit step on a data x model mesh, as the user pastes it.

Parameters sharded over ``model``, the batch over ``data``, the gradients accumulated in a scan:
the partitioner sums them over ``data`` every iteration. The fix through ``jax.shard_map`` runs
the step per device over ``data`` only (``axis_names={'data'}``), so its ``in_specs`` may name
no other axis: ``model`` stays with the partitioner, which still writes the tensor-parallel sums.
Both the check's fix text and the what-if snippet are put into the step as written, traced,
compiled, their collectives counted from the compiled text, and their outputs compared with
the original's.
"""

from __future__ import annotations

import re
import textwrap

import jax
import numpy as np

import _what_if_programs as wp
from shardscope.engine.hlo.fixes import argument_specs_text
from shardscope.sources.loading import import_file
from shardscope.whatif.what_if import VERIFIED, rewrites_of, subject_of

STEP = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))


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

PER_DEVICE = '''

def local_step(params, xs, ys):
    {cast}

    def body(acc, xy):
        l, g = jax.value_and_grad(loss)(local_params, *xy)
        return (acc[0] + l, jax.tree.map(jnp.add, acc[1], g)), None

    acc0 = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
    {start}
    acc, _ = lax.scan(body, acc0, (xs, ys))
    {finish}
    return acc


{wrapped}
'''
"""STEP's body per device, with the fix's lines where the fix says: ``{wrapped}`` defines
``fixed``, the per-device step inside the fix's ``jax.shard_map``."""

CAST = "local_params = jax.tree.map(lambda p: lax.pcast(p, 'data', to='varying'), params)"
START = "acc0 = jax.tree.map(lambda a: lax.pcast(a, 'data', to='varying'), acc0)"
FINISH = "acc = jax.tree.map(lambda a: lax.psum(a, 'data') / 4, acc)"


def _subject(tmp_path, step: str = STEP):
    """``step`` (STEP, or it on another mesh) imported as a user's file, the arguments placed on
    its mesh, and shardscope's subject of it."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    path = tmp_path / "two_axis_step.py"
    path.write_text(textwrap.dedent(step))
    module = import_file(path)[0]
    rng = np.random.default_rng(7)

    def placed(shape, spec):
        return jax.device_put((rng.normal(size=shape) * 0.3).astype(np.float32), NamedSharding(module.mesh, spec))

    params = {"W1": placed((16, 32), P(None, "model")), "b": placed((32,), P("model")),
              "W2": placed((32, 8), P("model", None))}
    args = (params, placed((wp.MICRO, 32, 16), P(None, "data")), placed((wp.MICRO, 32, 8), P(None, "data")))
    return module, args, subject_of(module.step, args)


def _applied(tmp_path, name: str, wrapped: str, cast: str = CAST, start: str = START, finish: str = FINISH):
    """STEP with its per-device body inside the fix's shard_map, imported as the user's file is."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(STEP) + PER_DEVICE.format(cast=cast, start=start, finish=finish, wrapped=wrapped))
    return import_file(path)[0]


def test_the_fix_text_on_a_two_axis_mesh_names_only_the_manual_axis_and_traces(tmp_path):
    """The fix's ``jax.shard_map(step, ...)`` call, pasted around the step per device, traces:
    its in_specs are P() for the model-sharded parameters (their own specs named ``model``, which
    JAX refuses in a shard_map over ``data`` alone). Compiled, the gradients' all-reduce leaves
    the loop: one run after it; the tensor-parallel sum over ``model`` the loop reads stays, as
    in the original; the outputs are the original's."""
    module, args, subject = _subject(tmp_path)
    (finding,) = [c for c in subject.plan.collectives if c.verdict.kind == "deferrable"]
    call = re.search(r"jax\.shard_map\(step, mesh=mesh, in_specs=.*?, axis_names=\{'data'\}\)", finding.verdict.fix)
    assert call is not None, finding.verdict.fix
    assert "in_specs=(P(), P(None, 'data'), P(None, 'data'))" in call.group()
    assert "'model' stays with the partitioner" in finding.verdict.fix
    assert "Either" not in finding.verdict.fix  # Explicit axes are not offered as a drop-in change here
    # each device's jnp.mean is over its own 8 of the 32 rows: the gradients' sum over 'data' is 4x the
    # batch's, so the fix divides it (FINISH, pasted below, is what the text says)
    assert "lax.psum(acc, 'data') / 4 after it" in finding.verdict.fix
    fixed = _applied(tmp_path, "fix_text", "fixed = jax.jit(" + call.group().replace("(step,", "(local_step,", 1) + ")")
    compiled = fixed.fixed.trace(*args).lower().compile()
    before, after = wp.recount(subject.compiled.as_text()), wp.recount(compiled.as_text())
    assert before["in_loop"] == {"all-reduce": 2} and before["runs"] == {"all-reduce": 2 * wp.MICRO}
    assert after["in_loop"] == {"all-reduce": 1} and after["runs"] == {"all-reduce": wp.MICRO + 1}
    wp.assert_same(wp.outputs(module.step, args), compiled(*args))


def test_the_what_if_snippet_on_a_two_axis_mesh_is_the_program_verified(tmp_path):
    """The snippet's shard_map is the partial-auto one shardscope verified (``axis_names``, specs
    naming ``data`` only; it once wrote the arguments' whole specs and no ``axis_names``: a carry
    typed {V:data} against {V:(data,model)}, and no sum over ``model``). Its lines, put into the
    step where its comments say, compile to the verified rewrite's collectives, with the
    original's outputs."""
    module, args, subject = _subject(tmp_path)
    rewrite = next(r for r in rewrites_of(subject) if r.status == VERIFIED)
    assert rewrite.route == "shard_map" and not rewrite.patch.is_diff
    lines = {line.strip().split(" = ", 1)[0]: line.strip().split("  #", 1)[0]
             for line in rewrite.patch.text.splitlines() if not line.strip().startswith("#")}
    decorator = lines["@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, 'data'), P(None, 'data')), out_specs=P(), "
                      "axis_names={'data'})"]
    assert (lines["local_params"], lines["acc0"], lines["acc"]) == (CAST, START, FINISH)
    fixed = _applied(tmp_path, "snippet", f"fixed = jax.jit({decorator.removeprefix('@')}(local_step))",
                     lines["local_params"], lines["acc0"], lines["acc"])
    compiled = fixed.fixed.trace(*args).lower().compile()
    counts = wp.recount(compiled.as_text())
    assert counts["in_loop"] == {"all-reduce": 1} and counts["runs"] == {"all-reduce": wp.MICRO + 1}
    verified = wp.recount(rewrite.program.compiled.as_text())
    assert (counts["runs"], counts["in_loop"]) == (verified["runs"], verified["in_loop"])
    wp.assert_same(wp.outputs(module.step, args), compiled(*args))


def test_in_specs_of_leaves_sharded_differently_keep_only_the_manual_axes():
    """Leaves whose specs still differ once the other axes are dropped get the code that drops
    them; evaluated on the arguments it gives each leaf's spec over ``data`` alone."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    tree = {"a": jax.device_put(np.zeros((8, 4), np.float32), NamedSharding(mesh, P(("data", "model"), None))),
            "b": jax.device_put(np.zeros((8, 4), np.float32), NamedSharding(mesh, P(None, "model")))}
    ((_, code),) = argument_specs_text((("tree", ("P(('data', 'model'))", "P(None, 'model')")),), ("data",))
    got = eval(code, {"jax": jax, "P": P, "tree": tree})
    assert got == {"a": P(("data",), None), "b": P(None, None)}
    assert argument_specs_text((("tree", ("P(None, 'data')", "P('data')")),), ("data",))[0][1] == (
        "jax.tree.map(lambda a: a.sharding.spec, tree)")
