"""``shardscope.inspect(...).what_if()`` and ``shardscope check FILE --what-if``: the checked
rewrites through the public API and the CLI, in text and JSON.

Expected counts come from recounting the compiled text (``_what_if_programs.recount``) of the
original and of the hand-written fix; bytes and projected seconds are derived by hand from the
demo's shapes and the ring formula; never from shardscope's own output.
"""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest

import _what_if_programs as wp
import shardscope
from _support import DEMOS
from shardscope.costmodel.interconnects import preset
from shardscope.engine.joined.inspection import inspect_traced
from shardscope.errors import ShardscopeError
from shardscope.measure.speedup import FASTER, NO_DIFFERENCE, SLOWER
from shardscope.sources.loading import import_file

REPEATS = 6  # interleaved rounds: the fewest with a 95% interval of the median (MIN_ROUNDS), quick on a shared machine


@pytest.fixture(scope="module")
def train_step():
    module, _ = import_file(DEMOS / "train_step.py")
    return module


def _compiled_text(fn, args) -> str:
    return fn.trace(*args).lower().compile().as_text()


def _run_arguments(module):
    """The demo's example arguments as shardscope fills them (seed 0) and places them."""
    from shardscope.sources.examples import materialize

    compiled = module.step.trace(module.params, module.xs, module.ys).lower().compile()
    return jax.device_put(materialize(((module.params, module.xs, module.ys), {}), 0), compiled.input_shardings)[0]


def _gradient_bytes(module) -> int:
    """One all-reduce of both gradients (float32): W1 is D_IN x D_HIDDEN, W2 is D_HIDDEN x 1."""
    return 4 * (module.D_IN * module.D_HIDDEN + module.D_HIDDEN * 1)


# --------------------------------------------------------------------------- the Python API


def test_inspect_what_if_rewrites_step_into_step_fixed(train_step):
    """The inspection's what-if of ``step`` is one verified rewrite whose compiled module runs
    what ``step_fixed``'s runs (both recounted), with ``step_fixed``'s outputs."""
    module = train_step
    inspection = shardscope.inspect(module.step, module.params, module.xs, module.ys)
    result = inspection.what_if()
    assert result is inspection.what_if()  # computed once
    (rewrite,) = result.rewrites
    assert rewrite.verified and rewrite.outputs_match is True
    args = _run_arguments(module)
    naive = wp.recount(_compiled_text(module.step, args))
    fixed = wp.recount(_compiled_text(module.step_fixed, args))
    assert naive["runs"] == {"all-reduce": module.MICRO_BATCHES}
    assert wp.recount(rewrite.program.compiled.as_text()) == fixed
    outputs = jax.tree.map(np.asarray, rewrite.program.run(args, {}))
    wp.assert_same(wp.outputs(module.step_fixed, args), outputs, rtol=1e-6)
    assert "moved out of the lax.scan at train_step.py" in str(result)


def test_inspect_what_if_of_a_clean_program_has_no_rewrite(train_step):
    module = train_step
    result = shardscope.inspect(module.step_fixed, module.params, module.xs, module.ys).what_if()
    assert result.rewrites == () and "nothing to rewrite" in str(result)


def test_inspect_what_if_moves_a_loop_invariant_gather_before_the_loop():
    """FSDP's gather in a conditional branch (the CPU keeps it in the loop, recounted) is hoisted:
    one gather per call, as the hand fix runs it, and the gathered weight it keeps alive through
    the loop is 8 x 8 float32 per device."""
    step, args = wp.gather_in_a_branch()
    fixed_step, _ = wp.gather_in_a_branch(fixed=True)
    (rewrite,) = shardscope.inspect(step, *args).what_if().rewrites
    assert wp.recount(_compiled_text(step, args))["in_loop"] == {"all-gather": 1}
    assert rewrite.verified and rewrite.kind == "hoist"
    assert wp.recount(rewrite.program.compiled.as_text())["runs"] == wp.recount(_compiled_text(fixed_step, args))["runs"]
    assert rewrite.memory_bytes == 8 * 8 * 4


def test_inspect_what_if_refuses_a_sum_something_else_is_added_to():
    """Weight decay added into the accumulator every micro-batch: deferring the sum would add it
    once per device: refused, with the reason, never run as a saving."""
    step, args = wp.weight_decay_added()
    (rewrite,) = shardscope.inspect(step, *args).what_if().rewrites
    assert rewrite.status == "refused" and rewrite.program is None and rewrite.reason


def test_what_if_of_an_inspection_without_its_call_says_what_to_do(train_step):
    """An inspection built from a trace alone (as a demo's plans are) has nothing to rewrite."""
    module = train_step
    traced = module.step.trace(module.params, module.xs, module.ys)
    inspection = inspect_traced(traced, "step", [], [], compiled=traced.lower().compile())
    with pytest.raises(ShardscopeError, match="what_if"):
        inspection.what_if()


# --------------------------------------------------------------------------- shardscope check --what-if


