"""What check says of each collective on a target: its value as the program names it, its axes,
its line, and a verdict cell that reads as the CPU's table does.

Expected values come from the module compiled here (which collectives sit in while bodies,
their replica groups and metadata) and from the program's own source (the lines its values are
written on), never from shardscope's output.
"""

from __future__ import annotations

import inspect as python_inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh as JaxMesh
from rich.console import Console

import _target_verdict_programs as programs
import shardscope
from _tpu_text import all_reduces, collectives
from shardscope.pipeline.one_program import inspect_on
from shardscope.render.findings import collectives_table
from shardscope.render.targets import placements_table
from test_gpu_targets import needs_plugin
from test_target_verdicts import _WHOLE_ALL_REDUCE, _on_target
from test_targets import needs_libtpu


def _table_rows(table) -> list[list[str]]:
    console = Console(width=400, record=True)
    console.print(table)
    return [[c.strip() for c in line.split("│")][1:-1] for line in console.export_text().splitlines()
            if line.startswith("│")]


def _cpu_rows(table) -> list[list[str]]:
    console = Console(width=400, record=True)
    console.print(table)
    return [line.split() for line in console.export_text().splitlines() if line.strip()[:1].isdigit()]


# --- item 12: a collective outside every loop reads the same in both tables -----------------

@needs_libtpu
def test_a_collective_outside_every_loop_has_no_loop_verdict_on_the_target_as_on_the_cpu():
    """The TPU moves the gradients' sum out of the micro-batch loop (counted in the module compiled
    here: an all-reduce at depth 0): its row in the target's table says ``-`` for the verdict,
    as the CPU's findings table does for every collective outside loops."""
    target = "tpu:v5e:2x4"
    found = all_reduces(_on_target(programs.worst_loss_adamw, target))
    outside = [shape for shape, depth in found if not depth]
    assert outside and any(depth for _, depth in found), found

    built = programs.worst_loss_adamw(JaxMesh(np.array(jax.devices()[:8]), ("data",)))
    inspection = inspect_on(target, built.fn, built.args, {})
    (plan,) = inspection.targets
    rows = [row for row in _table_rows(placements_table([("train_step", plan)], "program")) if row[0] == "train_step"]
    header = ["program", "collective", "value", "loops", "runs/call", "verdict"]
    loops, verdict = header.index("loops"), header.index("verdict")
    assert len([r for r in rows if r[loops] == "-"]) == len(outside), rows
    for row in rows:
        assert (row[verdict] == "-") == (row[loops] == "-"), row

    cpu = _cpu_rows(collectives_table(inspection.paired))  # the CPU's convention, the same rule
    for row in cpu:
        assert (row[-1] == "-") == (row[3] == "-"), row


# --- item 8: the fix on a target fixes what stays there; the shard_map route is whole ----------

def _assigned_loss(builder) -> str:
    """The variable ``builder``'s step assigns its loss to: the first target of its
    ``jax.value_and_grad(...)`` line (``loss`` of ``loss, g = ...``), read from its source."""
    (name,) = re.findall(r"(\w+), \w+ = jax\.value_and_grad\(", python_inspect.getsource(builder))
    return name


def _spec_words(arg) -> str:
    """``P(None, 'data')``: the one spec of an argument's leaves, as a user writes it."""
    specs = {tuple(leaf.sharding.spec) for leaf in jax.tree.leaves(arg)}
    (spec,) = specs
    return "P(" + ", ".join("None" if e is None else repr(e) for e in spec) + ")"


@needs_libtpu
def test_the_loss_the_tpu_keeps_in_the_loop_gets_its_own_fix_there(tmp_path, shardscope_cli):
    """The TPU moves the gradients' sum out of the loop and keeps the loss's (one scalar
    all-reduce in a while body, counted here): check prints the target's fix for that sum, the
    loss accumulated per device and summed once, with no cast of the parameters in it."""
    import math

    from test_target_verdicts import _elements, _program_file
    from test_target_verdicts import _ALL_REDUCE

    target = "tpu:v5e:2x4"
    in_loops = [shape for shape, depth in collectives(_on_target(programs.total_loss_adamw, target), _ALL_REDUCE) if depth]
    assert [_elements(shape) for shape in in_loops] == [1]
    built = programs.total_loss_adamw(JaxMesh(np.array(jax.devices()[:8]), ("data",)))
    specs = "(" + ", ".join(_spec_words(a) for a in built.args) + ")"
    devices = math.prod(built.args[2].sharding.mesh.shape.values())

    loss = _assigned_loss(programs.total_loss_adamw)
    path = _program_file(tmp_path, "total_loss_adamw", 8)
    words = " ".join(shardscope_cli("check", path, "--target", target).stdout.split())
    fix = words.split(f"train_step: fix on v5e:2x4 for its all-reduce of {loss}: ", 1)[1].split(" train_step: ")[0]
    assert "pcast" not in fix and "reduced={'data'})), params)" not in fix
    assert f"add each iteration's {loss} into an accumulator started unreduced" in fix
    assert f"in_specs={specs}" in fix
    assert f"where each device adds its own {loss} into the accumulator and lax.psum(acc, 'data') / {devices} runs once" in fix


