"""The Explicit-axes alternative of a jit step's deferral fix, on a step with a bias: JAX refuses a
parameter typed reduced over ``data`` beside the batch's activations sharded over ``data``, and a
bias resharded back to replicated where it is added has its gradient's all-reduce in the loop
again (both checked here on the installed JAX, from its own error and the compiled text). So the
fix, which offers that alternative for every parameter, says so, and points at the shard_map
route; a step whose only summed value is its loss has no parameter to type and no such words."""

from __future__ import annotations

import re
import textwrap

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from _support import write_demo
from shardscope.errors import ShardscopeError

MICRO = 4


def _loss(p, x, y, reshard_bias: bool = False):
    b = jax.reshard(p["b"], P()) if reshard_bias else p["b"]
    return jnp.mean((jnp.tanh(x @ p["W"] + b) - y) ** 2)


def _explicit_step(reshard_bias: bool):
    """The fix's Explicit-axes recipe applied to a linear layer with a bias."""

    @jax.jit
    def step(params, xs, ys):
        params_r = jax.tree.map(lambda p: jax.reshard(p, P(reduced={"data"})), params)
        acc = jax.tree.map(lambda a: jax.reshard(a, P(unreduced={"data"})), jax.tree.map(jnp.zeros_like, params))

        def body(acc, xy):
            return jax.tree.map(jnp.add, acc, jax.grad(_loss)(params_r, *xy, reshard_bias)), None

        acc, _ = lax.scan(body, acc, (xs, ys))
        return jax.tree.map(lambda a: jax.reshard(a, P()), acc)

    return step


def _in_while_bodies(text: str) -> list[str]:
    """The all-reduce instructions of computations a while loop runs as its body."""
    bodies = set(re.findall(r"while\(.*?body=%?([\w.\-]+)", text))
    found, current = [], None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            current = head.group(1)
        elif current in bodies and " all-reduce(" in line:
            found.append(line.strip().split(" = ")[0])
    return found


def test_a_bias_typed_reduced_is_refused_and_resharded_back_its_sum_stays_in_the_loop():
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        params = {"W": jnp.full((16, 4), 0.1), "b": jnp.zeros((4,))}
        xs = jax.device_put(jnp.ones((MICRO, 32, 16)), NamedSharding(mesh, P(None, "data")))
        ys = jax.device_put(jnp.ones((MICRO, 32, 4)), NamedSharding(mesh, P(None, "data")))
        with pytest.raises(Exception, match="reduced on"):
            _explicit_step(False).lower(params, xs, ys)
        text = _explicit_step(True).lower(params, xs, ys).compile().as_text()
    in_loop = _in_while_bodies(text)
    assert len(in_loop) == 1, in_loop  # the bias's f32[4] sum, every iteration


BIAS_STEP = '''
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
params = {"W": jax.ShapeDtypeStruct((16, 4), jnp.float32, sharding=NamedSharding(mesh, P())),
          "b": jax.ShapeDtypeStruct((4,), jnp.float32, sharding=NamedSharding(mesh, P()))}
xs = jax.ShapeDtypeStruct((4, 64, 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))
ys = jax.ShapeDtypeStruct((4, 64, 4), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))


def loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["W"] + p["b"]) - y) ** 2)


@shardscope.program(args=(params, xs, ys))
@jax.jit
def step(params, xs, ys):
    def micro_batch(acc, xy):
        return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, *xy)), None

    grads, _ = lax.scan(micro_batch, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    return grads
'''


def test_the_fix_of_a_step_with_a_bias_says_explicit_axes_do_not_cover_it(tmp_path, shardscope_cli):
    path = write_demo(tmp_path, "bias_step.py", BIAS_STEP)
    result = shardscope_cli("check", path)
    assert result.returncode == 1, result.stderr
    fix = " ".join(result.stdout.split())
    assert "Either use Explicit axes" in fix
    assert ("cannot be typed reduced over 'data': JAX refuses it, and resharding it back before that use leaves its "
            "sum in the loop; the shard_map route below covers it") in fix
