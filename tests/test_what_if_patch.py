"""The what-if's change as code: a unified diff of the user's file that, applied, gives the
program the rewrite checked; a snippet where the code has another shape.

Each program is a file written here the way users write them; the patched file is imported and
compiled, and its collectives recounted from its own compiled text.
"""

from __future__ import annotations

import textwrap

import jax
import numpy as np
import pytest

import _what_if_programs as wp
from shardscope.whatif.what_if import DEFER, HOIST, VERIFIED, rewrites_of, subject_of
from shardscope.sources.loading import import_file

EXPLICIT_STEP = '''
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, PartitionSpec as P

mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:8])


def loss(params, x, y):
    return jnp.mean((jnp.tanh(x @ params["W"]) @ params["V"] - y) ** 2)


@jax.jit
def step(params, xs, ys):
    def body(acc, xy):
        grads = jax.grad(loss)(params, *xy)
        return jax.tree.map(jnp.add, acc, grads), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    grads, _ = lax.scan(body, zeros, (xs, ys))
    return grads
'''

GATHER_STEP = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]), ("data",))


@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P("data"), P(None, "data")), out_specs=P("data"))
def step(w_shard, xs):
    def body(carry, x):
        i, acc = carry
        y = lax.cond(i % 2 == 0, lambda: x @ lax.all_gather(w_shard, "data", tiled=True),
                     lambda: x @ jnp.tile(w_shard, (4, 1)))
        return (i + 1, acc + jnp.tanh(y)), None

    acc0 = lax.pcast(jnp.zeros((xs.shape[1], 8), jnp.float32), "data", to="varying")
    return lax.scan(body, (0, acc0), xs)[0][1]
'''

FORI_STEP = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]), ("data",))


def loss(W, x, y):
    return jnp.mean((jnp.tanh(x @ W) - y) ** 2) / 4


@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data"), P()), out_specs=P())
def step(W, xs, ys, n):
    def body(i, acc):
        return acc + jax.grad(loss)(W, xs[i], ys[i])

    return lax.fori_loop(0, n[0], body, jnp.zeros_like(W))
'''

PARTIAL_BODY_STEP = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]), ("data",))


def loss(W, x, y):
    return jnp.mean((jnp.tanh(x @ W) - y) ** 2) / 4


def micro_batch(W, acc, batch):
    return acc + jax.grad(loss)(W, *batch), None


@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P())
def step(W, xs, ys):
    grads, _ = lax.scan(functools.partial(micro_batch, W), jnp.zeros_like(W), (xs, ys))
    return grads
