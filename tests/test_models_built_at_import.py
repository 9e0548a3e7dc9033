"""Demo files that build arrays when imported (a flax nnx model, an equinox model, concrete ``jnp``
example inputs) run on 4 devices through every command and the app, each in a fresh process:
the CPU device count is set before the file is imported. (The three reports share one process:
the first starts it, the other two run the same command after it; check and sweep run after the
diff that started theirs.)

The expected collective counts are derived here by hand: N=32 over 4 devices is 8 per device,
the default chunk size 4 gives 2 chunks, so the naive plan all-reduces every parameter leaf once
per chunk (2 x leaves runs per call) and the deferred plan once per call (leaves).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from _support import PYTHON, ROOT, in_one_process, run_cli

from shardscope.cli.processes import free_port

FRAMEWORK_MODELS = '''
"""A flax nnx model and an equinox model: both build their parameters when imported."""
import equinox as eqx
import jax
import jax.numpy as jnp
from flax import nnx

import shardscope

LINEAR = nnx.Linear(4, 3, rngs=nnx.Rngs(0))
FLAX_GRAPH, FLAX_PARAMS = nnx.split(LINEAR)
MLP = eqx.nn.MLP(4, 3, 8, 1, key=jax.random.key(0))
EQX_PARAMS, EQX_STATIC = eqx.partition(MLP, eqx.is_array)
X = jnp.linspace(-1.0, 1.0, 32 * 4, dtype=jnp.float32).reshape(32, 4)
STARTED_WITH = jax.device_count()  # what JAX's backend started with when this file was imported


@shardscope.demo(params=FLAX_PARAMS, x=X)
def flax_linear(params, x):
    return nnx.merge(FLAX_GRAPH, params)(x)


@shardscope.demo(params=EQX_PARAMS, x=X)
def equinox_mlp(params, x):
    return jax.vmap(eqx.combine(params, EQX_STATIC))(x)


print("started with", STARTED_WITH, "devices")
'''

CONCRETE_INPUTS = '''
"""Concrete jnp arrays as the example inputs."""
import jax.numpy as jnp

import shardscope

W = jnp.linspace(-1.0, 1.0, 5, dtype=jnp.float32)
X = jnp.linspace(-1.0, 1.0, 32 * 5, dtype=jnp.float32).reshape(32, 5)


@shardscope.demo(params=W, x=X)
def concrete(W, x):
    return jnp.tanh(x @ W)
'''

LEAVES = {"flax_linear": 2, "equinox_mlp": 4, "concrete": 1}
"""Parameter leaves: nnx.Linear has a kernel and a bias; eqx.nn.MLP(depth=1) two Linear layers."""
CHUNKS = 2
TOLERANCE = 1e-5

pytestmark = pytest.mark.slow  # every test starts fresh processes: that is the point


def _files(tmp_path):
    (tmp_path / "frameworks.py").write_text(FRAMEWORK_MODELS)
    (tmp_path / "concrete.py").write_text(CONCRETE_INPUTS)
    return tmp_path / "frameworks.py", tmp_path / "concrete.py"


def _check_plans(variants: dict, function: str) -> None:
    leaves = LEAVES[function]
    assert variants["naive"]["executed_collectives"] == CHUNKS * leaves, function
    assert variants["deferred"]["executed_collectives"] == leaves, function
    for name, plan in variants.items():
        assert plan["max_abs_err"] < TOLERANCE, (function, name)


def _ok(result: subprocess.CompletedProcess, code: int = 0) -> None:
    assert result.returncode == code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_report_on_4_devices(tmp_path):
    """The first report starts JAX in a fresh process (the count set before the file's import);
    the other two are the same command, run after it in the same process."""
    frameworks, concrete = _files(tmp_path)
    runs = ((frameworks, "flax_linear"), (frameworks, "equinox_mlp"), (concrete, "concrete"))
    results = in_one_process(*(("report", path, "-f", function, "--devices", "4", "-r", "1", "--json")
                                for path, function in runs))
    for (path, function), result in zip(runs, results):
        _ok(result)
        report = json.loads(result.stdout)
        assert (report["devices"], report["per_device_batch"], report["chunks_per_device"]) == (4, 8, CHUNKS)
        _check_plans(report["variants"], function)
        if path == frameworks:  # JAX started at import, with the count set before it (8: the default)
            assert "started with 8 devices" in result.stderr


def test_diff_check_and_sweep_on_4_devices(tmp_path):
    """The diff starts JAX in a fresh process; check and sweep run after it in the same process
    (each imports the file again, on the devices the diff started)."""
    frameworks, _ = _files(tmp_path)
    diff, check, sweep = in_one_process(
        ("diff", frameworks, "-f", "equinox_mlp", "--devices", "4"),
        ("check", frameworks, "--devices", "4", "--json"),
        ("sweep", frameworks, "-f", "flax_linear", "--devices", "4", "--chunk-sizes", "2,4", "-r", "1", "--json"))
    _ok(diff)
    assert "\n--- " in diff.stdout and "\n+++ " in diff.stdout and "psum_invariant" in diff.stdout
    assert "started with 8 devices" in diff.stderr  # the count was set before the import

    _ok(check, 1)  # the naive plans hold all-reduces their loops do not need
    programs = {p["function"]: p for p in json.loads(check.stdout)["programs"]}
    for function, leaves in (("flax_linear", 2), ("equinox_mlp", 4)):
        naive = programs[f"{function}[naive]"]
        assert [c["executions"] for c in naive["collectives"]] == [CHUNKS] * leaves
        # every leaf's sum is flagged, in however many instructions XLA combined them into
        flagged = [c for c in naive["compiled_collectives"] if c["flagged"]]
        assert naive["flagged"] == len(flagged) >= 1
        assert sorted(e for c in flagged for e in c["equations"]) == sorted(c["equation"] for c in naive["collectives"])
        assert programs[f"{function}[deferred]"]["flagged"] == 0

    _ok(sweep)
    points = json.loads(sweep.stdout)["points"]
    runs = {(p["plan"], p["chunk_size"]): p["executed_collectives"] for p in points}
    assert runs[("naive", 2)] == 2 * 4 and runs[("naive", 4)] == 2 * CHUNKS  # chunks per device x leaves
    assert runs[("deferred", 2)] == runs[("deferred", 4)] == 2
    assert all(p["max_abs_err"] < TOLERANCE for p in points)


def test_the_app_on_4_devices(tmp_path):
    frameworks, _ = _files(tmp_path)
    helper = ROOT / "tests" / "helpers" / "app_first_run.py"
    result = subprocess.run([PYTHON, str(helper), "--sweep", str(frameworks), "-f", "equinox_mlp", "--devices", "4",
                             "-r", "1"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    _ok(result)
    shown = json.loads(result.stdout.splitlines()[-1])
    assert shown["error"] == "" and shown["mesh"] == "s=4"
    assert shown["plans"]["naive"]["runs"] == CHUNKS * 4 and shown["plans"]["deferred"]["runs"] == 4
    assert all(plan["max_abs_err"] < TOLERANCE for plan in shown["plans"].values())
    assert shown["sweep_plans"][:2] == ["naive", "deferred"], shown["sweep_status"]


def test_report_over_two_processes(tmp_path):
    _, concrete = _files(tmp_path)
    result = run_cli("report", concrete, "--devices", "4", "--processes", "2", "-r", "1", "--json", timeout=600)
    _ok(result)
    report = json.loads(result.stdout)
    assert (report["processes"], report["devices"]) == (2, 4)
    _check_plans(report["variants"], "concrete")


def test_distributed_in_a_simulated_slurm_step(tmp_path):
    _, concrete = _files(tmp_path)
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "JAX_COORDINATOR"))}
    tasks = [
        subprocess.Popen(
            [PYTHON, "-m", "shardscope", "report", str(concrete), "--distributed", "--devices", "4", "-r", "1",
             "--json"],
            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**base, "SLURM_JOB_ID": "1", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2",
                 "SLURM_PROCID": str(i), "SLURM_LOCALID": str(i), "JAX_COORDINATOR_PORT": str(port),
                 "JAX_NUM_CPU_DEVICES": "2"},
        )
        for i in range(2)
    ]
    try:
        outputs = [task.communicate(timeout=600) for task in tasks]
    finally:
        for task in tasks:
            task.kill()
    assert [task.returncode for task in tasks] == [0, 0], outputs[0][1][-2000:]
    report = json.loads(outputs[0][0])
    assert (report["processes"], report["devices"]) == (2, 4)
    _check_plans(report["variants"], "concrete")


def test_a_count_that_does_not_divide_the_batch_still_lists_the_counts_that_do(tmp_path):
    _, concrete = _files(tmp_path)
    result = run_cli("report", concrete, "--devices", "3", timeout=300)
    _ok(result, 2)
    assert "The batch N=32 does not split over 3 devices" in result.stderr
    assert "use a device count that divides 32: 1, 2, 4, 8, 16, 32" in result.stderr
