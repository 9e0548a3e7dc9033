"""Sums over ``model`` in a tensor-parallel training step: what they carry, and where a target puts them.

The step (jit, NamedShardings over a ``data=4 x model=2`` mesh, nested-dict parameters, rmsnorm,
micro-batches in a ``lax.scan``) sums over ``model`` the partial per-token sums of each rmsnorm's
backward pass (a ``reduce_sum`` of ``[batch/4, seq]``) and the activations' gradients; over ``data``
the parameters' gradients. Which is which is read here from the module compiled here: each
collective's replica groups (2 devices: ``model``, 4: ``data``), its shape and its metadata, and the
parameters' shapes are written below by hand. Never from shardscope's own output.
"""

from __future__ import annotations

import re
from itertools import permutations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh as JaxMesh, NamedSharding, PartitionSpec as P

from _target_programs import Built
from _tpu_text import collectives, replica_group_size
from shardscope.engine.pytree_paths import is_gradient_label, labelled_argument
from shardscope.pipeline.one_program import inspect, inspect_on
from test_target_verdicts import _on_target
from test_targets import needs_libtpu

V, D, F, T, LAYERS = 256, 64, 256, 8, 2  # vocab, model width, MLP width, sequence, layers
MICRO, BATCH = 4, 16  # micro-batches, rows per micro-batch (over data=4: 4 rows per device)


def _rmsnorm(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def _block(p, x):
    h = _rmsnorm(x, p["ln"])
    q, k, v = h @ p["attn"]["wq"], h @ p["attn"]["wk"], h @ p["attn"]["wv"]
    a = jax.nn.softmax(jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(D), axis=-1)
    x = x + jnp.einsum("bts,bsd->btd", a, v) @ p["attn"]["wo"]
    h = _rmsnorm(x, p["ln"])
    return x + jax.nn.gelu(h @ p["mlp"]["w1"] + p["mlp"]["b1"]) @ p["mlp"]["w2"]


def _loss(p, tok, tgt):
    x = p["embed"][tok]
    for i in range(LAYERS):
        x = _block(p["layers"][f"l{i}"], x)
    logp = jax.nn.log_softmax(_rmsnorm(x, p["final_ln"]) @ p["embed"].T)
    return -jnp.mean(jnp.take_along_axis(logp, tgt[..., None], -1))


SHAPES = {"embed": ((V, D), P(None, "model")), "final_ln": ((D,), P()),
          **{f"layers/l{i}/{path}": spec for i in range(LAYERS) for path, spec in {
              "attn/wq": ((D, D), P(None, "model")), "attn/wk": ((D, D), P(None, "model")),
              "attn/wv": ((D, D), P(None, "model")), "attn/wo": ((D, D), P("model", None)),
              "mlp/w1": ((D, F), P(None, "model")), "mlp/b1": ((F,), P("model")),
              "mlp/w2": ((F, D), P("model", None)), "ln": ((D,), P())}.items()}}
"""Each parameter's global shape and sharding, by its path."""


def _label(path: str) -> str:
    """``params['layers']['l0']['ln']`` of ``layers/l0/ln``."""
    return "params" + "".join(f"[{part!r}]" for part in path.split("/"))


def rms_transformer_step(mesh: JaxMesh) -> Built:
    """The step over ``mesh`` (``data`` x ``model``): SGD on the micro-batches' summed gradient."""
    params: dict = {}
    for path, (shape, spec) in SHAPES.items():
        *parents, leaf = path.split("/")
        node = params
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
    tokens = jax.ShapeDtypeStruct((MICRO, BATCH, T), jnp.int32, sharding=NamedSharding(mesh, P(None, "data", None)))

    @jax.jit
    def train_step(params, tokens, targets):
        def micro(carry, batch):
            loss_acc, g_acc = carry
            loss, g = jax.value_and_grad(_loss)(params, *batch)
            return (loss_acc + loss, jax.tree.map(jnp.add, g_acc, g)), None

        zero = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
        (loss, grads), _ = lax.scan(micro, zero, (tokens, targets))
        return jax.tree.map(lambda p, g: p - 1e-3 * g / MICRO, params, grads), loss / MICRO

    return Built(train_step, (params, tokens, tokens))


def _cpu_mesh() -> JaxMesh:
    return JaxMesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))


_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+(all-reduce|all-gather|reduce-scatter|all-to-all)"
                   r"(?:-start)?\(")


def _instructions(text: str) -> dict[str, tuple[str, str, int]]:
    """Each collective instruction of the module's text by name: its shape, its line and the
    devices per replica group (2: ``model``, 4: ``data``)."""
    found = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            found[match.group(1)] = (match.group(2), line, replica_group_size(line))
    return found


