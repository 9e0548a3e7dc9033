"""A gradient's all-reduce is named as the gradient of its argument, and its fix casts the argument.

The seed discussion's own program (``vjp_sm = jax.shard_map(vjp_scan, ...)`` over ``W``, today's
APIs) returns the accumulated gradient as its one output, ``out``: that name says nothing. The
``psum_invariant`` in the scan is the transpose of the implicit ``pvary`` of ``W``, so it is named
``grad(W)`` and the fix (what the user casts is the parameter) is ``W = lax.pcast(W, 's', to='varying')``. The fix, pasted into the program,
leaves one all-reduce per call and the same gradient (numpy recomputes it here).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _support import load_program_module

SEED = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:2]), ("s",))
M, N = 5, 64
batch_size = 16
W = jax.ShapeDtypeStruct((M,), jnp.float32)
xs = jax.ShapeDtypeStruct((N, M), jnp.float32)
v = jax.ShapeDtypeStruct((N,), jnp.float32)


def model(W, xs):
    return xs @ W


def vjp_scan(W, xs_shard, v_shard):
    num_batches = xs_shard.shape[0] // batch_size
    xs_chunks = xs_shard.reshape((num_batches, batch_size, M))
    v_chunks = v_shard.reshape((num_batches, batch_size))
    # FIX

    def body(acc, inputs):
        xs_c, v_c = inputs
        _, vjp_fn = jax.vjp(lambda w: model(w, xs_c), W)
        gW = vjp_fn(v_c)[0]
        return acc + gW, None

    grad_shard, _ = lax.scan(body, jnp.zeros_like(W), (xs_chunks, v_chunks))
    return grad_shard  # RETURN


vjp_sm = shardscope.program(args=(W, xs, v))(
    jax.shard_map(vjp_scan, mesh=mesh, in_specs=(P(None), P("s"), P("s")), out_specs=P("s")))
'''

PYTREE = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:4]), ("devices",))
params = {"W1": jax.ShapeDtypeStruct((4, 8), jnp.float32), "W2": jax.ShapeDtypeStruct((8,), jnp.float32)}
xs = jax.ShapeDtypeStruct((3, 16, 4), jnp.float32)


def loss(params, x):
    return jnp.sum(jnp.tanh(x @ params["W1"]) @ params["W2"])


@shardscope.program(args=(params, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "devices")), out_specs=P())
def accumulate(params, xs):
    # FIX
    def body(acc, x):
        return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, x)), None

    grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), xs)
    return grads  # RETURN
'''


def write(directory: Path, name: str, source: str, fix: str | None = None, reduce: str | None = None) -> Path:
    """The program, with the fix line pasted before the loop and the reduction after it."""
    source = textwrap.dedent(source)
    if fix is not None:
        source = source.replace("# FIX", fix)
    if reduce is not None:
        source = source.replace("  # RETURN", "").replace("return grad_shard\n", f"return {reduce}(grad_shard)\n")
        source = source.replace("return grads\n", f"return {reduce}(grads)\n")
    path = directory / name
    path.write_text(source)
    return path


def fix_code(fix: str) -> str:
    """The line the fix tells to write (between ': ' and '; start the accumulator')."""
    return re.search(r"to varying before the .*?: (.*?); start the accumulator", fix).group(1)


def test_the_seed_programs_all_reduce_is_named_w_and_its_fix_casts_w(tmp_path, shardscope_cli):
    result = shardscope_cli("check", write(tmp_path, "seed.py", SEED), "--json")
    assert result.returncode == 1, result.stderr
    (finding,) = json.loads(result.stdout)["findings"]
    assert (finding["primitive"], finding["value"], finding["executions"]) == ("psum_invariant", "grad(W)", 64 // 2 // 16)  # N / devices / batch_size
    assert fix_code(finding["fix"]) == "W = lax.pcast(W, 's', to='varying')"
    assert "e.g. params" not in finding["fix"]
    text = shardscope_cli("check", write(tmp_path, "seed.py", SEED))
    words = " ".join(text.stdout.split())
    assert "psum_invariant of grad(W) -> all-reduce" in words and "x2/call (seed.py:" in words


def test_the_seed_programs_fix_pasted_in_gives_one_all_reduce_and_the_same_gradient(tmp_path, shardscope_cli):
    finding = json.loads(shardscope_cli("check", write(tmp_path, "seed.py", SEED), "--json").stdout)["findings"][0]
    fixed = write(tmp_path, "seed_fixed.py", SEED, fix=fix_code(finding["fix"]),
                  reduce="(lambda g: lax.psum(g, 's'))")
    result = shardscope_cli("check", fixed, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    collectives = json.loads(result.stdout)["collectives"]
    assert [(c["primitive"], c["executions"], c["loop_trip_counts"]) for c in collectives] == [("psum_invariant", 1, [])]
    assert gradient(tmp_path / "seed.py") == pytest.approx(gradient(fixed), rel=1e-5)


def gradient(path: Path) -> list[float]:
    """The program's output on fixed inputs, checked against numpy's xs.T @ v."""
    m = load_program_module(path)
    rng = np.random.default_rng(0)
    W, xs, v = (rng.standard_normal(s.shape).astype(np.float32) for s in (m.W, m.xs, m.v))
    out = np.asarray(m.vjp_sm(W, xs, v))[:5]
    expected = xs.T @ v
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    return out.tolist()


def test_a_pytree_arguments_leaves_are_named_and_the_fix_casts_the_argument(tmp_path, shardscope_cli):
    result = shardscope_cli("check", write(tmp_path, "tree.py", PYTREE), "--json")
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)["findings"]
    assert sorted(f["value"] for f in findings) == ["grad(params['W1'])", "grad(params['W2'])"]
    for finding in findings:
        assert fix_code(finding["fix"]) == \
            "params = jax.tree.map(lambda p: lax.pcast(p, 'devices', to='varying'), params)"
    fixed = write(tmp_path, "tree_fixed.py", PYTREE, fix=fix_code(findings[0]["fix"]),
                  reduce="(lambda g: lax.psum(g, 'devices'))")
    result = shardscope_cli("check", fixed, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(c["executions"] for c in json.loads(result.stdout)["collectives"]) == [1, 1]


def test_an_axis_tuple_is_written_as_one_argument():
    from shardscope.engine.jaxpr.verdicts import axes_argument

    assert axes_argument(("s",)) == "'s'"
    assert axes_argument(("data", "model")) == "('data', 'model')"
