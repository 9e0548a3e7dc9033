"""A user's trainer run on a real TPU v5e chip (``fixtures/profiles/tpu_v5e_trainer``, written by
``capture_tpu.py`` there), replayed without one (issue 52, items 6-8).

The expected calls and step times are read here from the trace with XProf's own converter (its
``XLA Modules`` line: each run of a module on the chip). On this machine, which has no TPU, a TPU
run's profile on the CPU's plan is one message that says what to run; its own dump carries it,
with the step's estimate on the chip it names beside it; and (with the run's JAX and libtpu)
the compile-only ``tpu:v5e:1x1`` plan, a one-chip slice, carries it too.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from _profiles import trace_events
from _support import PYTHON

FIXTURE = Path(__file__).parent / "fixtures" / "profiles" / "tpu_v5e_trainer"
AHEAD, DUMP = FIXTURE / "ahead", FIXTURE / "dump"
TRAINER = Path(__file__).parent / "_profiled_trainer.py"
RUN_JAX = "0.10.2"  # the JAX (and its libtpu) of the run: a compile here matches it only with the same
LIBTPU_SHIPS = sys.platform.startswith("linux") and platform.machine() == "x86_64"


def _module_runs_us(module: str) -> list[float]:
    """Each run of ``module`` on the chip (microseconds), in time order, from XProf's trace viewer."""
    pytest.importorskip("xprof")
    events = trace_events(next(AHEAD.rglob("*.xplane.pb")))
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    runs = [e for e in events if e.get("ph") == "X" and processes.get(e["pid"]) == "/device:TPU:0"
            and threads.get((e["pid"], e["tid"])) == "XLA Modules" and e["name"].startswith(module + "(")]
    return [e["dur"] for e in sorted(runs, key=lambda e: e["ts"])]


@pytest.mark.parametrize("module", ["jit_train_step", "jit_eval_step"])
def test_the_run_s_dump_carries_its_profile_and_the_estimate_beside_it(module, shardscope_cli):
    result = shardscope_cli("check", "--xla-dump", DUMP, "-f", module, "--profile-dir", AHEAD, "--json")
    assert result.returncode == 0, result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    measured = program["measured"]
    runs = _module_runs_us(module)
    assert program["compiler"] == "XLA:TPU" and measured["machine"] == "TPU v5 Lite"
    assert measured["calls"] == len(runs) == 5 and measured["devices"] == 1
    assert measured["first_call_s"] == pytest.approx(runs[0] * 1e-6, rel=0.10)
    assert measured["step_s"] == pytest.approx(statistics.median(runs[1:]) * 1e-6, rel=0.10)
    estimate = measured["estimate"]
    assert estimate["chip"] == "v5e" and estimate["device_s"] > 0
    assert estimate["ratio"] == pytest.approx(measured["step_s"] / estimate["device_s"])
    text = " ".join(shardscope_cli("check", "--xla-dump", DUMP, "-f", module, "--profile-dir", AHEAD).stdout.split())
    assert re.search(r"step measured [\d.]+ [mun]?s per call \(one device\), no collectives; estimated [\d.]+ [mun]?s "
                     r"on v5e .*: measured [\d.]+x the estimate", text), text


def test_a_tpu_run_s_profile_on_a_cpu_host_says_what_to_run(shardscope_cli):
    result = shardscope_cli("check", TRAINER, "--profile-dir", AHEAD)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    said = " ".join(result.stderr.split())
    assert said.count("shardscope: error:") == 1 and "is of a run on TPU v5 Lite" in said
    assert "--on tpu --profile-dir" in said and "--xla-dump DUMP --profile-dir" in said and "--target tpu:v5e:1x1" in said
    assert "jit_train_step, not jit_train_step" not in said


def test_the_outputs_kept_from_the_chip_put_the_profile_on_the_chip_s_plan():
    """What ``check`` printed on the TPU VM (``outputs/``): the run's profile checked there maps
    (5 calls on one v5e, the estimate beside), and ``--on tpu``'s last line names XLA:TPU."""
    auto = " ".join((FIXTURE / "outputs" / "auto.txt").read_text().split())
    assert "measured: 5 calls of jit_train_step on 1 TPU v5 Lite device" in auto and "x the estimate" in auto
    assert "checking on this machine's TPU" in (FIXTURE / "outputs" / "auto.stderr.txt").read_text()
    on_block = json.loads((FIXTURE / "outputs" / "on_block.json").read_text())
    assert {p["compiler"] for p in on_block["programs"]} == {"XLA:TPU"}
    assert all(p["measured"]["calls"] == 5 and p["measured"]["estimate"]["chip"] == "v5e" for p in on_block["programs"])
    closing = (FIXTURE / "outputs" / "linear_on_tpu.txt").read_text().strip().splitlines()[-1]
    assert "XLA:TPU" in closing and "XLA:CPU" not in closing


@pytest.mark.slow
@pytest.mark.skipif(not LIBTPU_SHIPS, reason="libtpu ships for Linux x86-64 only")
@pytest.mark.skipif(metadata.version("jax") != RUN_JAX, reason=f"the run's compiler is JAX {RUN_JAX}'s libtpu")
def test_a_one_chip_target_compiles_and_carries_the_run_s_profile(tmp_path):
    result = subprocess.run([PYTHON, "-m", "shardscope", "check", str(TRAINER), "--devices", "1", "--target",
                             "tpu:v5e:1x1", "--profile-dir", str(AHEAD), "--json"],
                            env={**os.environ, "TRAINER_DEVICES": "1"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["unavailable_targets"] == [] and set(data["targets"]) == {"tpu:v5e:1x1"}
    for program in data["programs"]:
        measured = program["measured"]
        assert measured["on_target"] == "tpu:v5e:1x1" and measured["calls"] == 5 and measured["machine"] == "TPU v5 Lite"


@pytest.mark.skipif(not LIBTPU_SHIPS, reason="libtpu ships for Linux x86-64 only")
def test_a_one_chip_v5e_compiles(shardscope_cli):
    """``tpu:v5e:1x1``, what a one-chip VM is: libtpu's default host bounds (2x2x1) refuse it, so
    it is described as a host of its one chip; a shape no slice has (``v5e:3x3``) stays refused."""
    result = shardscope_cli("check", "linear", "--target", "tpu:v5e:1x1", "--json")
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert data["unavailable_targets"] == [] and data["targets"]["tpu:v5e:1x1"]["devices"] == 1
    refused = shardscope_cli("check", "linear", "--target", "tpu:v5e:3x3")
    assert refused.returncode == 2 and "libtpu does not know the topology 'v5e:3x3'" in refused.stderr