def _per_device_dims(shape: str) -> tuple[int, ...]:
    (dims,) = re.findall(r"\[([\d,]*)\]", shape)
    return tuple(int(d) for d in dims.split(",") if d)


def _is_shard_of(part: tuple[int, ...], whole: tuple[int, ...]) -> bool:
    """One device's piece of ``whole``: as many dimensions, each dividing the whole's, in any order
    (a compiler may write a gradient transposed)."""
    return len(part) == len(whole) and any(all(w % p == 0 for w, p in zip(whole, order)) for order in permutations(part))


def test_the_sums_over_model_of_the_norms_backward_pass_are_no_parameters_gradient():
    """Each rmsnorm's backward pass sums over ``model`` (an all-reduce over groups of 2 in the while
    body, of ``f32[4,8]``: one per token of the device's 4 rows, whose metadata says
    ``transpose(jvp())/reduce_sum``): an activation's partial sum, named by no parameter's gradient
    (the embedding's, as it was, is ``[256, 32]`` per device). Every value the step's collectives do
    name as a parameter's gradient has a shard of that parameter's shape."""
    built = rms_transformer_step(_cpu_mesh())
    text = built.fn.trace(*built.args).lower().compile().as_text()
    found = _instructions(text)
    norm_sums = {name for name, (shape, line, size) in found.items()
                 if size == 2 and shape.startswith(f"f32[{BATCH // 4},{T}]")
                 and re.search(r'op_name="[^"]*transpose\([^"]*/reduce_sum"', line)}
    assert len(norm_sums) >= 2 * LAYERS, sorted(found)  # two norms per layer (and the final one)

    inspection = inspect(built.fn, *built.args)
    compiled = {p.compiled.name: p.compiled for p in inspection.paired if p.compiled is not None}
    assert norm_sums <= set(compiled), (norm_sums, sorted(compiled))
    for name in norm_sums:
        values = [op.value for op in compiled[name].operands]
        assert not any(is_gradient_label(v) for v in values), (name, values)

    shapes = {_label(path): shape for path, (shape, _) in SHAPES.items()}
    for c in compiled.values():
        for op in c.operands:
            if is_gradient_label(op.value) and labelled_argument(op.value) in shapes:
                whole = shapes[labelled_argument(op.value)]
                assert _is_shard_of(_per_device_dims(op.shape), whole), (c.name, op.value, op.shape, whole)


_SUM_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*\sall-reduce(?:-start)?\(.*)$")
"""An all-reduce's whole line (shape first), for :func:`_tpu_text.collectives` to place in its loops."""


def _leaves(shape: str) -> tuple[str, ...]:
    """``("f32[64,32]", "f32[32]")`` of a shape's text, layouts left out, in order."""
    return tuple(re.findall(r"\w+\[[\d,]*\]", shape))


@needs_libtpu
def test_no_sum_over_model_is_placed_into_a_target_collective_over_data():
    """On ``tpu:v5e:2x4`` each CPU sum is placed only into target sums over the same devices: a sum
    over ``model`` (groups of 2 in the CPU's text) never into one over ``data`` (the sum XLA:TPU
    moves out of the micro-batch loop, groups of 4 in the TPU's text, carries weight gradients
    only), and each CPU sum over ``data`` the same way round. The two compiles number their
    instructions apart, so a target sum is found in the TPU's text by what it carries (its
    operands' shapes, in order)."""
    target = "tpu:v5e:2x4"
    built = rms_transformer_step(_cpu_mesh())
    cpu = _instructions(built.fn.trace(*built.args).lower().compile().as_text())
    tpu_sums = {(_leaves(shape), size) for shape, line, size in
                _instructions(_on_target(rms_transformer_step, target, "data=4,model=2")).values()
                if " all-reduce(" in line or " all-reduce-start(" in line}
    assert {size for _, size in tpu_sums} == {2, 4}, tpu_sums

    inspection = inspect_on(target, built.fn, built.args, {})
    (plan,) = inspection.targets
    over_model = 0
    for placement in plan.comparison.placements:
        if placement.collective.kind != "all-reduce":
            continue
        groups = cpu[placement.collective.name][2]
        over_model += groups == 2
        for t in placement.target:
            carried = tuple(op.shape for op in t.operands)
            assert (carried, groups) in tpu_sums, (placement.describe(), carried, groups)
    assert over_model >= 2 * LAYERS


