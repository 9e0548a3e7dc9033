"""A demo carries its own mesh (``@shardscope.demo(mesh="data=4")``), or gets one derived from
its ``param_specs``; every command runs on it when the user gives no mesh, and a mesh the user
gives still wins (with the clear error when it lacks an axis the parameters name).

fsdp's counts on data=4 with 2 chunks per device, by hand: naive all-gathers w1 and w2 in every
chunk's forward and reduce-scatters their gradients in its backward, and all-reduces both
biases per chunk (2 x 2 x 2 + 2 x 2 = 12 runs per call); deferred does each once (6).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from _support import DEMOS, write_demo
from shardscope.sources.demos import derived_mesh
from shardscope.config.mesh import Mesh
from shardscope.config.settings import Settings

FSDP = DEMOS / "fsdp.py"
F = jax.ShapeDtypeStruct

DERIVED = """
from jax.sharding import PartitionSpec as P


@shardscope.demo(params={"w": jax.ShapeDtypeStruct((4, 8), jnp.float32), "b": jax.ShapeDtypeStruct((8,), jnp.float32)},
                 x=jax.ShapeDtypeStruct((32, 4), jnp.float32), param_specs={"w": P(None, "model"), "b": P()})
def sharded(params, x):
    return x @ params["w"] + params["b"]
"""

OWN_MESH = """
@shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32), x=jax.ShapeDtypeStruct((32, 5), jnp.float32),
                 mesh="batch=4")
def lin(W, x):
    return x @ W
"""


def test_fsdp_runs_on_its_own_mesh_in_report_diff_sweep_and_check(shardscope_cli):
    report = shardscope_cli("report", FSDP, "-r", "1", "--json")
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["mesh"] == {"data": 4} and data["chunks_per_device"] == 2
    assert {name: v["executed_collectives"] for name, v in data["variants"].items()} == {"naive": 12, "deferred": 6}
    assert "sharded parameters" in data["unavailable"]["reduced"]

    diff = shardscope_cli("diff", FSDP)
    assert diff.returncode == 0, diff.stderr
    assert "# mesh data=4 (cpu)" in diff.stdout

    sweep = shardscope_cli("sweep", FSDP, "--chunk-sizes", "32", "-r", "1", "--json")
    assert sweep.returncode == 0, sweep.stderr
    swept = json.loads(sweep.stdout)
    assert swept["mesh"] == {"data": 4} and "reduced" in swept["unavailable"]
    assert {p["plan"]: p["executed_collectives"] for p in swept["points"]} == {"naive": 12, "deferred": 6}

    check = shardscope_cli("check", FSDP, "--json")
    assert check.returncode == 1, check.stderr  # the naive plan's collectives in the loop need not be there
    flagged = {p["function"]: p["flagged"] for p in json.loads(check.stdout)["programs"]}
    assert flagged["fsdp[deferred]"] == 0 and flagged["fsdp[naive]"] > 0


def test_a_mesh_the_user_gives_wins_with_the_clear_error(shardscope_cli):
    for args in (("--devices", "2"), ("--mesh", "model=2")):
        result = shardscope_cli("report", FSDP, *args, "-r", "1")
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "param_specs names 'data', which the mesh" in result.stderr, result.stderr
        assert "hint: give a mesh with that axis (e.g. --mesh data=2)" in result.stderr
    on_2d = shardscope_cli("report", FSDP, "--mesh", "data=2,model=2", "-r", "1", "--json")
    assert on_2d.returncode == 0, on_2d.stderr
    assert json.loads(on_2d.stdout)["mesh"] == {"data": 2, "model": 2}


@pytest.mark.slow  # starts two worker processes
def test_a_mesh_derived_from_param_specs_and_one_passed_on_to_the_processes(tmp_path, shardscope_cli):
    derived = shardscope_cli("report", write_demo(tmp_path, "derived.py", DERIVED), "-r", "1", "--json")
    assert derived.returncode == 0, derived.stderr
    assert json.loads(derived.stdout)["mesh"] == {"model": 2}

    own = write_demo(tmp_path, "own.py", OWN_MESH)
    spawned = shardscope_cli("report", own, "--processes", "2", "-r", "1", "--json")
    assert spawned.returncode == 0, spawned.stderr
    data = json.loads(spawned.stdout)
    assert (data["mesh"], data["processes"], data["per_device_batch"]) == ({"batch": 4}, 2, 8)


def test_a_demo_mesh_that_is_not_a_mesh_is_one_message(tmp_path, shardscope_cli):
    bad = write_demo(tmp_path, "bad.py", OWN_MESH.replace('mesh="batch=4"', 'mesh="batch=four"'))
    result = shardscope_cli("report", bad)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "The size of mesh axis 'batch' must be a whole number" in result.stderr
    assert "bad.py line" in result.stderr  # the line of the demo that says it


def test_derived_meshes():
    assert derived_mesh({"w": F((64, 256), jnp.float32), "b": F((256,), jnp.float32)},
                        {"w": P("data"), "b": P()}) == Mesh.parse("data=2")
    assert derived_mesh(F((64, 256), jnp.float32), P("data", "model")) == Mesh.parse("data=2,model=2")
    # 3 rows do not split in 4 (data x model on one dimension): both axes of size 1
    assert derived_mesh(F((3, 256), jnp.float32), P(("data", "model"))) == Mesh.parse("data=1,model=1")
    assert derived_mesh(F((64,), jnp.float32), None) is None
    assert derived_mesh(F((64,), jnp.float32), P()) is None


@pytest.mark.parametrize(
    ("settings", "mesh"),
    [
        (Settings(FSDP, demo_mesh=True), "data=4"),  # no mesh given: the demo's
        (Settings(FSDP, devices=8), "s=8"),  # a mesh given: never replaced
        (Settings(FSDP, demo_mesh=True).with_(devices=4), "s=4"),  # a mesh picked later is the user's
    ],
)
def test_settings_take_the_demo_mesh_only_when_none_was_given(settings, mesh):
    assert settings.for_demo(Mesh.parse("data=4")).mesh.text() == mesh
    assert Settings(FSDP, demo_mesh=True).for_demo(None).mesh.text() == "s=2"


@pytest.mark.slow  # the explorer in a fresh process
def test_the_explorer_opens_fsdp_on_its_own_mesh_as_the_command_line_starts_it():
    import subprocess

    from _support import PYTHON, ROOT

    helper = ROOT / "tests" / "helpers" / "app_first_run.py"
    result = subprocess.run([PYTHON, str(helper), str(FSDP), "-r", "1"], capture_output=True, text=True,
                            cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    shown = json.loads(result.stdout.splitlines()[-1])
    assert shown["error"] == "" and shown["mesh"] == "data=4"
    assert {name: plan["runs"] for name, plan in shown["plans"].items()} == {"naive": 12, "deferred": 6}
