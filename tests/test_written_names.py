"""A collective is named and placed as the program writes it: a GPipe ppermute by the value its
call sends (and the gradient its transpose sends back), a psum written in a ``jax.custom_vjp``'s
backward rule at the rule's own line, with a fix that names the rule.

Expected names and lines come from this file's text (found by a mark on the line), the
collectives' counts and loops from the compiled module's text read here.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope
from _tpu_text import collectives

STAGES, MICRO, D = 4, 8, 16
CHUNKS = 4
_PERMUTE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+collective-permute(?:-start)?\(")
_ALL_REDUCE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+all-reduce(?:-start)?\(")


def _line(mark: str) -> tuple[int, str]:
    """The number and text of this file's line that ends with ``mark``."""
    ((number, text),) = [(n, t) for n, t in enumerate(Path(__file__).read_text().splitlines(), 1) if t.endswith(mark)]
    return number, text


# --- GPipe: activations forward by ppermute, their gradients back by its transpose ------------

stage_mesh = Mesh(np.array(jax.devices()[:STAGES]), ("stage",))


def _pipeline(w, xs):
    stage = lax.axis_index("stage")
    perm = [(i, (i + 1) % STAGES) for i in range(STAGES)]

    def step(carry, t):
        state, outs = carry
        x_in = jnp.where(stage == 0, xs[t % MICRO], state)
        y = jnp.tanh(x_in @ w[0])
        outs = outs.at[t % MICRO].set(jnp.where(stage == STAGES - 1, y, outs[t % MICRO]))
        state = lax.ppermute(y, "stage", perm)  # THE PPERMUTE
        return (state, outs), None

    init = lax.pcast((jnp.zeros_like(xs[0]), jnp.zeros_like(xs)), "stage", to="varying")
    (_, outs), _ = lax.scan(step, init, jnp.arange(MICRO + STAGES - 1))
    return outs


def _pipeline_loss(w, xs, ys):
    return lax.psum(jnp.sum((_pipeline(w, xs) - ys) ** 2), "stage")


@jax.jit
@partial(jax.shard_map, mesh=stage_mesh, in_specs=(P("stage"), P(), P()), out_specs=(P(), P("stage")))
def gpipe_step(w, xs, ys):
    return jax.value_and_grad(_pipeline_loss)(w, xs, ys)


def test_a_gpipe_ppermute_is_named_by_what_it_sends_and_its_transpose_by_that_gradient():
    """The forward ppermute sends ``y`` (the first argument its call writes); JAX's transpose of
    it sends ``y``'s gradient back: ``grad(y)``, not the weights' gradient output it reaches
    (``out[1]``). The compiled module (read here) runs both in the pipeline's loops."""
    args = (jax.ShapeDtypeStruct((STAGES, D, D), jnp.float32), jax.ShapeDtypeStruct((MICRO, 4, D), jnp.float32),
            jax.ShapeDtypeStruct((MICRO, 4, D), jnp.float32))
    text = gpipe_step.lower(*args).compile().as_text()
    permutes = collectives(text, _PERMUTE)
    assert len(permutes) == 2 and all(depth for _, depth in permutes), permutes

    number, written = _line("# THE PPERMUTE")
    sent = re.search(r"lax\.ppermute\((\w+),", written).group(1)
    inspection = shardscope.inspect(gpipe_step, *args)
    moved = [c for c in inspection.paired if c.kind == "collective-permute"]
    assert sorted(c.value for c in moved) == sorted([sent, f"grad({sent})"])
    assert {c.source for c in moved} == {f"test_written_names.py:{number} (_pipeline.<locals>.step)"}


# --- custom_vjp: the psum its backward rule writes ----------------------------------------------

data_mesh = Mesh(np.array(jax.devices()[:4]), ("data",))


@jax.custom_vjp
def linear(W, x):
    return x @ W


def _linear_fwd(W, x):
    return x @ W, (W, x)


def _linear_bwd(res, g):
    W, x = res
    dW = lax.psum(x.T @ g, "data")  # THE PSUM IN BWD
    return dW, g @ W.T


linear.defvjp(_linear_fwd, _linear_bwd)


def _custom_loss(W, x):
    return jnp.sum(linear(W, x) ** 2)


@jax.jit
@partial(jax.shard_map, mesh=data_mesh, in_specs=(P(), P(None, "data")), out_specs=P())
def custom_step(W, xs):
    def body(acc, x):
        return acc + jax.grad(_custom_loss)(W, x), None

    acc, _ = lax.scan(body, jnp.zeros_like(W), xs)
    return acc


