"""The compiled plan of training steps written as users write them (``tests/_user_programs.py``),
on this JAX, Shardy on and off where the flag exists.

Kinds, instruction counts, loops, runs per call and bytes are recounted from the compiled text
(``_compiled_programs.recount`` and the operand shapes read here); the gradient names are the
programs' own argument paths, written out here; parameter bytes come from the arguments.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import _compiled_programs as programs
import _user_programs as users
from shardscope.engine.hlo.compiled import PARTITIONER, plan_of
from shardscope.engine.joined.inspection import argument_names

CASES = [(users.nnx_train_step, ()), (users.scanned_transformer, (False,)), (users.scanned_transformer, (True,)),
         (users.fori_accumulate, ()), (users.bf16_carry_accumulate, ()), (users.complex_accumulate, ())]
IDS = [f"{b.__name__}{''.join(f'-{k}' for k in key)}" for b, key in CASES]
_BITS = {"f32": 32, "f16": 16, "bf16": 16, "s32": 32, "f64": 64, "pred": 8, "u32": 32, "s64": 64, "c64": 64}


def _plan(builder, key=(), shardy=None):
    case, traced, compiled = programs.compile_case(builder, *key, shardy=shardy)
    plan = plan_of(traced, compiled, input_names=argument_names(case.fn, case.args, {}))
    return case, compiled.as_text(), plan


def _operand_bytes(text: str, name: str) -> int:
    """The per-device bytes of the named instruction's operands, read from their own lines."""
    line = re.search(rf"^\s+(?:ROOT )?%{re.escape(name)} = .*$", text, re.M).group(0)
    args = line.split("(", 1)[1] if " = (" not in line else line[line.index(") ") + 2:].split("(", 1)[1]
    total = 0
    for operand in re.findall(r"%([\w.\-]+)", args.split(")")[0]):
        shape = re.search(rf"^\s+(?:ROOT )?%{re.escape(operand)} = (\S+) ", text, re.M).group(1)
        dtype, dims = re.match(r"(\w+)\[([\d,]*)\]", shape).groups()
        total += int(np.prod([int(d) for d in dims.split(",") if d] or [1])) * _BITS[dtype] // 8
    return total


@pytest.mark.parametrize("shardy", programs.shardy_modes())
@pytest.mark.parametrize("builder,key", CASES, ids=IDS)
def test_counts_runs_and_bytes_match_the_text(builder, key, shardy):
    _, text, plan = _plan(builder, key, shardy)
    recount = programs.recount(text)
    assert sorted(c.kind for c in plan.collectives) == sorted(k for k, n in recount["collectives"].items() for _ in range(n))
    assert sum(1 for c in plan.collectives if c.in_loop) == sum(recount["in_while"].values())
    assert plan.counts() == recount["runs"]
    for c in plan.collectives:
        assert c.bytes_per_execution == _operand_bytes(text, c.name)
        assert c.bytes_per_call == c.executions * c.bytes_per_execution


