"""Every value a combined all-reduce carries is named, a gradient as the gradient of its argument.

A data-parallel step as users write it: an MLP whose same-width layers a Python loop applies on
one line (``h = jnp.tanh(h @ layer["w"] + layer["b"])``), ``jax.value_and_grad`` of its loss,
optax's adam, jit with the batch sharded over ``data`` and the parameters replicated. XLA's
combiner merges the gradients' sums and the loss's into one all-reduce. Every layer's gradients
come from the same line and column and have the same shapes: the outputs each gradient reaches
(the updated ``params[k]['b']``, adam's two moments of it) tell which layer's it is. A bias's
gradient is a ``reduce_sum`` (the transpose of the broadcast that adds it to every row).

Expected names come from the arguments and the compiled text: the all-reduce's operand shapes,
read from the module, are the parameters' leaf shapes (one per leaf) and the loss's scalar.

A tensor-parallel step (the weights split over ``model``, the batch over ``data``) sums each
device's shard of the gradients over ``data``: a shard is named as the gradient of its argument
too, though the jaxpr types the whole value and the compiled module one device's part of it.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope
from shardscope.engine.pytree_paths import gradient_label, labelled_argument

LAYERS, WIDTH, BATCH = 3, 16, 64


def loss_fn(params, x, y):
    h = x
    for layer in params:
        h = jnp.tanh(h @ layer["w"] + layer["b"])
    return jnp.mean((h - y) ** 2)


optimizer = optax.adam(1e-3)


@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _arguments():
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = [{"w": jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32, sharding=replicated),
               "b": jax.ShapeDtypeStruct((WIDTH,), jnp.float32, sharding=replicated)} for _ in range(LAYERS)]
    opt_state = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated),
                             jax.eval_shape(optimizer.init, params))
    x = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32, sharding=batch)
    return params, opt_state, x, x


def _all_reduce_shapes(text: str) -> list[str]:
    """The operand shapes of the module's one all-reduce, read from its text."""
    (line,) = [line for line in text.splitlines() if re.search(r"\ball-reduce(-start)?\(", line)]
    result = re.search(r"=\s*\(?([^)]*?)\)?\s+all-reduce", line).group(1)
    return re.findall(r"f32\[[\d,]*\]", result)


def test_a_combined_sum_of_same_line_layers_names_every_gradient():
    args = _arguments()
    shapes = _all_reduce_shapes(train_step.trace(*args).lower().compile().as_text())
    leaves = jax.tree_util.tree_flatten_with_path(args[0])[0]
    by_shape = Counter(f"f32[{','.join(map(str, leaf.shape))}]" for _, leaf in leaves)
    # by hand: one operand per parameter leaf (3 kernels, 3 biases) and the loss's scalar
    assert Counter(shapes) == by_shape + Counter({"f32[]": 1}) and len(shapes) == 2 * LAYERS + 1

    (c,) = shardscope.inspect(train_step, *args).compiled.collectives
    expected = {f"f32[{','.join(map(str, leaf.shape))}]": set() for _, leaf in leaves}
    for path, leaf in leaves:
        expected[f"f32[{','.join(map(str, leaf.shape))}]"].add(f"grad(params{jax.tree_util.keystr(path)})")
    named: dict[str, list[str]] = {}
    for op in c.operands:
        named.setdefault(op.shape, []).append(op.value)
    assert all(op.value for op in c.operands), [op.value for op in c.operands]
    for shape, labels in expected.items():
        assert sorted(named[shape]) == sorted(labels), shape  # each layer's leaf once, none unnamed
    # the loss, no gradient: named as train_step assigns it (loss, grads = jax.value_and_grad(...)), not out[2]
    assert named["f32[]"] == ["loss"]


def test_check_json_lists_the_gradients_of_a_data_parallel_step_with_biases(shardscope_cli, tmp_path):
    """The same kind of step in a file ``check`` reads: two layers with biases, a dict of
    parameters, the step returning ``(loss, grads)``: the compiled all-reduce's values in the JSON
    are the four gradients and the loss, named ``loss`` as the step assigns it."""
    path = tmp_path / "train.py"
    path.write_text('''
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import shardscope

mesh = jax.make_mesh((4,), ("data",))
rep, dat = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
params = {"W1": jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=rep),
          "b1": jax.ShapeDtypeStruct((32,), jnp.float32, sharding=rep),
          "W2": jax.ShapeDtypeStruct((32, 4), jnp.float32, sharding=rep),
          "b2": jax.ShapeDtypeStruct((4,), jnp.float32, sharding=rep)}
batch = (jax.ShapeDtypeStruct((64, 16), jnp.float32, sharding=dat), jax.ShapeDtypeStruct((64, 4), jnp.float32, sharding=dat))


def loss_fn(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["W1"] + params["b1"])
    return jnp.mean((h @ params["W2"] + params["b2"] - y) ** 2)


@shardscope.program(args=(params, batch))
@jax.jit
def step(params, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    return loss, grads
''')
    result = shardscope_cli("check", path, "--devices", "4", "--json")
    assert result.returncode == 0, result.stderr
    (c,) = json.loads(result.stdout)["compiled_collectives"]
    assert sorted(c["values"]) == sorted([*(f"grad(params['{k}'])" for k in ("W1", "b1", "W2", "b2")), "loss"])


