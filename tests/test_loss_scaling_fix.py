"""The shard_map fix of a loss a jit loop accumulates divides its one sum after the loop only
when the program divides the loss by the rows it covers (a ``jnp.mean``): each device's mean is
then over its own rows, and the sum of the ``DATA`` devices' means is ``DATA`` times the batch's.
A ``jnp.sum`` over rows is the batch's once summed over the devices: dividing it gives a quarter
of the original (the defect a user found). A loss scaled by a factor that is no row count is
not divided, and the fix says when it would be.

Each fix's sum after the loop is put into the step per device, run on the 8 CPU devices, and
compared with the original with numpy; the divisor expected is ``DATA``, the size of the axis the
rows are split over, as the program below writes it.
"""

from __future__ import annotations

import re
import textwrap

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from shardscope.sources.loading import import_file
from shardscope.whatif.what_if import rewrites_of, subject_of

DATA, MODEL = 4, 2
STEPS, ROWS, COLS = 5, 64, 32

STEP = f'''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:8]).reshape({DATA}, {MODEL}), ("data", "model"))


def loss(y):
    return LOSS


@jax.jit
def step(xs):
    def body(c, x):
        y = lax.with_sharding_constraint(x, NamedSharding(mesh, P(None, "data")))  # rows -> columns: an all-to-all
        return c + loss(y), None
    return lax.scan(body, 0.0, xs)[0]


def local_step(xs):
    def body(c, x):
        return c + loss(x), None
    acc = lax.scan(body, lax.pcast(0.0, "data", to="varying"), xs)[0]
    return lax.psum(acc, "data") / DIVISOR
'''

LOSSES = {"sum": "jnp.sum(jnp.tanh(y))", "mean": "jnp.mean(jnp.tanh(y))", "scaled": "0.5 * jnp.sum(jnp.tanh(y))"}


def _subject(tmp_path, kind: str):
    from jax.sharding import NamedSharding

    path = tmp_path / f"loss_{kind}.py"
    path.write_text(textwrap.dedent(STEP).replace("LOSS", LOSSES[kind]))
    module = import_file(path)[0]
    xs = jax.device_put(np.random.default_rng(5).normal(size=(STEPS, ROWS, COLS)).astype(np.float32),
                        NamedSharding(module.mesh, P(None, "data", None)))
    return module, (xs,), subject_of(module.step, (xs,))


def _fix_divisor(fix: str) -> int:
    """What the fix's one sum after the loop is divided by (1: nothing)."""
    after = re.search(r"lax\.psum\(acc, 'data'\)( / (\d+))? runs once after it", fix)
    assert after is not None, fix
    return int(after.group(2)) if after.group(2) else 1


def _per_device(module, args, divisor: int):
    module.DIVISOR = divisor
    return jax.jit(jax.shard_map(module.local_step, mesh=module.mesh, in_specs=(P(None, "data", None),),
                                 out_specs=P(), axis_names={"data"}))(*args)


@pytest.mark.parametrize("kind, expected", [("sum", 1), ("mean", DATA)])
def test_the_fix_divides_a_mean_loss_and_not_a_summed_one(tmp_path, kind, expected):
    module, args, subject = _subject(tmp_path, kind)
    (finding,) = [c for c in subject.plan.collectives if c.verdict.kind == "deferrable"]
    divisor = _fix_divisor(finding.verdict.fix)
    assert divisor == expected, finding.verdict.fix
    np.testing.assert_allclose(np.asarray(_per_device(module, args, divisor)), np.asarray(module.step(*args)),
                               rtol=1e-5)


def test_a_loss_scaled_by_no_row_count_is_not_divided_and_the_fix_says_when(tmp_path):
    """``0.5 * jnp.sum``: the factor is no count of rows; the fix does not divide, and names the
    division a mean over the rows would take."""
    module, args, subject = _subject(tmp_path, "scaled")
    (finding,) = [c for c in subject.plan.collectives if c.verdict.kind == "deferrable"]
    assert _fix_divisor(finding.verdict.fix) == 1, finding.verdict.fix
    assert f"/ {DATA} (lax.pmean) only if" in finding.verdict.fix, finding.verdict.fix
    np.testing.assert_allclose(np.asarray(_per_device(module, args, 1)), np.asarray(module.step(*args)), rtol=1e-5)


def test_the_what_if_snippet_of_a_summed_loss_takes_no_gradient(tmp_path):
    """The what-if snippet for the summed loss (a value the step computes, no parameter) takes no
    ``gradient of`` a resharded loss (the Explicit-axes route: it adds it into an unreduced
    accumulator) and does not divide its sum (the shard_map route, which newer JAX takes)."""
    _, _, subject = _subject(tmp_path, "sum")
    (rewrite,) = [r for r in rewrites_of(subject) if r.patch is not None]
    text = rewrite.patch.text
    assert "take the gradient" not in text and "_reduced = " not in text, text
    assert "unreduced={'data'}" in text or "lax.psum(a, 'data'), acc)" in text, text
    assert not re.search(r"lax\.psum\(a, 'data'\) /", text), text


def test_the_what_if_snippet_of_a_mean_loss_divides_it_where_it_sums_per_device(tmp_path):
    """The mean loss's snippet: through a shard_map (each device's mean over its own rows) its sum
    is divided by DATA; on Explicit axes the program stays a global one and divides nothing."""
    _, _, subject = _subject(tmp_path, "mean")
    (rewrite,) = [r for r in rewrites_of(subject) if r.patch is not None]
    text = rewrite.patch.text
    assert "take the gradient" not in text, text
    if "lax.psum(" in text:
        assert f"lax.psum(a, 'data') / {DATA}, acc)" in text, text



GRADIENT_STEP = """
import functools
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import shardscope

mesh = Mesh(np.array(jax.devices()[:8]), ("d",))
W = jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, P()))
X = jax.ShapeDtypeStruct((64, 16), jnp.float32, sharding=NamedSharding(mesh, P("d")))


@shardscope.program(args=(W, X), kwargs={"n_micro": 4})
@functools.partial(jax.jit, static_argnames="n_micro", donate_argnums=0)
def step(w, x, n_micro):
    xs = x.reshape(n_micro, -1, x.shape[-1])
    def body(acc, xb):
        return acc + jax.grad(lambda w: jnp.mean(jnp.tanh(xb @ w)))(w), None
    g = lax.scan(body, jnp.zeros_like(w), xs)[0]
    return w - 0.1 * g
"""


def test_a_mean_losss_gradient_summed_in_the_loop_is_never_told_to_stay_undivided(tmp_path, shardscope_cli):
    """A newcomer's step: the gradient of a ``jnp.mean`` loss (16 x 16 f32, 1,024 B) summed over
    ``d`` in each of 4 micro-batches, its sum named after the output it flows to. The mean's 1/N
    sits on the cotangent inside the backward pass, not between the sum and the carry, so no walk
    from the sum finds it: the fix must not say "undivided" (the shard_map route's per-device
    means need ``/ 8``, the size of ``d``); it divides or says when to."""
    path = tmp_path / "grad_of_mean.py"
    path.write_text(textwrap.dedent(GRADIENT_STEP))
    done = shardscope_cli("check", path)
    assert done.returncode == 1, done.stderr
    text = " ".join(done.stdout.split())
    assert "all-reduce" in text and "4,096" in text and "deferrable" in text, text  # 1,024 B x 4 runs
    assert "undivided" not in text, text
    assert re.search(r"lax\.psum\(acc, 'd'\)( / 8 | runs once after it, then / 8 \(lax\.pmean\) only if)", text), text
