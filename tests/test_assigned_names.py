"""The variable a program assigns a value to, read from its source through the returns of the
functions that make it (``assigned_name``): where it stops, on source written here.

Each case is a frame chain as JAX and XLA keep it, ``(file, line, column, function)``
innermost first, the columns those of the calls on the lines below (0-based).
"""

from __future__ import annotations

import linecache
import textwrap

import pytest

from shardscope.engine.written_values import assigned_name, gradient_operand

SOURCE = textwrap.dedent('''\
    def loss_fn(p, x):
        return jnp.mean((x @ p) ** 2)
    def step(p, x):
        loss, g = jax.value_and_grad(loss_fn)(p, x)
        grads = jax.grad(loss_fn)(p, x)
        scaled = jnp.mean(x) * 2
        total = jnp.mean(x)
        out, _ = lax.scan(loss_fn, p, x)
    def pair(x):
        return x, jnp.mean(x)
    def caller(x):
        first, second = pair(x)
        return pair(x)
    def outer(x):
        a, b = caller(x)
        return jnp.tanh(x @ w) @ v
''')
FILE = "<assigned-names-test>"


@pytest.fixture(autouse=True)
def _source():
    lines = SOURCE.splitlines(keepends=True)
    linecache.cache[FILE] = (len(SOURCE), None, lines, FILE)
    yield
    linecache.cache.pop(FILE, None)


def _at(line: int, text: str, function: str) -> tuple[str, int, int, str]:
    """The frame of the call ``text`` on ``line`` (1-based), its column found on the line here."""
    return FILE, line, SOURCE.splitlines()[line - 1].index(text), function


MEAN_IN_LOSS = _at(2, "jnp.mean", "loss_fn")


@pytest.mark.parametrize(("frames", "name"), [
    ([MEAN_IN_LOSS, _at(4, "jax.value_and_grad", "step")], "loss"),  # value_and_grad's first result
    ([MEAN_IN_LOSS, _at(5, "jax.grad", "step")], ""),  # grad does not return the value
    ([MEAN_IN_LOSS, _at(8, "lax.scan", "step")], ""),  # scan calls it: its result is not the callee's
    ([_at(6, "jnp.mean", "step")], ""),  # an operand of what the line assigns, not all of it
    ([_at(7, "jnp.mean", "step")], "total"),
    ([_at(10, "jnp.mean", "pair"), _at(12, "pair", "caller")], "second"),  # an element of the tuple returned
    ([_at(10, "jnp.mean", "pair"), _at(13, "pair", "caller"), _at(15, "caller", "outer")], "b"),  # through a return
])
def test_the_name_follows_returns_to_the_callers_assignment(frames, name):
    primitive = "reduce_sum"
    assert assigned_name(frames, primitive) == name


def test_a_backward_step_is_the_gradient_of_the_one_operand_of_the_call_it_transposes():
    """At ``jnp.tanh(x @ w) @ v``'s column both the matmul and the tanh start: a ``mul`` is the
    tanh's (its derivative, transposed) and its gradient is of ``x @ w``; a ``dot_general`` is a
    matmul's, whose two operands the line does not tell apart."""
    line, column = 16, SOURCE.splitlines()[15].index("jnp.tanh")
    assert gradient_operand(FILE, line, column, "mul") == "x @ w"
    assert gradient_operand(FILE, line, column, "dot_general") == ""
