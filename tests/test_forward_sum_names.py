"""A forward ``lax.psum`` is not a gradient: no ``grad(...)`` name without a transpose.

``psum(c + x)`` in a scan's carry, with ``x`` varying over the axis: JAX casts ``c`` to varying
on that line (a ``pvary``) and binds the sum as ``psum_invariant``, the primitive a VJP's
transposed cast also binds. No ``jax.grad`` is anywhere in the program (its jaxpr, read here,
has no ``transpose``), so the sum must not be named as an argument's gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:4]), ("d",))


def _forward(x, s):
    def body(c, _):
        return lax.psum(c + x, "d"), None

    return lax.scan(body, jnp.zeros_like(s), None, length=3)[0]


def _backward(w, x):
    return jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)


def _name_stacks(fn, *args) -> list[str]:
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            found.append(str(eqn.source_info.name_stack))
            for value in eqn.params.values():
                inner = getattr(value, "jaxpr", value)
                if hasattr(inner, "eqns"):
                    walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def test_a_forward_psum_in_a_scan_carry_is_not_named_a_gradient():
    fn = jax.shard_map(_forward, mesh=_mesh(), in_specs=(P("d"), P()), out_specs=P())
    args = (jax.ShapeDtypeStruct((8,), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.float32))
    assert not any("transpose" in stack for stack in _name_stacks(fn, *args))
    (c,) = shardscope.inspect(fn, *args).collectives
    assert c.primitive.startswith("psum") and not c.value.startswith("grad(")


def test_the_transposed_cast_of_a_gradient_is_still_named_after_its_argument():
    fn = jax.shard_map(_backward, mesh=_mesh(), in_specs=(P(), P("d")), out_specs=P())
    w, x = jnp.ones((4, 4)), jnp.ones((8, 4))
    assert any("transpose" in stack for stack in _name_stacks(fn, w, x))
    (c,) = shardscope.inspect(fn, w, x).collectives
    assert c.value == "grad(w)"
