"""A verdict on a target judges what that target's compiler leaves in its loops, value by value.

Every expected number comes from the program compiled here for the target's own devices by
JAX's route (``jit(...).trace(...).lower().compile()``) and read in this file: which
all-reduces run inside while bodies, their shapes and how often; never from shardscope's output.
"""

from __future__ import annotations

import json
import math
import re

import jax
import numpy as np
import pytest
from jax.sharding import Mesh as JaxMesh

import _target_verdict_programs as programs
from _tpu_text import collectives
from shardscope import testing
from shardscope.plans.mesh import Mesh
from shardscope.targets import compile as targets, gpu as gpu_target, registry
from test_gpu_targets import needs_plugin
from test_targets import needs_libtpu

ON_EVERY_TARGET = [pytest.param("gpu:h100:8", marks=needs_plugin), pytest.param("tpu:v5e:2x4", marks=needs_libtpu),
                   pytest.param("gpu:a100:4", marks=needs_plugin)]

_ALL_REDUCE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+all-reduce(?:-start)?\(")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _devices(target: str):
    return registry.load_target(registry.parse_target(target))


def _on_target(builder, target: str, mesh: str | None = None) -> str:
    """The module of ``builder``'s program written against the target's own devices, compiled by JAX."""
    devices = _devices(target)
    jax_mesh = targets.target_mesh(devices, Mesh.parse(mesh) if mesh else None, axis="data")
    built = builder(jax_mesh)
    lowered = built.fn.trace(*built.args).lower()
    with gpu_target.cpu_platforms():
        return lowered.compile().as_text()


def _cpu_mesh(count: int) -> JaxMesh:
    return JaxMesh(np.array(jax.devices()[:count]), ("data",))


def _elements(shape: str) -> int:
    """Elements an all-reduce sums, from its shape's text: every leaf of a tuple together
    (``(f32[64], f32[2,3])`` -> 70); an ``all-reduce-start``'s ``((operands), results)`` (jax
    0.12's GPU module) counts its results only, as large as its operands."""
    total = sum(math.prod(int(d) for d in dims.split(",") if d) for dims in re.findall(r"\w+\[([\d,]*)\]", shape))
    return total // 2 if shape.startswith("((") else total


def _program_file(tmp_path, builder: str, devices: int, shape: tuple[int, ...] | None = None,
                  names: tuple[str, ...] = ("data",)):
    path = tmp_path / f"{builder}.py"
    path.write_text(programs.PROGRAM_FILE.format(devices=devices, shape=shape or (devices,), names=names,
                                                 builder=builder))
    return path


# --- item 1: the gradients leave the loop, the worst loss stays (needed) ------------------------

@pytest.mark.parametrize("target", ON_EVERY_TARGET)
def test_what_the_compiler_leaves_in_the_loop_is_needed_and_check_passes(target, tmp_path, shardscope_cli):
    """The target's compiler moves the gradients' sum out of the micro-batch loop and keeps the
    loss's in it, which ``jnp.maximum`` reads the next iteration: nothing in the loop need not
    be there. Counted in the module compiled here: one scalar all-reduce in a loop body, the
    gradients' sum (every parameter's elements) outside."""
    count = _devices(target).count
    text = _on_target(programs.worst_loss_adamw, target)
    found = collectives(text, _ALL_REDUCE)
    in_loops = [shape for shape, depth in found if depth]
    outside = [shape for shape, depth in found if not depth]
    assert [_elements(shape) for shape in in_loops] == [1], found
    params = 32 * 64 + 64 + 64 * 16
    assert sum(_elements(shape) for shape in outside) >= params, found

    path = _program_file(tmp_path, "worst_loss_adamw", count)
    result = shardscope_cli("check", path, "--target", target)
    assert result.returncode == 0, result.stdout + result.stderr
    words = " ".join(result.stdout.split())
    assert f"check passed on {target}" in words and "worth writing" not in words
    assert "leave the loop: the compiler already does the deferral here" in words

    built = programs.worst_loss_adamw(_cpu_mesh(count))
    inspection = testing.assert_no_deferrable_collectives_in_loops_on(target, built.fn, *built.args)
    (plan,) = inspection.targets
    assert [t.executions for t in plan.compiled.findings] == [programs.MICRO_BATCHES]
    assert {t.verdict.kind for t in plan.compiled.findings} == {"needed"}


@pytest.mark.parametrize("target", ON_EVERY_TARGET)
def test_a_sum_the_loop_need_not_run_left_in_the_targets_loop_still_fails(target, tmp_path, shardscope_cli):
    """The loss summed over micro-batches (``total + loss``): the target's compiler keeps its
    scalar all-reduce in the loop (counted here) although it only accumulates: check fails on
    the target and the assertion names the loss's sum, not the gradients the compiler moved."""
    count = _devices(target).count
    text = _on_target(programs.total_loss_adamw, target)
    in_loops = [shape for shape, depth in collectives(text, _ALL_REDUCE) if depth]
    assert [_elements(shape) for shape in in_loops] == [1]

    path = _program_file(tmp_path, "total_loss_adamw", count)
    result = shardscope_cli("check", path, "--target", target, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    on_target = program["targets"][target]
    (kept,) = [c for c in on_target["compiled_collectives"] if c["loops"]]
    assert kept["verdict"] == "deferrable" and kept["executions"] == programs.MICRO_BATCHES
    assert on_target["staying_findings"] and "worth writing" in on_target["verdict"]

    built = programs.total_loss_adamw(_cpu_mesh(count))
    with pytest.raises(AssertionError) as failure:
        testing.assert_no_deferrable_collectives_in_loops_on(target, built.fn, *built.args)
    message = str(failure.value)
    assert "keeps 1 collective(s) in loops" in message and "deferrable there" in message
    assert "grad(" not in message.split("\n")[0]  # the gradients left: only the loss's sum is named