@needs_libtpu
def test_the_gradients_the_target_sums_after_the_loop_are_named_by_their_parameters():
    """XLA:TPU moves the weights' gradient sum out of the micro-batch loop (an all-reduce over groups
    of 4 outside every while body of the TPU's text) and keeps the embedding's two (``[256, 32]``
    per device: the lookup's and the logits') in the loop. Each operand of the moved sum is named
    as the gradient of a parameter of its shape, the MLP's matmuls included (XLA:TPU writes them
    ``[64, 128, 1]``); the CPU's sum of ``grad(params['embed'])`` is placed only into target
    collectives that stay in the loop, and into none over other devices."""
    target = "tpu:v5e:2x4"
    text = _on_target(rms_transformer_step, target, "data=4,model=2")
    depths = collectives(text, _SUM_LINE)
    outside = [line for line, depth in depths if not depth]
    assert len(outside) == 1 and replica_group_size(outside[0]) == 4, outside
    leaves = _leaves(outside[0].split(" all-reduce")[0])
    embed_shard = f"f32[{V},{D // 2}]"
    assert embed_shard not in leaves and f"f32[{D},{F // 2}]" in leaves, leaves
    assert any(embed_shard in _leaves(line.split(" all-reduce")[0]) for line, depth in depths if depth), depths

    built = rms_transformer_step(_cpu_mesh())
    inspection = inspect_on(target, built.fn, built.args, {})
    (plan,) = inspection.targets
    (hoisted,) = [c for c in plan.compiled.collectives if not c.loops and c.kind == "all-reduce"]
    shapes = {_label(path): shape for path, (shape, _) in SHAPES.items()}
    for op in hoisted.operands:
        assert is_gradient_label(op.value), (op.shape, op.value)
        assert _is_shard_of(_per_device_dims(op.shape), shapes[labelled_argument(op.value)]), (op.shape, op.value)
    assert {f"grad({_label(f'layers/l{i}/mlp/{w}')})" for i in range(LAYERS) for w in ("w1", "w2")} <= \
        {op.value for op in hoisted.operands}

    embed = "grad(params['embed'])"
    carriers = [t for p in plan.comparison.placements for name, t in p.carriers if name == embed]
    assert carriers and all(t.loops for t in carriers), [(t.name, t.loops) for t in carriers]

    # the sums over data that stay in the loop (the embedding's, each layer's ln: its two uses
    # added before the sum) carry the parameters' gradients too, each of its own shape, and the loss
    sums = {(_leaves(shape), size) for shape, line, size in _instructions(text).values() if " all-reduce(" in line}
    over_data = [c for c in plan.compiled.collectives if c.kind == "all-reduce" and c.loops
                 and (tuple(op.shape for op in c.operands), 4) in sums]
    named = [op.value for c in over_data for op in c.operands if op.shape != "f32[]"]
    assert named and all(is_gradient_label(v) for v in named), named
    assert {f"grad({_label(f'layers/l{i}/ln')})" for i in range(LAYERS)} <= set(named), named


def rms_transformer_deferred_step(mesh: JaxMesh) -> Built:
    """The step with its micro-batch loop inside a ``shard_map`` over ``data`` alone (``model`` left
    to the partitioner): the parameters cast to varying, one ``lax.pmean`` of each gradient after
    the loop."""
    params, tokens, _ = rms_transformer_step(mesh).args

    def local_grads(params, tokens, targets):
        varying = jax.tree.map(lambda p: lax.pcast(p, "data", to="varying"), params)

        def micro(acc, batch):
            return jax.tree.map(jnp.add, acc, jax.grad(_loss)(varying, *batch)), None

        grads, _ = lax.scan(micro, jax.tree.map(jnp.zeros_like, varying), (tokens, targets))
        return jax.tree.map(lambda g: lax.pmean(g, "data"), grads)

    @jax.jit
    def train_step(params, tokens, targets):
        grads = jax.shard_map(local_grads, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")),
                              out_specs=P(), axis_names={"data"})(params, tokens, targets)
        return jax.tree.map(lambda p, g: p - 1e-3 * g / MICRO, params, grads)

    return Built(train_step, (params, tokens, tokens))


def test_an_all_to_all_the_partitioner_adds_after_a_pmean_is_the_partitioners():
    """The program writes sums (``lax.pmean`` over ``data``) and no all-to-all. The partitioner
    reshards some of the summed gradients over ``model`` with all-to-alls (groups of 2 in the
    module compiled here) that carry the pmean's ``op_name`` (``.../psum_invariant``): each is
    written by the partitioner, none by the program."""
    built = rms_transformer_deferred_step(_cpu_mesh())
    found = _instructions(built.fn.trace(*built.args).lower().compile().as_text())
    exchanges = {name for name, (_, line, size) in found.items() if " all-to-all(" in line}
    assert any(re.search(r'op_name="[^"]*/psum(_invariant)?"', found[name][1]) for name in exchanges), exchanges

    inspection = inspect(built.fn, *built.args)
    authors = {p.compiled.name: p.compiled.written_by for p in inspection.paired if p.compiled is not None}
    assert exchanges <= set(authors), (exchanges, authors)
    assert {authors[name] for name in exchanges} == {"partitioner"}, authors
