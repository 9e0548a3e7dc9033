"""``refused`` is for a rewrite that would change the result; a rewrite shardscope cannot make
(a limitation of the rewriter, JAX refusing the rewritten program) is ``failed``, with the whole
reason, never JAX's message cut at its first line."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardscope.whatif.retrace import exception_text
from shardscope.whatif.what_if import FAILED, rewrites_of, subject_of


def test_a_scan_over_micro_batches_sharded_on_its_leading_axis_is_a_limitation_not_a_refusal():
    """Micro-batches spread over ``mb`` (the scan's axis) and each batch over ``dp``: the
    gradient's all-reduce over ``dp`` only accumulates, so the fix is right; with Explicit axes
    JAX does not scan over a sharded leading axis, so shardscope cannot write it here."""
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("mb", "dp"))
    W = jax.device_put(jnp.full((16, 8), 0.1), NamedSharding(mesh, P()))
    xs = jax.device_put(jnp.ones((4, 8, 16)), NamedSharding(mesh, P("mb", "dp")))

    @jax.jit
    def step(W, xs):
        def body(acc, x):
            return acc + jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(W), None

        return jax.lax.scan(body, jnp.zeros_like(W), xs)[0]

    text = step.lower(W, xs).compile().as_text()
    assert any(" all-reduce(" in line for line in text.split("\nENTRY")[0].splitlines())  # in a computation the loop calls
    (rewrite,) = rewrites_of(subject_of(step, (W, xs), {}))
    assert rewrite.status == FAILED and rewrite.program is None
    assert "0th dimension of all xs should be replicated" in rewrite.reason
    assert "not rewritten" not in rewrite.summary() and "(failed: " in rewrite.summary()


def test_the_reason_holds_the_whole_message():
    """JAX's message about an argument that is no array spans several lines: all of them."""
    with pytest.raises(TypeError) as raised:
        jax.jit(lambda x: x)(object())
    lines = [line.strip() for line in str(raised.value).splitlines() if line.strip()]
    assert len(lines) > 1
    text = exception_text(raised.value)
    assert text.startswith("TypeError: ") and all(line in text for line in lines) and "\n" not in text