def test_the_shard_map_route_has_one_spec_per_argument_and_sums_the_loss():
    """jit + shardings, a loss summed over 4 micro-batches beside the gradients: on the CPU one
    combined all-reduce carries both. The fix's shard_map has one in_spec per argument of
    ``train_step`` (its signature, read here, and each argument's own sharding) and says that the
    loss, then each device's own, needs its psum over ``data`` and the division by its 8 devices."""
    import math

    import shardscope

    built = programs.total_loss_adamw(JaxMesh(np.array(jax.devices()[:8]), ("data",)))
    assert len(python_inspect.signature(built.fn).parameters) == len(built.args) == 4
    specs = "(" + ", ".join(_spec_words(a) for a in built.args) + ")"
    devices = math.prod(built.args[2].sharding.mesh.shape.values())
    inspection = shardscope.inspect(built.fn, *built.args)
    (c,) = [c for c in inspection.paired if c.in_loop]
    fix = " ".join(c.verdict.fix.split())
    assert f"jax.shard_map(step, mesh=mesh, in_specs={specs}, out_specs=P()" in fix
    assert "lax.pcast(params, 'data', to='varying')" in fix
    loss = _assigned_loss(programs.total_loss_adamw)
    assert f"each device's {loss} covers its own shard of the batch only: return lax.psum(it, 'data') / {devices}" in fix


# --- item 7: a gradient the target sums after the loop is named as the CPU's is ----------------

LAYERS, D, F = 4, 32, 64


def _layer_norm(h, scale):
    mu = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.var(h, axis=-1, keepdims=True)
    return (h - mu) * jax.lax.rsqrt(var + 1e-5) * scale


def _stacked_forward(params, x):
    def block(h, layer):
        w_in, w_out, ln = layer
        return h + jax.nn.gelu(_layer_norm(h, ln) @ w_in) @ w_out, None

    h, _ = jax.lax.scan(block, x, (params["w_in"], params["w_out"], params["ln"]))
    return jnp.mean(h ** 2)


def stacked_norm_step(mesh):
    """A tensor-parallel layer scan (``w_in`` by columns, ``w_out`` by rows over ``model``) with a
    layer-norm scale per layer (``ln``, stacked and replicated), the batch over ``data``."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    params = {"w_in": jax.ShapeDtypeStruct((LAYERS, D, F), jnp.float32, sharding=NamedSharding(mesh, P(None, None, "model"))),
              "w_out": jax.ShapeDtypeStruct((LAYERS, F, D), jnp.float32, sharding=NamedSharding(mesh, P(None, "model", None))),
              "ln": jax.ShapeDtypeStruct((LAYERS, D), jnp.float32, sharding=NamedSharding(mesh, P()))}
    x = jax.ShapeDtypeStruct((16 * mesh.shape["data"], D), jnp.float32, sharding=NamedSharding(mesh, P("data")))

    @jax.jit
    def train_step(params, x):
        loss, grads = jax.value_and_grad(_stacked_forward)(params, x)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    return programs.Built(train_step, (params, x))


@pytest.mark.parametrize("target", [pytest.param("gpu:h100:8", marks=needs_plugin),
                                    pytest.param("tpu:v5e:2x4", marks=needs_libtpu)])
def test_a_stacked_norm_gradient_the_target_sums_after_the_layer_loop_is_named_as_its_gradient(target):
    """The target sums the stacked ``ln`` gradient (4 x 32 elements, one slot per layer) once,
    after the layer loop, with the loss (the all-reduces outside every while body of the module
    compiled here carry 4 x 32 + 1 elements): it is ``grad(params['ln'])``, as on the CPU, not
    the output it reaches."""
    from test_target_verdicts import _elements

    text = _on_target(stacked_norm_step, target, "data=4,model=2")
    outside = [line for line, depth in collectives(text, _WHOLE_ALL_REDUCE) if not depth]
    assert sum(_elements(line.split(" all-reduce")[0]) for line in outside) == LAYERS * D + 1, outside

    built = stacked_norm_step(JaxMesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model")))
    inspection = inspect_on(target, built.fn, built.args, {})
    (plan,) = inspection.targets
    hoisted = [c for c in plan.compiled.collectives if not c.loops and c.kind == "all-reduce"]
    values = [op.value for c in hoisted for op in c.operands]
    assert "grad(params['ln'])" in values, values
    assert not any(v.startswith("out[0]") for v in values), values


# --- a gradient the target writes transposed is named as the CPU names it ---------------------

D_IN, D_H, D_OUT = 16, 32, 8


def _two_layer_loss(params, x):
    h = jnp.tanh(x @ params["enc"]["W"])
    return jnp.mean((h @ params["head"]["W"]) ** 2)


def two_layer_accumulate(mesh):
    """Gradient accumulation over a ``data x model`` mesh: ``enc.W`` split by columns and ``head.W``
    by rows over ``model``, the micro-batches over ``data``."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    params = {"enc": {"W": jax.ShapeDtypeStruct((D_IN, D_H), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))},
              "head": {"W": jax.ShapeDtypeStruct((D_H, D_OUT), jnp.float32,
                                                 sharding=NamedSharding(mesh, P("model", None)))}}
    xs = jax.ShapeDtypeStruct((4, 8 * mesh.shape["data"], D_IN), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))

    @jax.jit
    def train_step(params, xs):
        def micro(acc, x):
            return jax.tree.map(jnp.add, acc, jax.grad(_two_layer_loss)(params, x)), None
        return jax.lax.scan(micro, jax.tree.map(jnp.zeros_like, params), xs)[0]

    return programs.Built(train_step, (params, xs))


