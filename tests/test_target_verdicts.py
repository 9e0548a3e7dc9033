"""A verdict on a target judges what that target's compiler leaves in its loops, value by value.

Every expected number comes from the program compiled here for the target's own devices by
JAX's route (``jit(...).trace(...).lower().compile()``) and read in this file: which
all-reduces run inside while bodies, their shapes and how often; never from shardscope's output.
"""

from __future__ import annotations

import functools
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
from shardscope.config.mesh import Mesh
from shardscope.targets import compile as targets, gpu as gpu_target, registry
from test_gpu_targets import needs_plugin
from test_targets import needs_libtpu

ON_EVERY_TARGET = [pytest.param("gpu:h100:8", marks=needs_plugin), pytest.param("tpu:v5e:2x4", marks=needs_libtpu),
                   pytest.param("gpu:a100:4", marks=needs_plugin)]

_ALL_REDUCE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+all-reduce(?:-start)?\(")


def _devices(target: str):
    return registry.load_target(registry.parse_target(target))


@functools.lru_cache(maxsize=None)
def _on_target(builder, target: str, mesh: str | None = None) -> str:
    """The module of ``builder``'s program written against the target's own devices, compiled by JAX.

    Kept per process: several tests here and in ``test_target_names`` read the same program's
    module on the same target, and neither JAX's persistent cache (its compile-only clients cannot
    load an executable back) nor shardscope's (which this reading must not rely on) serves it."""
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


# --- a scatter-add into a replicated accumulator: the partitioner's fold ------------------------

ON_TPU_AND_GPU = [pytest.param("gpu:h100:8", marks=needs_plugin), pytest.param("tpu:v5e:2x4", marks=needs_libtpu)]

_WHILE_BODY = re.compile(r"\bwhile\(.*\bbody=%?([\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _lines_of(text: str, name: str) -> list[str]:
    """The lines of computation ``name`` (the fusions it calls are left out)."""
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if re.match(rf"%?{re.escape(name)}\s", line))
    return lines[start + 1:next(k for k in range(start, len(lines)) if lines[k].startswith("}"))]


def _trip_count(text: str, loop: str) -> int:
    """The while loop's trip count: XLA's ``known_trip_count`` (GPU), else the bound its
    condition compares the counter with (``counter < 4``; XLA:TPU prints no count)."""
    known = _TRIPS.search(loop)
    if known:
        return int(known.group(1))
    condition = _lines_of(text, re.search(r"condition=%?([\w.\-]+)", loop).group(1))
    (root,) = [line for line in condition if line.lstrip().startswith("ROOT")]
    assert "direction=LT" in root, root
    bound = re.search(r"compare\(%?[\w.\-]+, %?([\w.\-]+)\)", root).group(1)
    (value,) = [re.search(r"constant\((\d+)\)", line).group(1) for line in condition
                if re.match(rf"\s*%?{re.escape(bound)} = ", line)]
    return int(value)


@pytest.mark.parametrize("mesh", [None, "data=4,model=2"])
@pytest.mark.parametrize("target", ON_TPU_AND_GPU)
def test_a_gradient_scattered_into_a_replicated_accumulator_and_summed_in_the_loop_fails_check(
        target, mesh, tmp_path, shardscope_cli):
    """A tied embedding under jit (``{"embed", "scale"}`` replicated, the batch over ``data``),
    its gradients accumulated over 4 micro-batches. The target's compiler folds the accumulator
    into the partitioner's scatter-add of the gathered rows' gradient: in the loop body the
    accumulator plus the summed dense gradient is kept on one device (a ``select`` on
    ``partition-id``), each device scatters its own rows into it, and the buffer is summed over
    the group into the next iteration's carry. Two all-reduces of the embedding run every
    iteration (counted here, with their bytes and the loop's trip count); that only accumulates
    (one sum after the loop gives the same), so check fails on the target, and the fix
    (shard_map, pcast, one pmean) leaves no sum in the loop and passes. On a 2-D mesh the
    device's place along ``data`` is looked up in a table of constants by ``partition-id``."""
    count = _devices(target).count
    shape, names = ((4, 2), ("data", "model")) if mesh else ((count,), ("data",))
    text = _on_target(programs.tied_embedding_accumulation, target, mesh)
    in_loops = [shape for shape, depth in collectives(text, _ALL_REDUCE) if depth]
    (whiles,) = [line for line in text.splitlines() if _WHILE_BODY.search(line)]
    trips = _trip_count(text, whiles)
    body = _lines_of(text, _WHILE_BODY.search(whiles).group(1))
    assert trips == programs.MICRO_BATCHES and any("partition-id()" in line for line in body)
    embed = programs.VOCAB * programs.WIDTH
    assert [_elements(shape) for shape in in_loops] == [embed, embed] and all(re.match(r"\(*f32\[", s) for s in in_loops)

    path = _program_file(tmp_path, "tied_embedding_accumulation", count, shape, names)
    result = shardscope_cli("check", path, "--target", target, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    on_target = program["targets"][target]
    kept = [c for c in on_target["compiled_collectives"] if c["loops"]]
    assert [(c["verdict"], c["executions"], c["bytes_per_call"]) for c in kept] == \
        [("deferrable", trips, 4 * embed * trips)] * 2
    assert all("partition id" in c["reason"] and f"{4 * embed:,} B accumulator" in c["reason"] for c in kept)
    assert on_target["staying_findings"] and "worth writing" in on_target["verdict"]
    words = " ".join(shardscope_cli("check", path, "--target", target).stdout.split())
    assert f"check passed on {target}" not in words

    built = programs.tied_embedding_accumulation(JaxMesh(np.array(jax.devices()[:count]).reshape(shape), names))
    with pytest.raises(AssertionError, match="deferrable there"):
        testing.assert_no_deferrable_collectives_in_loops_on(target, built.fn, *built.args)

    fixed_text = _on_target(programs.tied_embedding_accumulation_fixed, target, mesh)
    assert [depth for _, depth in collectives(fixed_text, _ALL_REDUCE)] == [0]
    fixed = _program_file(tmp_path, "tied_embedding_accumulation_fixed", count, shape, names)
    result = shardscope_cli("check", fixed, "--target", target)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"check passed on {target}" in " ".join(result.stdout.split())


# --- items 2 and 3: a 2-D Megatron step, its labels, verdicts and rows on the GPUs --------------

_WHOLE_ALL_REDUCE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?\s+all-reduce(?:-start)?\(.*)$")


def _group_size(line: str) -> int:
    """Devices per replica group, in any of the three forms XLA prints: ``{{0,1},{2,3}}``,
    ``[4,2]<=[8]`` (4 groups of 2) or ``mesh['axis_0'=4,'axis_1'=2] {'axis_0'}`` (4)."""
    explicit = re.search(r"replica_groups=\{\{([\d,]+)\}", line)
    if explicit:
        return len(explicit.group(1).split(","))
    iota = re.search(r"replica_groups=\[\d+,(\d+)\]<=", line)
    if iota:
        return int(iota.group(1))
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    assert mesh is not None, line
    sizes = dict((name.strip("'"), int(size)) for name, size in (part.split("=") for part in mesh.group(1).split(",")))
    return math.prod(sizes[name.strip().strip("'")] for name in mesh.group(2).split(","))


def _all_reduces_by_group(text: str) -> list[tuple[int, int, int]]:
    """``(devices per group, loop depth, elements)`` of every all-reduce in the module's text."""
    return [(_group_size(line), depth, _elements(line.split(" all-reduce")[0]))
            for line, depth in collectives(text, _WHOLE_ALL_REDUCE)]


@needs_plugin
def test_a_megatron_steps_labels_and_verdicts_on_the_gpus_are_one_value_in_json_and_text(tmp_path, shardscope_cli):
    """data=4 x model=2: the sums over ``model`` (each layer's activation and its gradient,
    forward and backward) are added into what the next layer reads: needed, and no parameter's
    gradient. The sums over ``data`` carry the parameters' gradients (``ln``'s out of the layer
    loop, with the loss) and only accumulate: deferrable. JSON and text say the same of each.
    Counted in the module compiled here: which all-reduces span 2 devices (model) or 4 (data),
    how deep in the loops."""
    target = "gpu:h100:8"
    found = _all_reduces_by_group(_on_target(programs.megatron_step, target, "data=4,model=2"))
    over_model = sorted(depth for size, depth, _ in found if size == 2)
    over_data = sorted(depth for size, depth, _ in found if size == 4)
    assert over_model == [2, 2] and over_data and len(found) == len(over_model) + len(over_data)

    path = _program_file(tmp_path, "megatron_step", 8, (4, 2), ("data", "model"))
    result = shardscope_cli("check", path, "--target", target, "--json")
    (program,) = json.loads(result.stdout)["programs"]
    on_gpus = program["targets"][target]
    compiled = on_gpus["compiled_collectives"]
    model = [c for c in compiled if c["axes"] == ["model"]]
    data = [c for c in compiled if c["axes"] == ["data"]]
    assert sorted(len(c["loops"]) for c in model) == over_model
    assert sorted(len(c["loops"]) for c in data) == over_data
    assert {c["verdict"] for c in model} == {"needed"}
    assert not any("grad(" in v for c in model for v in c["values"])  # an activation's sum, not a parameter's
    assert {c["verdict"] for c in data if c["loops"]} == {"deferrable"}
    gradients = sorted(v for c in data for v in c["values"] if v.startswith("grad("))
    assert gradients == ["grad(params['ln'])", "grad(params['w_in'])", "grad(params['w_out'])"]
    assert result.returncode == 1  # the sums over data stay in loops they need not run in

    text = shardscope_cli("check", path, "--target", target).stdout
    rows: dict[str, list[str]] = {}  # the first table's (piped at 120 columns, the CPU's half follows)
    for cells in ([c.strip() for c in line.split("│")] for line in text.splitlines() if line.startswith("│train_step ")):
        rows.setdefault(cells[2], cells)
    for c in compiled:  # one verdict, rendered twice (a table's cell is "-" outside every loop)
        assert rows[c["name"]][6] == (c["verdict"] if c["loops"] else "-"), (c["name"], rows[c["name"]])
    assert on_gpus["verdict"] in " ".join(text.split())
    assert " needed" not in on_gpus["verdict"].split("worth writing")[0]


@needs_plugin
def test_every_collective_of_the_targets_summary_has_its_row():
    """The summary's collectives and runs per call are the rows': one row per all-reduce of the
    module compiled here, its runs the trip counts of the loops around it (3 micro-batches, 4
    layers), ln's gradient that left the layer loop among them."""
    from rich.console import Console

    from shardscope.pipeline.one_program import inspect_on
    from shardscope.render.targets import placements_table, target_table

    target = "gpu:h100:8"
    found = _all_reduces_by_group(_on_target(programs.megatron_step, target, "data=4,model=2"))
    runs = {0: 1, 1: programs.MICRO_STEPS, 2: programs.MICRO_STEPS * programs.LAYERS}
    expected = sorted(runs[depth] for _, depth, _ in found)

    built = programs.megatron_step(JaxMesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model")))
    inspection = inspect_on(target, built.fn, built.args, {})
    (plan,) = inspection.targets
    rows = plan.rows
    assert sorted(row.collective.executions for row in rows if row.collective is not None) == expected
    assert plan.compiled.executed_collectives == sum(expected)

    console = Console(width=400, record=True)
    console.print(target_table(target, [("train_step", inspection)]))
    console.print(placements_table([("train_step", plan)], "program"))
    text = console.export_text()
    lines = [[c.strip() for c in line.split("│")] for line in text.splitlines() if line.startswith("│train_step")]
    assert len(lines) == len(found)
    assert sum(int(cells[5]) for cells in lines) == sum(expected)
    assert f"{len(found)} ({sum(1 for _, depth, _ in found if depth)} in while)" in text


# --- item 4: an inspection made for a target counts and shows that target's plan --------------

@needs_plugin
def test_an_inspection_made_for_a_target_counts_and_prints_that_targets_plan_first():
    """``inspect_on("gpu:h100:8", ...)``: ``counts()`` and the printed summary are the GPUs' (the
    all-reduces of the module compiled here: each in the loop body once per micro-batch, the
    others once), the CPU's follows, labelled; ``collective_counts_on`` agrees."""
    import shardscope

    target = "gpu:h100:8"
    found = collectives(_on_target(programs.worst_loss_adamw, target), _ALL_REDUCE)
    runs = sum(programs.MICRO_BATCHES if depth else 1 for _, depth in found)
    built = programs.worst_loss_adamw(_cpu_mesh(8))
    inspection = shardscope.inspect_on(target, built.fn, *built.args)
    assert inspection.counts() == {"all-reduce": runs} == testing.collective_counts_on(target, built.fn, *built.args)
    assert inspection.executed_collectives == runs
    text = " ".join(str(inspection).split())
    assert text.startswith(f"on {target}: XLA:GPU's plan")
    on_gpus, on_cpu = text.split("on the CPU: XLA:CPU's plan")
    assert f"{len(found)} compiled collectives" in on_gpus and f"{runs} runs/call" in on_gpus
    assert "leave the loop: the compiler already does the deferral here" in on_gpus
    on_cpu_text = built.fn.trace(*built.args).lower().compile().as_text()
    cpu_runs = sum(programs.MICRO_BATCHES if depth else 1 for _, depth in collectives(on_cpu_text, _ALL_REDUCE))
    assert cpu_runs != runs and f"{cpu_runs} runs/call" in on_cpu
    page = inspection._repr_html_()  # a notebook's view: the GPUs' plan first, then the CPU's, as the text
    on_gpus_html, on_cpu_html = page.split("on the CPU: XLA:CPU's plan")
    assert f"on {target}: XLA:GPU's plan" in on_gpus_html and f"{runs} runs/call" in on_gpus_html
    assert f"{cpu_runs} runs/call" in on_cpu_html


# --- a verdict's bytes are the target's own --------------------------------------------------

_ANY_COLLECTIVE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?\s+"
                             r"(?:all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(.*)$")
_ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4, "f64": 8}


def _bytes(shape: str) -> int:
    """Bytes of a shape's text, every leaf of a tuple together (``(f32[], bf16[2,3])`` -> 16)."""
    return sum(_ELEMENT_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
               for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", shape))


def _cpu_text(builder, shape: tuple[int, ...] = (8,), names: tuple[str, ...] = ("data",)) -> str:
    """The module of ``builder``'s program compiled for the first CPU devices, in a mesh of ``shape``."""
    devices = np.array(jax.devices()[:math.prod(shape)]).reshape(shape)
    built = builder(JaxMesh(devices, names))
    return built.fn.trace(*built.args).lower().compile().as_text()


def _verdict_words(stdout: str) -> str:
    """The target's verdict on the program (``on v5e:2x4 the train_step program ...``), up to its
    memory line, in one line."""
    words = " ".join(stdout.split())
    return "on v5e:2x4 the train_step program" + words.split("on v5e:2x4 the train_step program", 1)[1].split(" memory:")[0]


@needs_libtpu
def test_a_sum_the_compiler_moved_out_is_quoted_at_the_targets_own_bytes(tmp_path, shardscope_cli):
    """bfloat16 gradients summed over micro-batches: the TPU sums them once, outside the loop, in
    bfloat16 (2 B an element), the CPU in the loop in float32; the verdict quotes the TPU's bytes.
    Counted in the modules compiled here."""
    target = "tpu:v5e:2x4"
    ((shape, depth),) = collectives(_on_target(programs.bf16_gradients_sgd, target), _ALL_REDUCE)
    on_target = _bytes(shape)
    assert depth == 0 and on_target == (32 * 64 + 64 * 16) * 2
    ((cpu_shape, cpu_depth),) = collectives(_cpu_text(programs.bf16_gradients_sgd), _ALL_REDUCE)
    on_cpu = _bytes(cpu_shape)
    assert cpu_depth == 1 and on_cpu == 2 * on_target

    path = _program_file(tmp_path, "bf16_gradients_sgd", 8)
    words = _verdict_words(shardscope_cli("check", path, "--target", target).stdout)
    assert "leaves the loop: the compiler already does the deferral here" in words
    assert f"grad(params['w2']) moves {on_target:,} B per run." in words
    assert f"{on_cpu:,} B per run" not in words


@needs_libtpu
def test_a_sum_the_target_splits_is_quoted_part_by_part_and_counted_once(tmp_path, shardscope_cli):
    """A transformer's loss and gradients summed over micro-batches: the CPU sums them in one
    all-reduce in the loop (the one collective it flags: the sums only accumulate); the TPU keeps
    the loss's and the tied embedding's sums in the loop (the embedding's as the partitioner's
    scatter-add fold: deferrable there too) and moves the other gradients out, combined with other
    sums. The verdict quotes the TPU's own all-reduces that stay, each with its bytes, not the
    CPU's sum. Counted in the modules compiled here: the all-reduces in while bodies, the one
    holding the scalar loss."""
    target, mesh = "tpu:v5e:2x4", "data=4,model=2"
    text = _on_target(programs.transformer_adam, target, mesh)
    sums = collectives(text, _ALL_REDUCE)
    (with_loss,) = [shape for shape, depth in sums if depth and "f32[]" in shape]
    # the embedding (vocab 256 x d 64, split over model=2) in f32: its gradient summed over data
    # (a TPU's async collective fusion prints one collective more than once: one shape, layout aside)
    (embedding,) = {shape.split("{")[0] for shape, depth in sums if depth and shape.startswith("f32[256,32]")}
    (cpu_sum,) = [shape for shape, depth in collectives(_cpu_text(programs.transformer_adam, (4, 2), ("data", "model")), _ALL_REDUCE)
                  if depth and "f32[]" in shape]

    path = _program_file(tmp_path, "transformer_adam", 8, (4, 2), ("data", "model"))
    words = _verdict_words(shardscope_cli("check", path, "--target", target).stdout)
    assert "stay in the loop" in words and "the deferral is worth writing" in words
    assert f"moves {_bytes(with_loss):,} B per run, 4 runs per call" in words
    assert f"and {_bytes(embedding):,} B per run, 4 runs per call" in words
    assert f"{_bytes(cpu_sum):,} B" not in words