def _leaf_bytes(tree) -> dict[str, int]:
    return {jax.tree_util.keystr(path): np.asarray(leaf).nbytes for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_an_nnx_train_step_sums_every_parameter_once_per_micro_batch(shardy):
    """nnx.jit, nnx.Linear, optax adamw: one combined all-reduce of the four parameters'
    gradients in the scan over 4 micro-batches; the optimizer's update after it sums nothing."""
    from flax import nnx

    case, text, plan = _plan(users.nnx_train_step, (), shardy)
    (c,) = plan.collectives
    params = nnx.state(case.args[0], nnx.Param)
    assert c.loop_trip_counts == (programs.MICRO,) and c.written_by == PARTITIONER
    assert c.bytes_per_execution == sum(_leaf_bytes(params).values()) == (16 * 32 + 32 + 32 * 8 + 8) * 4
    assert sorted(op.value for op in c.operands) == [
        "grad(model.hidden.bias.value)", "grad(model.hidden.kernel.value)", "grad(model.out.bias.value)",
        "grad(model.out.kernel.value)"]
    assert c.verdict.kind == "deferrable" and c.verdict.executions_after == 1
    # the line is the user's that called the layer, not flax's nnx.Linear.__call__ in site-packages
    flax_file = re.search(r'"([^"]*site-packages/flax/[^"]*)"', text)
    assert flax_file, "the module's stack frames name flax's own file"
    assert c.source.startswith("_user_programs.py:") and c.loops[0].source.startswith("_user_programs.py:"), c.source


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_a_scanned_rematted_transformer_sums_each_layers_gradients_in_both_loops(shardy):
    """Data parallel: the stacked layers' gradients are summed per layer in the backward scan over
    layers (3) inside the micro-batch scan (4), and the embedding's in the micro-batch scan; each
    is named as its parameter's gradient and deferrable out of every loop it runs in."""
    case, text, plan = _plan(users.scanned_transformer, (False,), shardy)
    layers, embed = sorted(plan.collectives, key=lambda c: -len(c.loops))
    assert layers.loop_trip_counts == (programs.MICRO, users.LAYERS) and embed.loop_trip_counts == (programs.MICRO,)
    assert {op.value for op in layers.operands} == {f"grad(params['layers']['{name}'])" for name in case.args[0]["layers"]}
    assert {op.value for op in embed.operands} == {"grad(params['embed'])"}
    assert layers.verdict.kind == embed.verdict.kind == "deferrable" and layers.verdict.executions_after == 1
    stacked = sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(case.args[0]["layers"])) // users.LAYERS
    assert layers.bytes_per_execution == stacked  # one layer's slice of every stacked parameter


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_fsdp_layers_gather_their_weights_inside_both_loops(shardy):
    """FSDP: the layers' weights are gathered in the layer scans, for each micro-batch. Shardy
    gathers each weight (named after the stacked parameter it gathers); GSPMD gathers
    activations and sums partial products instead (counted above, unnamed here)."""
    case, text, plan = _plan(users.scanned_transformer, (True,), shardy)
    gathers = [c for c in plan.collectives if c.kind == "all-gather"]
    assert gathers and all(c.in_loop for c in gathers)
    named = {c.value for c in gathers if c.value.startswith("params['layers']")}
    assert named <= {f"params['layers']['{name}']" for name in case.args[0]["layers"]}
    if shardy is not False:
        weights = {f"params['layers']['{name}']" for name in ("wq", "wk", "wv", "wo", "w1", "w2")}
        assert weights <= named
        assert all(c.loop_trip_counts == (programs.MICRO, users.LAYERS) for c in gathers if c.value in weights)


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_a_fori_loop_accumulation_is_a_counted_loop(shardy):
    _, text, plan = _plan(users.fori_accumulate, (), shardy)
    (c,) = plan.collectives
    assert c.loop_trip_counts == (programs.MICRO,) and c.executions == programs.MICRO
    assert {op.value for op in c.operands} == {"grad(params['W'])", "grad(params['V'])"} and c.verdict.kind == "deferrable"


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_a_bfloat16_accumulator_defers_to_one_sum_of_half_the_bytes(shardy):
    """The sum runs in float32 (the gradients), the carry holds bfloat16: deferred, one sum of the
    bfloat16 accumulator, (16*32 + 32*8) * 2 bytes."""
    _, text, plan = _plan(users.bf16_carry_accumulate, (), shardy)
    (c,) = plan.collectives
    assert c.bytes_per_execution == (16 * 32 + 32 * 8) * 4 and c.verdict.kind == "deferrable"
    assert f"one all-reduce of the {(16 * 32 + 32 * 8) * 2:,} B accumulator" in c.verdict.reason


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_a_complex_parameters_gradient_sum_is_deferrable(shardy):
    """A sum of complex numbers commutes with the sum over iterations as a real one does."""
    _, text, plan = _plan(users.complex_accumulate, (), shardy)
    (c,) = plan.collectives
    assert c.operands[0].shape in ("c64[16,8]", "c64[8,16]") and c.bytes_per_execution == 16 * 8 * 8  # may be transposed
    assert c.value == "grad(W)" and c.verdict.kind == "deferrable" and c.executions == programs.MICRO