def test_a_psum_written_in_a_custom_vjp_backward_rule_is_at_the_rules_line_and_the_fix_names_it():
    """JAX keeps the frames of ``linear(W, x)``'s call for every equation ``_linear_bwd`` makes
    (the compiled all-reduce's metadata says the loss's line). shardscope places the
    psum at the rule's line, pairs it with that all-reduce all the same, and its fix starts in
    the rule, whose psum no cast outside it removes."""
    args = (jax.ShapeDtypeStruct((D, D), jnp.float32), jax.ShapeDtypeStruct((CHUNKS, 32, D), jnp.float32))
    text = custom_step.lower(*args).compile().as_text()
    found = collectives(text, _ALL_REDUCE)
    assert [depth for _, depth in found] == [1], found
    psum_line, written = _line("# THE PSUM IN BWD")

    inspection = shardscope.inspect(custom_step, *args)
    (c,) = inspection.paired
    assert c.compiled is not None and c.equations  # paired, though the two lines differ
    assert c.source == f"test_written_names.py:{psum_line} (_linear_bwd)"
    assert c.executions == CHUNKS and c.verdict_kind == "deferrable"
    operand = re.search(r"lax\.psum\((.+), \"data\"\)", written).group(1)
    fix = " ".join(c.verdict.fix.split())
    assert fix.startswith(f"the lax.psum at test_written_names.py:{psum_line} (_linear_bwd) is in _linear_bwd")
    assert f"return the unsummed {operand} from _linear_bwd" in fix


# --- a reshape into micro-batches under jit: the all-to-all the partitioner adds ----------------

batch_mesh = Mesh(np.array(jax.devices()[:8]), ("data",))


def _micro_loss(W, x, y):
    return jnp.mean((jnp.tanh(x @ W) - y) ** 2)


@jax.jit
def reshaped_step(W, x, y):
    xs = x.reshape(CHUNKS, x.shape[0] // CHUNKS, x.shape[1])  # THE RESHAPE
    xs = lax.with_sharding_constraint(xs, NamedSharding(batch_mesh, P(None, "data")))
    ys = y.reshape(CHUNKS, y.shape[0] // CHUNKS, y.shape[1])
    ys = lax.with_sharding_constraint(ys, NamedSharding(batch_mesh, P(None, "data")))

    def micro(acc, batch):
        return acc + jax.grad(_micro_loss)(W, *batch), None

    grads, _ = lax.scan(micro, jnp.zeros_like(W), (xs, ys))
    return W - 0.1 * grads / CHUNKS


def test_the_all_to_all_of_a_reshape_into_micro_batches_has_its_sub_axis_value_and_line():
    """``[B] -> [4, B/4]`` with B sharded 8 ways: the reshape leaves the micro-batch dimension
    sharded over the major 4 of ``data``'s 8 devices (every second one) and the batch over the
    minor 2; constraining it to ``P(None, 'data')`` exchanges the major part (derived by hand:
    Shardy's ``data:(1)4``). Every all-to-all of the module compiled here says ``reshape`` in its
    ``op_name``; shardscope names its axes, its value as the line writes it (``xs``) and that line."""
    args = (jax.ShapeDtypeStruct((32, 16), jnp.float32, sharding=NamedSharding(batch_mesh, P())),
            jax.ShapeDtypeStruct((256, 32), jnp.float32, sharding=NamedSharding(batch_mesh, P("data"))),
            jax.ShapeDtypeStruct((256, 16), jnp.float32, sharding=NamedSharding(batch_mesh, P("data"))))
    text = reshaped_step.lower(*args).compile().as_text()
    exchanges = [line for line in text.splitlines() if re.search(r"= .*\sall-to-all\(", line)]
    assert exchanges and all(re.search(r'op_name="[^"]*/reshape"', line) for line in exchanges), exchanges

    number, written = _line("# THE RESHAPE")
    name = written.split("=", 1)[0].strip()
    inspection = shardscope.inspect(reshaped_step, *args)
    rows = [(i, c) for i, c in enumerate(inspection.paired, 1) if c.kind == "all-to-all"]
    assert len(rows) == len(exchanges)
    assert {c.axes for _, c in rows} == {("data:(1)4",)}
    mine = [(i, c) for i, c in rows if c.value == name]
    assert mine, [c.value for _, c in rows]
    text = " ".join(str(inspection).split())
    for i, c in mine:
        assert f"all-to-all[data:(1)4]" in text
        assert (f"#{i} {c.compiled.name} of {name} outside loops" in text
                and f"adds it for the reshape at test_written_names.py:{number} (reshaped_step)" in text), text


# --- a psum the program assigns, on its way to the output --------------------------------------

def test_a_psum_the_loop_reads_is_named_by_the_variable_its_line_assigns():
    """``total = lax.psum(...)`` in a scan's body (shard_map) feeds the next carry, which the
    function returns: the sum is ``total``, the name its line gives it, not the output it
    reaches (``out``). One all-reduce in the loop (counted in the module compiled here)."""
    import inspect

    import _target_programs

    built = _target_programs.needed_in_loop(Mesh(np.array(jax.devices()[:4]), ("data",)))
    found = collectives(built.fn.trace(*built.args).lower().compile().as_text(), _ALL_REDUCE)
    assert [depth for _, depth in found] == [1], found
    (line,) = [text for text in inspect.getsource(_target_programs.needed_in_loop).splitlines() if "lax.psum(" in text]
    assigned = line.split("=", 1)[0].strip()
    (c,) = shardscope.inspect(built.fn, *built.args).paired
    assert c.value == assigned and c.compiled.operands[0].value == assigned
