"""What ``--target`` can refuse from its name alone, before JAX starts and the user's file loads.

A slice of more chips than shardscope simulates CPU devices, and a machine without libtpu, are
told in about a second: before, the commands imported JAX (3 s) and libtpu listed a million
devices (22 s) first. Each case runs the command in a fresh interpreter and looks, after it
returned, at which modules it imported and whether the user's file ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from _hidden_compilers import environment_without
from _support import ROOT

from shardscope.errors import SettingsError
from shardscope.targets import compile as targets, registry

_COMMAND = textwrap.dedent("""
    import json, sys
    from shardscope.cli import main
    try:
        status = main(sys.argv[1:])
    except SystemExit as exc:
        status = exc.code
    print(json.dumps({"status": status, "jax": "jax" in sys.modules, "libtpu": "libtpu" in sys.modules}))
""")


def _run(tmp_path, mode: str, *args: str) -> tuple[dict, str]:
    """The command's status and what it imported, and its stderr; the program file marks its import.
    ``mode`` ``no-libtpu``: libtpu not installed, as on a machine without it."""
    marker = tmp_path / "imported"
    program = tmp_path / "step.py"
    program.write_text(f"open({str(marker)!r}, 'w').close()\nimport shardscope\n")
    env = {k: v for k, v in os.environ.items() if k != "TPU_LIBRARY_PATH"}  # importing jax here set it
    if mode == "no-libtpu":
        env = environment_without(tmp_path, "tpu")
    done = subprocess.run([sys.executable, "-c", _COMMAND, *args, str(program)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    result = json.loads(done.stdout.splitlines()[-1])
    result["file_imported"] = marker.exists()
    return result, done.stderr


@pytest.mark.parametrize("command", [["check"], ["report"], ["sweep"], ["open"]])
def test_a_slice_larger_than_the_simulated_devices_is_refused_before_jax_starts(tmp_path, command):
    result, stderr = _run(tmp_path, "libtpu", *command, "--target", "tpu:v5e:1000x1000")
    assert result == {"status": 2, "jax": False, "libtpu": False, "file_imported": False}
    # 1000 x 1000 chips, by hand; 4,096 is the cap on simulated CPU devices
    assert "tpu:v5e:1000x1000 has 1,000,000 chips" in stderr and "at most 4,096" in stderr
    assert "hint: pick a target of at most 4,096 chips, e.g. tpu:v5e:16x16" in stderr
    assert "Traceback" not in stderr and stderr.count("error:") == 1


@pytest.mark.parametrize("command", [["check"], ["report"], ["sweep"], ["open"]])
def test_without_libtpu_a_target_is_refused_before_jax_starts(tmp_path, command):
    result, stderr = _run(tmp_path, "no-libtpu", *command, "--target", "tpu:v5e:2x2")
    assert result == {"status": 2, "jax": False, "libtpu": False, "file_imported": False}, stderr
    assert "needs libtpu, which is not installed" in stderr and "pip install 'shardscope[tpu]'" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(("text", "chips"), [("tpu:v5e:100x100", 10000), ("tpu:v4:16x16x32", 8192),
                                             ("tpu:v5p:16x16x24_twisted", 6144)])
def test_the_chip_count_is_read_from_the_topology_name(text, chips):
    with pytest.raises(SettingsError, match=f"has {chips:,} chips"):
        registry.parse_target(text)


@pytest.mark.parametrize("text", ["tpu:v5e:16x32", "tpu:v4:8x8x8", "tpu:v5e:2x2", "tpu:v5p:8x8x16",
                                  "tpu:v4:16x16x16"])
def test_a_slice_within_the_cap_is_still_libtpus_to_judge(text):
    assert registry.parse_target(text).text() == text


@pytest.mark.parametrize(("text", "gpus"), [("gpu:h100:5000", 5000), ("gpu:h100:640x8", 5120)])
def test_a_gpu_target_over_the_cap_is_refused_from_its_name(text, gpus):
    """The same refusal as a slice's, in GPUs: 640 hosts of 8 is 5,120 by hand, over 4,096."""
    with pytest.raises(SettingsError) as refused:
        registry.parse_target(text)
    assert f"{text!r} has {gpus:,} GPUs" in refused.value.message and "at most 4,096" in refused.value.message
    assert refused.value.hint == "pick a target of at most 4,096 GPUs, e.g. gpu:h100:8x8"


def test_the_largest_gpu_target_within_the_cap_is_accepted():
    assert registry.parse_target("gpu:h100:512x8").text() == "gpu:h100:512x8"  # 4,096 GPUs exactly
