"""The shard_map fix of a jit FSDP step: parameters sharded over ``fsdp`` (and ``tp``), the batch
over ``fsdp`` only, gradients accumulated over micro-batches in a scan around a scan of layers.

Two things the fix must get from the program, not from the mesh: the gradients' sum over
``fsdp`` is divided by the size of ``fsdp`` (each device's ``jnp.mean`` is over its own rows of
the batch split over ``fsdp``; ``tp`` splits no row), not by the 8 devices of the mesh; and
inside a ``shard_map`` manual over ``fsdp`` the step's code needs each parameter whole (a
``D/4`` slice of ``wi`` fails ``h @ wi``), so the parameters enter replicated over ``fsdp``
(``P()``), which the partitioner gathers before the ``shard_map``. Both the fix text and the
what-if snippet are pasted into the step, run on the 8 CPU devices, and compared with the
original with numpy.
"""

from __future__ import annotations

import re
import textwrap

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from shardscope.sources.loading import import_file
from shardscope.whatif.what_if import rewrites_of, subject_of

FSDP, TP = 4, 2  # the mesh written in STEP
L, D, F, B, M = 3, 64, 256, 32, 2  # layers, model width, hidden width, rows per micro-batch, micro-batches

STEP = f'''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:8]).reshape({FSDP}, {TP}), ("fsdp", "tp"))


def fwd(p, x):
    def layer(h, w):
        wi, wo = w
        return h + jax.nn.relu(h @ wi) @ wo, None
    return lax.scan(layer, x, (p["wi"], p["wo"]))[0]


@jax.jit
def step(p, xs):
    def mb(acc, x):
        g = jax.grad(lambda p: jnp.mean(fwd(p, x) ** 2))(p)
        return jax.tree.map(jnp.add, acc, g), None
    g, _ = lax.scan(mb, jax.tree.map(jnp.zeros_like, p), xs)
    return g


def local_step(p, xs):
    local_p = lax.pcast(p, "fsdp", to="varying")

    def mb(acc, x):
        g = jax.grad(lambda p: jnp.mean(fwd(p, x) ** 2))(local_p)
        return jax.tree.map(jnp.add, acc, g), None
    acc0 = jax.tree.map(lambda a: lax.pcast(a, "fsdp", to="varying"), jax.tree.map(jnp.zeros_like, p))
    g, _ = lax.scan(mb, acc0, xs)
    return jax.tree.map(lambda a: lax.psum(a, "fsdp") / DIVISOR, g)
'''
"""The user's step, and it per device as the fix says (``DIVISOR`` and the ``shard_map``'s specs
taken from the fix under test)."""


def _subject(tmp_path):
    from jax.sharding import NamedSharding

    path = tmp_path / "fsdp_step.py"
    path.write_text(textwrap.dedent(STEP))
    module = import_file(path)[0]
    rng = np.random.default_rng(3)

    def placed(shape, spec):
        return jax.device_put((rng.normal(size=shape) * 0.2).astype(np.float32), NamedSharding(module.mesh, spec))

    params = {"wi": placed((L, D, F), P(None, "fsdp", "tp")), "wo": placed((L, F, D), P(None, "tp", "fsdp"))}
    args = (params, placed((M, B, D), P(None, "fsdp")))
    return module, args, subject_of(module.step, args)


def _run_fixed(module, args, in_specs: str, divisor: int):
    """The step per device inside ``jax.shard_map(..., in_specs=<in_specs>, axis_names={'fsdp'})``,
    its sum divided by ``divisor``, run on ``args``."""
    module.DIVISOR = divisor
    specs = eval(in_specs, {"P": P, "jax": jax, "p": args[0], "xs": args[1]})
    fixed = jax.jit(jax.shard_map(module.local_step, mesh=module.mesh, in_specs=specs, out_specs=P(),
                                  axis_names={"fsdp"}))
    return fixed(*args)


def _assert_same(expected, got):
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-4, atol=1e-6 * float(np.abs(a).max()))


def test_the_fix_text_divides_by_the_summed_axis_and_its_specs_trace(tmp_path):
    """The fix divides the sum over ``fsdp`` by FSDP (4), not by the mesh's 8 devices, and its
    in_specs give the parameters P() over ``fsdp``: pasted as written, it traces and gives the
    original's gradients (its own ``fsdp`` split of ``wi`` made ``h @ wi`` fail to trace)."""
    module, args, subject = _subject(tmp_path)
    (finding,) = [c for c in subject.plan.collectives if c.verdict.kind == "deferrable"]
    fix = finding.verdict.fix
    divisor = re.search(r"lax\.psum\(acc, 'fsdp'\) / (\d+) after it", fix)
    assert divisor is not None and int(divisor.group(1)) == FSDP, fix
    call = re.search(r"jax\.shard_map\(step, mesh=mesh, in_specs=(.*?), out_specs=P\(\), axis_names=\{'fsdp'\}\)", fix)
    assert call is not None, fix
    assert "replicated over it" in fix and "once per call" in fix  # it says why, and what it costs
    _assert_same(module.step(*args), _run_fixed(module, args, call.group(1), int(divisor.group(1))))


def test_the_what_if_snippet_agrees_and_traces(tmp_path):
    """The what-if snippet for the same finding divides by the same FSDP and gives the same
    in_specs: run, it is the original."""
    module, args, subject = _subject(tmp_path)
    rewrite = next(r for r in rewrites_of(subject) if r.patch is not None and "jax.shard_map" in r.patch.text)
    text = rewrite.patch.text
    decorator = re.search(r"@jax\.shard_map\(mesh=mesh, in_specs=(.*?), out_specs=.*?, axis_names=\{'fsdp'\}\)", text)
    divisor = re.search(r"lax\.psum\(a, 'fsdp'\) / (\d+)", text)
    assert decorator is not None and divisor is not None, text
    assert int(divisor.group(1)) == FSDP, text
    _assert_same(module.step(*args), _run_fixed(module, args, decorator.group(1), int(divisor.group(1))))