'''


def _module(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return import_file(path)[0]


def _patched(tmp_path, name: str, rewrite):
    patch = rewrite.patch
    assert patch is not None and patch.is_diff, patch and patch.notes
    return _module(tmp_path, f"{name}_patched", patch.patched)


def _placed(mesh, shapes_and_specs, seed: int):
    from jax.sharding import NamedSharding

    rng = np.random.default_rng(seed)
    return tuple(jax.tree.map(lambda s: jax.device_put((rng.normal(size=s) * 0.3).astype(np.float32),
                                                       NamedSharding(mesh, spec)), shapes, is_leaf=lambda x: isinstance(x, tuple))
                 for shapes, spec in shapes_and_specs)


def test_the_explicit_axes_patch_applied_gives_the_rewritten_program(tmp_path):
    from jax.sharding import PartitionSpec as P

    module = _module(tmp_path, "explicit_step", EXPLICIT_STEP)
    with jax.set_mesh(module.mesh):
        args = _placed(module.mesh, [({"W": (8, 16), "V": (16, 4)}, P()), ((wp.MICRO, 32, 8), P(None, "data")),
                                     ((wp.MICRO, 32, 4), P(None, "data"))], seed=0)
        subject = subject_of(module.step, args)
        (rewrite,) = rewrites_of(subject)
        assert rewrite.status == VERIFIED and rewrite.route == "explicit"
        text = rewrite.patch.text
        assert "params_reduced = jax.tree.map(lambda p: jax.reshard(p, P(reduced={'data'})), params)" in text
        assert "grads = jax.tree.map(lambda a: jax.reshard(a, P()), grads)" in text
        patched = _patched(tmp_path, "explicit_step", rewrite)
        compiled = patched.step.trace(*args).lower().compile()
        counts = wp.recount(compiled.as_text())
        assert counts == wp.recount(rewrite.program.compiled.as_text())
        assert counts["in_loop"] == {} and counts["runs"] == {"all-reduce": 1}
        outputs = jax.tree.map(np.asarray, compiled(*args))
    wp.assert_same(jax.tree.map(np.asarray, rewrite.program.run(*subject.run_arguments)), outputs, rtol=1e-6)
    wp.assert_same(wp.outputs(module.step, args), outputs)


def test_the_hoist_patch_moves_the_gather_out_of_the_branch(tmp_path):
    from jax.sharding import PartitionSpec as P

    module = _module(tmp_path, "gather_step", GATHER_STEP)
    args = _placed(module.mesh, [((8, 8), P("data")), ((wp.MICRO, 16, 8), P(None, "data"))], seed=1)
    subject = subject_of(module.step, args)
    (rewrite,) = rewrites_of(subject)
    assert rewrite.kind == HOIST and rewrite.status == VERIFIED
    added = [line[1:].strip() for line in rewrite.patch.text.splitlines() if line.startswith("+ ")]
    assert 'w_shard_gathered = lax.all_gather(w_shard, "data", tiled=True)' in added
    assert any("lambda: x @ w_shard_gathered" in line for line in added)
    patched = _patched(tmp_path, "gather_step", rewrite)
    compiled = patched.step.trace(*args).lower().compile()
    counts = wp.recount(compiled.as_text())
    assert counts["in_loop"] == {} and counts["runs"] == {"all-gather": 1}
    assert wp.recount(subject.compiled.as_text())["in_loop"] == {"all-gather": 1}
    wp.assert_same(wp.outputs(module.step, args), np.asarray(compiled(*args)), rtol=1e-6)


def test_a_fori_loop_with_a_bound_known_at_run_time_is_rewritten_and_patched(tmp_path):
    """The while loop's trip count is unknown: the runs per call cannot be compared, so the check
    is that the sum left the loop (recounted from the text: no all-reduce in the while body);
    the returned loop's result is summed where it is returned."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    module = _module(tmp_path, "fori_step", FORI_STEP)
    args = _placed(module.mesh, [((8, 4), P()), ((wp.MICRO, 32, 8), P(None, "data")),
                                 ((wp.MICRO, 32, 4), P(None, "data"))], seed=3)
    args += (jax.device_put(np.array([wp.MICRO], np.int32), NamedSharding(module.mesh, P())),)
    subject = subject_of(module.step, args)
    assert subject.plan.counts() == {"all-reduce": None}
    (rewrite,) = rewrites_of(subject)
    assert rewrite.status == VERIFIED and "trip count is unknown" in rewrite.reason
    assert wp.recount(subject.compiled.as_text())["in_loop"] == {"all-reduce": 1}
    assert wp.recount(rewrite.program.compiled.as_text())["in_loop"] == {}
    added = [line[1:].strip() for line in rewrite.patch.text.splitlines() if line.startswith("+ ")]
    assert ("return lax.psum(lax.fori_loop(0, n[0], body, lax.pcast(jnp.zeros_like(W), 'data', to='varying')), "
            "'data')") in added
    patched = _patched(tmp_path, "fori_step", rewrite)
    compiled = patched.step.trace(*args).lower().compile()
    assert wp.recount(compiled.as_text())["in_loop"] == {}
    wp.assert_same(wp.outputs(module.step, args), np.asarray(compiled(*args)))


def test_a_body_the_loop_is_given_by_partial_gets_a_snippet(tmp_path):
    """The weight reaches the body as an argument (functools.partial), not by closure: the
    rewrite is still checked, and the change is given as the lines to add, with the reason."""
    from jax.sharding import PartitionSpec as P

    module = _module(tmp_path, "partial_step", PARTIAL_BODY_STEP)
    args = _placed(module.mesh, [((8, 4), P()), ((wp.MICRO, 32, 8), P(None, "data")),
                                 ((wp.MICRO, 32, 4), P(None, "data"))], seed=2)
    (rewrite,) = rewrites_of(subject_of(module.step, args))
    assert rewrite.kind == DEFER and rewrite.status == VERIFIED
    assert not rewrite.patch.is_diff and rewrite.patch.patched is None
    assert "not a function defined next to it" in rewrite.patch.notes[0]
    assert "lax.pcast" in rewrite.patch.text and "lax.psum(acc, 'data')" in rewrite.patch.text


TENSOR_PARALLEL_STEP = '''
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, PartitionSpec as P

mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:8])


@jax.jit
def step(W, xs):
    def body(acc, xb):
        return acc + jax.grad(lambda W: jnp.sum(jnp.tanh(xb @ W)))({reads}), None

    acc, _ = lax.scan(body, jnp.zeros_like(W), xs)
    return acc
'''
"""A weight sharded over ``model`` whose gradient the loop sums over ``data``; ``{reads}``: the
weight the gradient is taken of (``W``: the loop's body is handed it, so the change is a snippet)."""

SNIPPET_APPLIED = '''
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, PartitionSpec as P

mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:8])


@jax.jit
def step(W, xs):
    {cast}

    def body(acc, xb):
        return acc + jax.grad(lambda W: jnp.sum(jnp.tanh(xb @ W)))(W_reduced), None

    acc0 = jnp.zeros_like(W)
    {start}
    acc, _ = lax.scan(body, acc0, xs)
    {finish}
    return acc
'''
"""TENSOR_PARALLEL_STEP with the snippet's three lines put where its comments say."""


def _hlo_counts(text: str) -> dict[str, object]:
    """Collectives counted from a compiled module's text alone: runs per call and in loops
    (:func:`_what_if_programs.recount`), and the bytes of each all-reduce's and all-gather's
    float32 result."""
    import re

    counts = wp.recount(text)
    shapes = re.findall(r"= f32\[([\d,]*)\]\S* all-(?:reduce|gather)(?:-start)?\(", text)
    sizes = sorted(4 * int(np.prod([int(d) for d in dims.split(",") if d])) for dims in shapes)
    return {"runs": counts["runs"], "in_loop": counts["in_loop"], "bytes": sizes}


def test_a_weight_sharded_over_another_axis_keeps_its_spec_in_the_snippet_and_the_check(tmp_path):
    """W is sharded P(None, 'model'); its gradient's all-reduce over ``data`` runs in the loop.
    The snippet reshards W to P(None, 'model', reduced=...) (``P(reduced=...)`` alone gathered W
    over ``model`` and summed the whole gradient: an all-gather of 1,024 B and an all-reduce of
    2,048 B per device); its lines, put into the program as written, compile to the plan the
    what-if verified: one all-reduce of W's 32 x 8 shard after the loop, no all-gather."""
    from jax.sharding import PartitionSpec as P

    module = _module(tmp_path, "tp_step", TENSOR_PARALLEL_STEP.replace("{reads}", "W"))
    with jax.set_mesh(module.mesh):
        args = _placed(module.mesh, [((32, 16), P(None, "model")), ((wp.MICRO, 64, 32), P(None, "data"))], seed=4)
        subject = subject_of(module.step, args)
        (finding,) = [c for c in subject.plan.collectives if c.verdict.kind == "deferrable"]
        assert ("w_r = jax.reshard(W, P(None, 'model', reduced={'data'}))" in finding.verdict.fix
                and "jax.reshard(acc, P(None, 'model')) after the loop" in finding.verdict.fix)
        (rewrite,) = rewrites_of(subject)
        assert rewrite.status == VERIFIED and rewrite.route == "explicit" and not rewrite.patch.is_diff
        lines = {line.split(" = ", 1)[0]: line.split("  #", 1)[0] for line in rewrite.patch.text.splitlines()
                 if not line.startswith("#")}
        assert lines == {"W_reduced": "W_reduced = jax.reshard(W, P(None, 'model', reduced={'data'}))",
                         "acc0": "acc0 = jax.tree.map(lambda a: jax.reshard(a, P(None, 'model', unreduced={'data'})), acc0)",
                         "acc": "acc = jax.tree.map(lambda a: jax.reshard(a, P(None, 'model')), acc)"}
        applied = _module(tmp_path, "tp_snippet", SNIPPET_APPLIED.replace("{cast}", lines["W_reduced"])
                          .replace("{start}", lines["acc0"]).replace("{finish}", lines["acc"]))
        compiled = applied.step.trace(*args).lower().compile()
        counts = _hlo_counts(compiled.as_text())
        assert _hlo_counts(subject.compiled.as_text()) == {"runs": {"all-reduce": wp.MICRO},
                                                          "in_loop": {"all-reduce": 1}, "bytes": [1024]}
        assert counts == {"runs": {"all-reduce": 1}, "in_loop": {}, "bytes": [1024]}
        assert counts == _hlo_counts(rewrite.program.compiled.as_text())  # the snippet is the program verified
        got = np.asarray(compiled(*args))
    wp.assert_same(wp.outputs(module.step, args), got)


def test_the_patch_of_a_weight_sharded_over_another_axis_keeps_its_spec(tmp_path):
    """The same step with the body reading W by closure: the diff reshards W to
    P(None, 'model', reduced=...) and the loop's result back to P(None, 'model') (``*spec`` of
    an unreduced spec raises in JAX: the patch once wrote it); applied, it compiles to the
    verified plan."""
    from jax.sharding import PartitionSpec as P

    module = _module(tmp_path, "tp_closure", TENSOR_PARALLEL_STEP.replace("{reads}", "W").replace("lambda W:", "lambda w:")
                     .replace("xb @ W", "xb @ w"))
    with jax.set_mesh(module.mesh):
        args = _placed(module.mesh, [((32, 16), P(None, "model")), ((wp.MICRO, 64, 32), P(None, "data"))], seed=5)
        subject = subject_of(module.step, args)
        (rewrite,) = rewrites_of(subject)
        assert rewrite.status == VERIFIED
        added = [line[1:].strip() for line in rewrite.patch.text.splitlines() if line.startswith("+ ")]
        assert "W_reduced = jax.reshard(W, P(None, 'model', reduced={'data'}))" in added
        assert "acc = jax.reshard(acc, P(None, 'model'))" in added
        compiled = _patched(tmp_path, "tp_closure", rewrite).step.trace(*args).lower().compile()
        counts = _hlo_counts(compiled.as_text())
        assert counts == {"runs": {"all-reduce": 1}, "in_loop": {}, "bytes": [1024]}
        assert counts == _hlo_counts(rewrite.program.compiled.as_text())
        got = np.asarray(compiled(*args))
    wp.assert_same(wp.outputs(module.step, args), got)


@pytest.mark.parametrize(("spec", "written"), [
    ("P()", "P(unreduced={'data'})"),
    ("P(None, 'model')", "P(None, 'model', unreduced={'data'})"),
    ("P('data', None)", "P(unreduced={'data'})"),  # whole along the summed axis once reduced
    ("P(('data', 'model'),)", "P('model', unreduced={'data'})"),
    ("P(None, ('model', 'data'))", "P(None, 'model', unreduced={'data'})"),
    # no plain spec's text (jax 0.12 prints an unconstrained dimension as P(...)): the leaf's own, in code
    ("P(...)", "P(*jax.typeof(a).sharding.spec.partitions, unreduced={'data'})"),
    ("P(UNCONSTRAINED)", "P(*jax.typeof(a).sharding.spec.partitions, unreduced={'data'})"),
    ("P(1, 2)", "P(*jax.typeof(a).sharding.spec.partitions, unreduced={'data'})"),
    ("", "P(*jax.typeof(a).sharding.spec.partitions, unreduced={'data'})"),
])
def test_the_spec_a_fix_reshards_to_keeps_the_other_axes_and_never_fails_on_odd_text(spec, written):
    from shardscope.engine.hlo.fixes import resharded

    assert resharded(spec, "a", ("data",), "unreduced") == written