@needs_libtpu
def test_a_pytree_gradient_the_tpu_writes_transposed_is_named_as_on_the_cpu():
    """XLA:TPU sums both gradients once, after the micro-batch loop (the one all-reduce outside every
    while body of the module compiled here carries f32[16,16] and f32[16,8]: enc.W's [16, 32/2] and
    head.W's [32/2, 8] per device), and writes head.W's gradient in that layout straight from its
    matmul, where the jaxpr's ``dot_general`` makes it [8, 32] and a ``transpose`` follows. Its
    operand is ``grad(params['head']['W'])``, as the CPU's sum names it and as the placement table
    beside it says, not the source line nor ``enc.W``'s gradient (the activation's gradient of the
    same line is the only equation that fits [16, 8] in order)."""
    target = "tpu:v5e:2x4"
    text = _on_target(two_layer_accumulate, target, "data=4,model=2")
    (outside,) = [shape for shape, depth in all_reduces(text) if not depth]
    shapes = [leaf.split("{")[0] for leaf in re.findall(r"f32\[[\d,]*\](?:\{[^}]*\})?", outside)]
    assert shapes == ["f32[16,16]", "f32[16,8]"], outside
    head = "grad(params['head']['W'])"

    built = two_layer_accumulate(JaxMesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model")))
    inspection = inspect_on(target, built.fn, built.args, {})
    (plan,) = inspection.targets
    (summed,) = [c for c in plan.compiled.collectives if not c.loops and c.kind == "all-reduce"]
    assert [op.value for op in summed.operands] == ["grad(params['enc']['W'])", head]
    cpu_values = [op.value for c in inspection.paired if c.in_loop and c.compiled is not None for op in c.compiled.operands]
    assert head in cpu_values, cpu_values


# --- item 7: a loss only the target keeps in the loop is named as the step assigns it ---------

@pytest.mark.parametrize("target", [pytest.param("gpu:h100:8", marks=needs_plugin),
                                    pytest.param("tpu:v5e:2x4", marks=needs_libtpu)])
def test_the_loss_the_target_keeps_in_the_loop_is_named_as_the_step_assigns_it(target):
    """The target moves the gradients' sum out of the micro-batch loop and keeps the loss's (one
    scalar all-reduce in a while body of the module compiled here). That sum is named by the
    variable the step assigns the loss to (``loss, g = jax.value_and_grad(_mlp_loss)(...)``), at
    the line of the mean ``_mlp_loss`` returns, not by the output it reaches (``out[2]``); the
    CPU's combined sum names its scalar the same."""
    from test_target_verdicts import _ALL_REDUCE, _elements

    text = _on_target(programs.total_loss_adamw, target)
    assert [_elements(shape) for shape, depth in collectives(text, _ALL_REDUCE) if depth] == [1]
    loss = _assigned_loss(programs.total_loss_adamw)
    lines, start = python_inspect.getsourcelines(programs._mlp_loss)
    (mean,) = [start + k for k, line in enumerate(lines) if "return jnp.mean(" in line]

    built = programs.total_loss_adamw(JaxMesh(np.array(jax.devices()[:8]), ("data",)))
    inspection = inspect_on(target, built.fn, built.args, {})
    (plan,) = inspection.targets
    (kept,) = [c for c in plan.compiled.collectives if c.loops]
    assert [op.value for op in kept.operands] == [loss]
    assert kept.source == f"_target_verdict_programs.py:{mean} (_mlp_loss)"
    (combined,) = [c.compiled for c in inspection.paired if c.in_loop]
    assert [op.value for op in combined.operands if op.shape.startswith("f32[]")] == [loss]


# --- item 7: the activation's gradient FSDP reshards in the backward pass --------------------

def _tanh_operand() -> str:
    """The operand of the ``jnp.tanh(...)`` that ``_target_programs.fsdp_accumulate``'s loss
    returns the mean of, as its source writes it (``xb @ p['w1']``)."""
    import ast

    import _target_programs

    source = python_inspect.getsource(_target_programs.fsdp_accumulate)
    (call,) = [node for node in ast.walk(ast.parse(source.strip()))
               if isinstance(node, ast.Call) and ast.unparse(node.func) == "jnp.tanh"]
    return ast.unparse(call.args[0])


@pytest.mark.parametrize("target", [None, pytest.param("gpu:h100:8", marks=needs_plugin),
                                    pytest.param("tpu:v5e:2x4", marks=needs_libtpu)])
def test_the_activation_gradient_fsdp_reshards_is_named_as_the_gradient_of_what_the_line_writes(target):
    """FSDP (``w1`` sharded over ``data`` by rows): in the backward pass the partitioner reshards
    the gradient of the tanh's operand (``jnp.tanh(xb @ p['w1'])``'s jvp, transposed) before
    the ``w1`` gradient's matmul, with all-to-alls and an all-gather in the loop (counted in
    the module compiled here). That value is ``grad(xb @ p['w1'])``, as the transpose of a
    ppermute is ``grad(y)``, not the output it reaches (``out['w1']``). (The targets also move
    the tanh's derivative, ``1 - y**2``, a step JAX adds for the backward pass that the line does
    not name: it keeps the output's name.)"""
    import _target_programs

    mesh = JaxMesh(np.array(jax.devices()[:8]), ("data",))
    built = _target_programs.fsdp_accumulate(mesh)
    if target is None:  # the CPU's own plan
        text = built.fn.trace(*built.args).lower().compile().as_text()
        compiled = shardscope.inspect(built.fn, *built.args).compiled
    else:
        text = _on_target(_target_programs.fsdp_accumulate, target)
        (plan,) = inspect_on(target, built.fn, built.args, {}).targets
        compiled = plan.compiled
    moves = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+(?:all-to-all|all-gather)(?:-start)?\(")
    assert [depth for _, depth in collectives(text, moves) if depth], text
    values = [op.value for c in compiled.collectives if c.kind in ("all-to-all", "all-gather") for op in c.operands]
    assert f"grad({_tanh_operand()})" in values, values
    if target is None:  # every value the CPU moves has the program's name (a target may move the
        assert not [v for v in values if v.startswith("out")], values  # tanh's 1 - y**2, which has none)


@needs_libtpu
def test_a_merged_sum_of_complex_gradients_the_tpu_moves_out_of_the_loop_carries_every_one(shardscope_cli):
    """XLA:TPU all-reduces a complex gradient as its real and imaginary parts and moves the rbm
    demo's merged sum out of the chunk loop: the one instruction carries the three gradients (no
    row for a sum 'no instruction carries'), each named, its bytes theirs."""
    import json

    result = shardscope_cli("check", "rbm", "--target", "tpu:v5e:2x4", "-d", "8", "--json")
    assert result.returncode == 0, result.stderr
    naive = next(p for p in json.loads(result.stdout)["programs"] if p["function"] == "rbm[naive]")
    rows = naive["targets"]["tpu:v5e:2x4"]["compiled_collectives"]
    (row,) = [r for r in rows if r["kind"] == "all-reduce"]
    sites, hidden = 12, 24  # demos/rbm.py: a (SITES,), b (HIDDEN,), W (SITES, HIDDEN), complex64
    by_hand = {"a": np.dtype(np.complex64).itemsize * sites, "b": np.dtype(np.complex64).itemsize * hidden,
               "W": np.dtype(np.complex64).itemsize * sites * hidden}
    assert row["bytes"] == sum(by_hand.values()) and row["executions"] == 1 and not row["loops"]
    assert len(row["equations"]) == 3 and not naive["targets"]["tpu:v5e:2x4"]["findings"]
    assert sorted(set(row["values"])) == [f"grad(params['{k}'])" for k in ("W", "a", "b")]
    assert row["operands"] == 6  # each gradient's real and imaginary parts
    assert [r for r in rows if r["verdict"] == "dead"] == []