def test_check_what_if_prints_the_verified_rewrite_and_its_patch(shardscope_cli, train_step):
    module = train_step
    result = shardscope_cli("check", DEMOS / "train_step.py", "--function", "step", "--what-if", "-r", REPEATS)
    assert result.returncode == 1, result.stderr  # the original program's status
    out = result.stdout
    text = " ".join(out.split())
    args = _run_arguments(module)
    before = wp.recount(_compiled_text(module.step, args))["runs"]["all-reduce"]
    after = wp.recount(_compiled_text(module.step_fixed, args))["runs"]["all-reduce"]
    per_run = _gradient_bytes(module)
    assert "what if: step: 1 rewrite" in text
    assert "status: verified (outputs match within" in text
    assert re.search(r"outputs match: yes \(largest difference [\d.e+-]+ in out\S+; its tolerance [\d.e+-]+ = sqrt\(eps\) "
                     r"of float32 \(3\.5e-04\) x [\d.e+-]+, the largest \|entry\| of out\S+\)", text)
    assert f"compiled collective runs per call: {before} -> {after}" in text
    assert f"bytes per call: {before * per_run:,} B -> {after * per_run:,} B" in text
    assert re.search(r"memory per device: arguments [\d,]+ B -> [\d,]+ B, outputs [\d,]+ B -> [\d,]+ B, "
                     r"temporaries [\d,]+ B -> [\d,]+ B", text)
    assert re.search(rf"measured here: (rewrite is [\d.]+x (faster|slower) than original|no measurable difference "
                     rf"between original and rewrite) \(median of {REPEATS} per-round ratios.*; 95% confidence interval "
                     rf"[\d.]+-[\d.]+x\).*over {REPEATS} interleaved "
                     "rounds", text)
    # the patch is printed whole, one line per line, never wrapped
    lines = [line.strip() for line in out.splitlines()]
    assert "+    local_params = jax.tree.map(lambda p: lax.pcast(p, 'batch', to='varying'), params)" in lines
    assert ("+    zeros = jax.tree.map(lambda a: lax.pcast(a, 'batch', to='varying'), "
            "jax.tree.map(jnp.zeros_like, params))") in lines
    assert "+    grads = lax.psum(grads, 'batch')" in lines and "-        grads = jax.grad(loss)(params, *batch)" in lines


def test_check_what_if_of_a_clean_program_keeps_exit_0(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "train_step.py", "--function", "step_fixed", "--what-if")
    assert result.returncode == 0, result.stderr
    assert "what if: step_fixed: no collective runs in a loop without needing to" in " ".join(result.stdout.split())


def _ring_all_reduce_seconds(payload: int, devices: int, name: str) -> float:
    """One ring all-reduce on a preset: 2(n-1) latency steps and 2(n-1)/n of the payload each way."""
    link = preset(name)
    return 2 * (devices - 1) * link.latency_s + 2 * (devices - 1) / devices * payload / link.bandwidth_Bps


def test_check_what_if_json_has_the_issue_fields(shardscope_cli, train_step):
    module = train_step
    result = shardscope_cli("check", DEMOS / "train_step.py", "--what-if", "--json", "-r", REPEATS,
                            "--project", "ib-ndr:64")
    assert result.returncode == 1, result.stderr
    step, fixed = json.loads(result.stdout)["programs"]
    assert fixed["what_if"] == []
    (rewrite,) = step["what_if"]
    args = _run_arguments(module)
    before = wp.recount(_compiled_text(module.step, args))["runs"]["all-reduce"]
    after = wp.recount(_compiled_text(module.step_fixed, args))["runs"]["all-reduce"]
    per_run = _gradient_bytes(module)
    assert rewrite["status"] == "verified" and rewrite["outputs_match"] is True
    (finding,) = rewrite["findings"]
    assert finding["kind"] == "all-reduce" and finding["executions"] == before and finding["verdict"] == "deferrable"
    assert set(rewrite["compiled_collectives"][0]) == set(step["compiled_collectives"][0])  # the same fields
    assert sum(c["executions"] for c in rewrite["compiled_collectives"]) == after
    assert all(c["loops"] == [] for c in rewrite["compiled_collectives"])
    assert rewrite["executed_collectives"] == {"original": before, "rewrite": after}
    assert rewrite["bytes_per_call"] == {"original": before * per_run, "rewrite": after * per_run}
    assert set(rewrite["memory_per_device"]) == {"original", "rewrite"}
    assert rewrite["memory_per_device"]["rewrite"]["argument_size_in_bytes"] > 0
    assert rewrite["speedup_verdict"] in (FASTER, SLOWER, NO_DIFFERENCE)
    low, high = rewrite["speedup_spread"]  # the interquartile range of the rounds
    assert low <= rewrite["speedup"] <= high
    low, high = rewrite["speedup_interval"]  # the interval of the median: with 6 rounds, the extremes
    assert low <= rewrite["speedup"] <= high
    assert set(rewrite["run_s"]["original"]) == {"median", "min", "max"}
    projection = rewrite["projection"]
    assert projection["preset"] == "ib-ndr" and projection["devices"] == 64
    one_run = _ring_all_reduce_seconds(per_run, 64, "ib-ndr")
    assert projection["comm_s_per_call"]["original"] == pytest.approx(before * one_run, rel=1e-9)
    assert projection["comm_s_per_call"]["rewrite"] == pytest.approx(after * one_run, rel=1e-9)
    assert projection["ratio"] == pytest.approx(before / after, rel=1e-9)
    patch = rewrite["patch"]
    assert patch.startswith("--- a/train_step.py") and "+    grads = lax.psum(grads, 'batch')" in patch.splitlines()
    assert rewrite["snippet"] is None


