"""The targets' compilers stay out of plain JAX's way (issue 45, item 16).

libtpu and JAX's CUDA plugin installed into ``site-packages`` make every JAX program of the
environment print some 30 lines at its first array on a machine without a TPU or CUDA. Kept in
shardscope's own folder (:mod:`shardscope.targets.compilers`), JAX never finds them, and
shardscope loads them when a ``--target`` asks. And ``report --target`` starts JAX as quietly as
``check --target`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _support import DEMOS, PYTHON, ROOT

from test_targets import needs_libtpu


@pytest.mark.slow
@needs_libtpu
def test_report_with_a_target_prints_nothing_on_stderr():
    result = subprocess.run([PYTHON, "-m", "shardscope", "report", str(DEMOS / "linear.py"), "-r", "1", "--target",
                             "tpu:v5e:2x2"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no "All log messages before absl::InitializeLog()", no cudart_stub lines


def test_the_compilers_folder_is_the_environments_own_or_the_users(monkeypatch, tmp_path):
    from shardscope.targets import compilers

    monkeypatch.delenv(compilers.ENV, raising=False)
    assert compilers.compilers_dir() == compilers.Path(sys.prefix) / "shardscope-compilers"
    fresh = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"], capture_output=True,
                           text=True, timeout=60, check=True)
    # no import path of a fresh process holds it, so plain JAX does not look there (shardscope adds it
    # to its own process's path when it loads the CUDA plugin for a target: a test before may have)
    assert str(compilers.compilers_dir()) not in json.loads(fresh.stdout)
    monkeypatch.setenv(compilers.ENV, str(tmp_path))
    assert compilers.compilers_dir() == tmp_path and compilers.private_libtpu() is None
    assert compilers.private_versions() == {}


def test_the_pins_are_the_installed_jaxs():
    import importlib.metadata

    from shardscope.targets import compilers

    version = importlib.metadata.version("jax")
    (libtpu,) = [r for r in importlib.metadata.requires("jax") if r.startswith("libtpu") and 'extra == "tpu"' in r]
    assert compilers.requirements(["tpu", "gpu"]) == [libtpu.split(";")[0].strip(), f"jax-cuda12-plugin=={version}",
                                                     f"jax-cuda12-pjrt=={version}"]


def test_install_fetches_only_what_the_folder_does_not_hold(monkeypatch, tmp_path):
    """Run again (make does on every new venv), the command fetches nothing the folder holds at
    the installed jax's pins: a libtpu 0.0.42.1 is a ``0.0.42.*``, not a ``0.0.4.*``; a plugin
    0.10.1 is not a 0.10.2; the PJRT package is not there."""
    from shardscope.targets import compilers

    for name, version in (("libtpu", "0.0.42.1"), ("jax_cuda12_plugin", "0.10.1")):
        info = tmp_path / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    monkeypatch.setenv(compilers.ENV, str(tmp_path))
    pins = ["libtpu==0.0.42.*", "jax-cuda12-plugin==0.10.2", "jax-cuda12-pjrt==0.10.2"]
    assert compilers.missing(pins) == ["jax-cuda12-plugin==0.10.2", "jax-cuda12-pjrt==0.10.2"]
    assert compilers.missing(["libtpu==0.0.4.*", "libtpu==0.0.42.1", "jax-cuda12-plugin==0.10.1"]) == ["libtpu==0.0.4.*"]


_PLAIN_JAX = "import jax, jax.numpy as jnp; jnp.ones(3).block_until_ready(); print(jax.devices()[0].platform)"


_ON_THE_PATH = ("import importlib.util; "
                "print(importlib.util.find_spec('libtpu') is None and importlib.util.find_spec('jax_cuda12_plugin') is None)")


def _environment_without_compilers() -> str | None:
    """A Python whose environment has jax but neither libtpu nor the CUDA plugin on its path, with
    shardscope's compilers in its own folder: ``SHARDSCOPE_TEST_BARE_PYTHON``, else this one where
    ``make`` installed it so (Linux x86-64), else None."""
    from shardscope.targets import compilers

    if os.environ.get("SHARDSCOPE_TEST_BARE_PYTHON"):
        return os.environ["SHARDSCOPE_TEST_BARE_PYTHON"]
    if not {"libtpu", "jax-cuda12-plugin"} <= set(compilers.private_versions()):
        return None
    plain = subprocess.run([sys.executable, "-c", _ON_THE_PATH], capture_output=True, text=True, timeout=60)
    return sys.executable if plain.stdout.strip() == "True" else None


@pytest.mark.slow
def test_plain_jax_beside_shardscopes_compilers_is_silent_and_a_target_still_compiles():
    python = _environment_without_compilers()
    if python is None:
        pytest.skip("the compilers are not (only) in shardscope's own folder here, and SHARDSCOPE_TEST_BARE_PYTHON "
                    "names no such environment")
    env = {k: v for k, v in os.environ.items() if k != "TPU_LIBRARY_PATH"}  # libtpu's start in this process sets it
    plain = subprocess.run([python, "-c", _PLAIN_JAX], capture_output=True, text=True, timeout=300, env=env)
    assert plain.returncode == 0 and plain.stdout.strip() == "cpu" and plain.stderr == "", plain.stderr
    checked = subprocess.run([python, "-m", "shardscope", "check", str(DEMOS / "gspmd_accumulate.py"), "--target",
                              "tpu:v5e:2x4", "--target", "gpu:h100:8", "--json"], capture_output=True, text=True,
                             cwd=ROOT, timeout=600, env=env)
    assert checked.returncode in (0, 1), checked.stderr
    assert checked.stderr == ""
    assert sorted(json.loads(checked.stdout)["targets"]) == ["gpu:h100:8", "tpu:v5e:2x4"]
