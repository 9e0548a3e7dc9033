"""Several targets, one that cannot be compiled for here (issue 45, item 17): the others run and
give their results, the missing one is reported after them, and the exit status is 2.

libtpu is hidden from a fresh process (``_hidden_compilers``: as in an environment without it); the
GPU's compiler (JAX's CUDA plugin) stays. The expected collective comes from the program: one psum
of the accumulated gradient over ``data``.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from _hidden_compilers import environment_without
from _support import DEMOS, PYTHON, ROOT, in_one_process

from test_gpu_targets import needs_plugin
from test_targets import needs_libtpu


def _without_libtpu(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "shardscope", *args], capture_output=True, text=True, cwd=ROOT,
                          env=environment_without(tmp_path, "tpu"), timeout=600)


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("shardscope: error:")]


@pytest.mark.slow
@needs_plugin
def test_check_and_report_without_libtpu_give_the_gpus_results_and_say_the_tpu_was_not_compiled_for(tmp_path):
    """check and report, each as text and as JSON, in one fresh process without libtpu (four tests,
    a process each, before: what each asserted is asserted of its command here; the process is
    the point only as far as libtpu is hidden at its start, which holds for all four)."""
    check = ["check", str(DEMOS / "gspmd_accumulate.py"), "--target", "tpu:v5e:2x4", "--target", "gpu:h100:8"]
    report = ["report", str(DEMOS / "linear.py"), "-r", "1", "--target", "tpu:v5e:2x2", "--target", "gpu:h100:4"]
    results = in_one_process(check, [*check, "--json"], report, [*report, "--json"],
                             env=environment_without(tmp_path, "tpu"))
    check_text, check_json, report_text, report_json = results

    for result in (check_text, check_json):
        assert result.returncode == 2, result.stderr
        assert _errors(result.stderr) == ["shardscope: error: tpu:v5e:2x4 was not compiled for: Compiling for a "
                                          "TPU target needs libtpu, which is not installed."]
    data = json.loads(check_json.stdout)
    assert list(data["targets"]) == ["gpu:h100:8"] and data["exit_code"] == 2
    assert [u["target"] for u in data["unavailable_targets"]] == ["tpu:v5e:2x4"]
    assert "shardscope[tpu]" in data["unavailable_targets"][0]["hint"]
    text = check_text.stdout
    assert "gpu:h100:8: each collective the target runs" in text
    assert "check passed on gpu:h100:8" in text or "check failed on gpu:h100:8" in text
    assert "tpu:v5e:2x4:" not in text

    for result in (report_text, report_json):
        assert result.returncode == 2, result.stderr
        assert _errors(result.stderr) == ["shardscope: error: tpu:v5e:2x2 was not compiled for: Compiling for a "
                                          "TPU target needs libtpu, which is not installed."]
    data = json.loads(report_json.stdout)  # as check --json has them: the missing target beside the others' plans
    assert list(data["targets"]) == ["gpu:h100:4"]
    (missing,) = data["unavailable_targets"]
    assert missing["target"] == "tpu:v5e:2x2" and "needs libtpu" in missing["error"]
    assert "shardscope[tpu]" in missing["hint"]
    assert "gpu:h100:4: 4 x NVIDIA H100" in report_text.stdout


@pytest.mark.slow
@needs_plugin
@needs_libtpu
def test_a_topology_libtpu_does_not_know_beside_a_gpu_is_reported_after_the_gpus_results(tmp_path):
    result = subprocess.run([PYTHON, "-m", "shardscope", "check", str(DEMOS / "gspmd_accumulate.py"), "--target",
                             "tpu:v9z:2x4", "--target", "gpu:h100:8"], capture_output=True, text=True, cwd=ROOT,
                            timeout=600)
    assert result.returncode == 2, result.stderr
    assert "gpu:h100:8: each collective the target runs" in result.stdout
    (error,) = _errors(result.stderr)
    assert error.startswith("shardscope: error: tpu:v9z:2x4 was not compiled for: libtpu does not know the topology")


@pytest.mark.slow
def test_the_only_target_missing_is_still_one_message_before_the_file_loads(tmp_path):
    result = _without_libtpu(tmp_path, "check", str(DEMOS / "gspmd_accumulate.py"), "--target", "tpu:v5e:2x4")
    assert result.returncode == 2
    assert result.stdout == ""
    assert _errors(result.stderr) == ["shardscope: error: Compiling for a TPU target needs libtpu, which is not installed."]