def test_check_what_if_text_shows_the_projection(shardscope_cli, train_step):
    result = shardscope_cli("check", DEMOS / "train_step.py", "-f", "step", "--what-if", "-r", REPEATS,
                            "--project", "nvlink-h100:8")
    assert result.returncode == 1, result.stderr
    text = " ".join(result.stdout.split())
    assert re.search(r"projected onto nvlink-h100 \(450 GB/s one way, 2 us per ring step, 8 devices\): "
                     r"communication [\d.]+ us -> [\d.]+ us per call \(4\.00x; communication only", text)


def test_check_project_without_what_if_is_a_usage_error(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "train_step.py", "--project", "nvlink-h100")
    assert result.returncode == 2
    assert "need --what-if" in result.stderr and "Traceback" not in result.stderr


def test_check_what_if_on_a_demo_file_says_its_plans_are_not_rewritten(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "linear.py", "--what-if", "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 1, result.stderr  # the naive plan is flagged, as without --what-if
    for program in data["programs"]:
        assert program["what_if"] is None and "deferred plan" in program["what_if_note"]


WEIGHT_DECAY = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
W = jax.ShapeDtypeStruct((8, 4), jnp.float32)
xs = jax.ShapeDtypeStruct((4, 32, 8), jnp.float32)
ys = jax.ShapeDtypeStruct((4, 32, 4), jnp.float32)


def loss(W, x, y):
    return jnp.mean((jnp.tanh(x @ W) - y) ** 2)


@shardscope.program(args=(W, xs, ys))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P())
def decayed(W, xs, ys):
    """Weight decay added into the accumulator in every micro-batch."""
    def body(acc, batch):
        return acc + jax.grad(loss)(W, *batch) + 0.01 * W, None

    acc, _ = lax.scan(body, jnp.zeros_like(W), (xs, ys))
    return acc
'''


def test_check_what_if_reports_a_refused_rewrite_with_its_reason_and_no_saving(shardscope_cli, tmp_path):
    """Something else added into the accumulator: the sum cannot leave the loop (the decay would
    be counted once per device). The refusal is reported, nothing is timed, there is no patch,
    and the exit status is the check's own."""
    path = tmp_path / "decayed.py"
    path.write_text(WEIGHT_DECAY)
    plain = shardscope_cli("check", path)
    result = shardscope_cli("check", path, "--what-if", "--json", "-r", REPEATS)
    assert result.returncode == plain.returncode, result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    (rewrite,) = program["what_if"]
    assert rewrite["status"] == "refused" and rewrite["reason"]
    assert rewrite["outputs_match"] is None and rewrite["compiled_collectives"] is None
    assert rewrite["speedup"] is None and rewrite["speedup_verdict"] is None and rewrite["patch"] is None
    assert rewrite["executed_collectives"]["rewrite"] is None
    text = shardscope_cli("check", path, "--what-if", "-r", REPEATS).stdout
    assert "status: refused (" in " ".join(text.split()) and "not timed" in text


def test_check_what_if_rewrites_an_explicit_axes_accumulation_as_step_fixed_does(shardscope_cli):
    """jit with Explicit axes (demos/explicit_accumulate.py): the rewrite reshards W reduced and
    the accumulator unreduced; its compiled collectives run what the file's step_fixed runs
    (recounted), and the patch is a diff of the file."""
    module, _ = import_file(DEMOS / "explicit_accumulate.py")
    with jax.set_mesh(module.mesh):
        naive = wp.recount(_compiled_text(module.step, (module.W, module.xs, module.ys)))["runs"]
        fixed = wp.recount(_compiled_text(module.step_fixed, (module.W, module.xs, module.ys)))["runs"]
    result = shardscope_cli("check", DEMOS / "explicit_accumulate.py", "-f", "step", "--what-if", "--json",
                            "-r", REPEATS)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    (rewrite,) = data["programs"][0]["what_if"]
    assert rewrite["status"] == "verified" and rewrite["route"] == "explicit" and rewrite["outputs_match"]
    assert rewrite["executed_collectives"] == {"original": naive["all-reduce"], "rewrite": fixed["all-reduce"]}
    assert sum(c["executions"] for c in rewrite["compiled_collectives"]) == fixed["all-reduce"]
    assert rewrite["patch"].startswith("--- a/explicit_accumulate.py")
    assert "+    W_reduced = jax.reshard(W, P(reduced={'data'}))" in rewrite["patch"].splitlines()