def test_the_jaxpr_view_names_a_loop_of_layers_sums_as_their_gradients():
    """shard_map, the parameters replicated: each layer's ``psum_invariant`` transposes the
    implicit ``pvary`` of its leaf. The three layers' casts share one line and column; the outputs
    each sum reaches (the accumulated gradient returned as ``out[k]['w']``) tell them apart."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))

    def step(params, xs, ys):
        def body(acc, xy):
            return jax.tree.map(jnp.add, acc, jax.grad(loss_fn)(params, *xy)), None

        return lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))[0]

    fn = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P())
    params = [{"w": jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32),
               "b": jax.ShapeDtypeStruct((WIDTH,), jnp.float32)} for _ in range(LAYERS)]
    xs = jax.ShapeDtypeStruct((2, BATCH, WIDTH), jnp.float32)
    ins = shardscope.inspect(fn, params, xs, xs)
    leaves = [f"params{jax.tree_util.keystr(path)}" for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    assert sorted(c.value for c in ins.collectives) == sorted(f"grad({leaf})" for leaf in leaves)
    assert all(c.primitive == "psum_invariant" and c.verdict_kind == "deferrable" for c in ins.collectives)


def test_a_gradients_label_and_its_argument():
    """The one rule, written once: the label wraps the argument's path, and gives it back."""
    assert gradient_label("params['W1']") == "grad(params['W1'])" and gradient_label("W") == "grad(W)"
    assert labelled_argument("grad(params['W1'])") == "params['W1']" and labelled_argument("grad(W)") == "W"
    assert labelled_argument("out[0]['W1']") == "out[0]['W1']" and labelled_argument("x") == "x"


D_IN, HIDDEN, ROWS = 64, 128, 32
"""The sizes of a tensor-parallel MLP whose ``W2`` gradient, split over ``model`` (one device's
``[HIDDEN/2, D_IN]``, 4,096 elements), holds as many elements as the whole gradient of the
hidden activation on that line (``[ROWS, HIDDEN]``): only its shape tells which one it is."""


def _tensor_parallel_arguments(micro_batches: int = 0):
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    specs = {"W1": P(None, "model"), "b1": P("model"), "W2": P("model", None)}
    shapes = {"W1": (D_IN, HIDDEN), "b1": (HIDDEN,), "W2": (HIDDEN, D_IN)}
    params = {k: jax.ShapeDtypeStruct(shapes[k], jnp.float32, sharding=NamedSharding(mesh, specs[k])) for k in specs}
    batch = (micro_batches, ROWS, D_IN) if micro_batches else (ROWS, D_IN)
    rows = P(None, "data") if micro_batches else P("data")
    x = jax.ShapeDtypeStruct(batch, jnp.float32, sharding=NamedSharding(mesh, rows))
    return mesh, specs, params, x


def _mlp_loss(p, x):
    h = jax.nn.relu(x @ p["W1"] + p["b1"])
    return jnp.mean((h @ p["W2"] - x) ** 2)


def _data_sum(ins):
    """The one compiled sum over ``data`` (the forward pass's sum over ``model`` is the other)."""
    (c,) = [c for c in ins.compiled.collectives if c.axes == ("data",)]
    return c


def test_a_gradient_split_over_another_axis_is_named_as_its_argument():
    """``jax.jit``, ``W1``'s columns, ``b1`` and ``W2``'s rows split over ``model``, the batch
    over ``data``. By hand: the sum over ``data`` carries each device's shard of the three
    gradients (``W1``'s ``[64, 64]``, ``b1``'s ``[64]``, ``W2``'s ``[64, 64]``) and the loss; the
    operand that is ``W2``'s is a shard of its ``[64, 128]`` dot, not the activation's gradient."""
    _, _, params, x = _tensor_parallel_arguments()

    @jax.jit
    def step(params, x):
        loss, grads = jax.value_and_grad(_mlp_loss)(params, x)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    c = _data_sum(shardscope.inspect(step, params, x))
    named = sorted((op.shape, op.value) for op in c.operands)
    assert named == sorted([("f32[64,64]", "grad(params['W1'])"), ("f32[64,64]", "grad(params['W2'])"),
                            ("f32[64]", "grad(params['b1'])"), ("f32[]", "loss")])


def test_an_accumulated_split_gradient_is_named_as_its_argument_not_the_update():
    """The same model accumulated over 4 micro-batches in a ``lax.scan``, ``jit`` with in and out
    shardings returning the updated parameters: ``W2``'s gradient is named ``grad(params['W2'])``,
    not the updated ``out[0]['W2']`` it reaches, and the fix names no output as a loss to average."""
    mesh, specs, params, xs = _tensor_parallel_arguments(micro_batches=4)
    shardings = {k: NamedSharding(mesh, s) for k, s in specs.items()}

    def step(params, xs):
        def micro_batch(acc, x):
            l, g = jax.value_and_grad(_mlp_loss)(params, x)
            return (jax.tree.map(jnp.add, acc[0], g), acc[1] + l), None

        (g, l), _ = lax.scan(micro_batch, (jax.tree.map(jnp.zeros_like, params), 0.0), xs)
        return jax.tree.map(lambda p, gg: p - 0.01 * gg / 4, params, g), l / 4

    jitted = jax.jit(step, in_shardings=(shardings, NamedSharding(mesh, P(None, "data"))),
                     out_shardings=(shardings, NamedSharding(mesh, P())))
    c = _data_sum(shardscope.inspect(jitted, params, xs))
    assert sorted(op.value for op in c.operands) == sorted(
        ["grad(params['W1'])", "grad(params['W2'])", "grad(params['b1'])", "l"])
    assert "out[0]" not in (c.verdict.fix or "")
