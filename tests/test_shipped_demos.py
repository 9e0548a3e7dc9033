"""The demos ship inside the package: ``shardscope demos`` lists them, every command takes one by
name, ``shardscope`` alone opens the seed demo, and an installed wheel has them (built from the
sdist, installed into a fresh venv outside the repository, run from a directory outside it)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from _support import DEMOS, PYTHON, ROOT
from shardscope.sources.bundled import DEMO_DIR
from shardscope.cli import open_options

SHIPPED = sorted(p.stem for p in (ROOT / "shardscope" / "demo_files").glob("*.py"))


def _first_line_of_docstring(path: Path) -> str:
    return " ".join(ast.get_docstring(ast.parse(path.read_text())).split("\n\n")[0].split()).replace("``", "`")


def test_the_repository_keeps_one_copy_of_each_demo():
    assert DEMOS.is_symlink() and DEMOS.resolve() == DEMO_DIR
    assert SHIPPED == ["deep", "dispatch_step", "explicit_accumulate", "fsdp", "fsdp_accumulate", "gspmd_accumulate",
                       "linear", "mlp", "pipeline", "rbm", "reshard_clash", "rnn", "train_step", "transformer_layouts"]


def test_demos_lists_each_name_with_its_description_and_where_they_are(tmp_path, shardscope_cli):
    result = shardscope_cli("demos", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"shipped demos (in {DEMO_DIR}):"
    listed = [line.split()[0] for line in lines[1:-1]]
    assert listed == SHIPPED
    for name, line in zip(SHIPPED, lines[1:-1]):
        assert _first_line_of_docstring(DEMO_DIR / f"{name}.py") in line, name
    assert "The seed case" in next(line for line in lines if line.split()[:1] == ["linear"])
    assert "[programs" in next(line for line in lines if line.split()[:1] == ["train_step"])


def test_every_command_takes_a_shipped_demo_by_name(tmp_path, shardscope_cli):
    report = shardscope_cli("report", "linear", "-r", "1", "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert Path(data["file"]) == DEMO_DIR / "linear.py"
    # x @ W with one leaf, 2 chunks per device: naive all-reduces once per chunk, deferred once
    assert data["variants"]["naive"]["executed_collectives"] == 2
    assert data["variants"]["deferred"]["executed_collectives"] == 1

    check = shardscope_cli("check", "train_step", "--function", "step", "--json", cwd=tmp_path)
    assert check.returncode == 1, check.stderr  # step's all-reduces run in its micro-batch loop
    assert json.loads(check.stdout)["function"] == "step"

    diff = shardscope_cli("diff", "rnn.py", cwd=tmp_path)  # the name with .py works too
    assert diff.returncode == 0, diff.stderr
    assert "# shardscope: rnn.py::rnn" in diff.stdout


def test_a_name_that_is_neither_a_file_nor_a_demo_lists_the_demos(tmp_path, shardscope_cli):
    for command in ("report", "check", "open"):
        result = shardscope_cli(command, "lineaar", cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "No such file: lineaar" in result.stderr
        assert ", ".join(SHIPPED) in result.stderr and "shardscope demos lists them" in result.stderr


def test_a_file_of_the_user_wins_over_a_shipped_name(tmp_path, shardscope_cli):
    (tmp_path / "linear.py").write_text(
        "import jax, jax.numpy as jnp\nimport shardscope\n\n\n"
        "@shardscope.demo(params=jax.ShapeDtypeStruct((3,), jnp.float32), x=jax.ShapeDtypeStruct((8, 3), jnp.float32))\n"
        "def mine(W, x):\n    return x @ W\n"
    )
    result = shardscope_cli("report", "linear.py", "-r", "1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["function"] == "mine"


@pytest.mark.slow  # the explorer in a fresh process
def test_shardscope_alone_opens_the_seed_demo(tmp_path):
    settings, _ = open_options([])
    assert settings.path == DEMO_DIR / "linear.py"
    helper = ROOT / "tests" / "helpers" / "app_first_run.py"
    result = subprocess.run([PYTHON, str(helper), "-r", "1"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    shown = json.loads(result.stdout.splitlines()[-1])
    assert shown["error"] == "" and shown["plans"]["naive"]["runs"] == 2 and shown["plans"]["deferred"]["runs"] == 1


def _build_wheel_from_sdist(tmp_path: Path) -> Path:
    """The sdist of a copy of the package, then the wheel built from the sdist (as pip does)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "shardscope", source / "shardscope", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    sdist = subprocess.run(
        [PYTHON, "-c", "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))",
         str(dist)], cwd=source, capture_output=True, text=True, timeout=300, check=True,
    ).stdout.strip().splitlines()[-1]
    subprocess.run([PYTHON, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(dist), str(dist / sdist)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                   check=True)
    (wheel,) = dist.glob("shardscope-*.whl")
    return wheel


def _fresh_venv(tmp_path: Path) -> Path:
    """A venv with no shardscope; the test venv's site-packages on its path for the dependencies only
    (a path in a .pth file is not a site directory: the editable install's own .pth is not run)."""
    venv = tmp_path / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "test_venv_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.mark.slow  # builds a wheel and runs it from a fresh venv
def test_the_installed_wheel_ships_the_demos(tmp_path):
    wheel = _build_wheel_from_sdist(tmp_path)
    venv = _fresh_venv(tmp_path)
    subprocess.run([PYTHON, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300, check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    shardscope = str(venv / "bin" / "shardscope")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([shardscope, *args], cwd=elsewhere, env=env, capture_output=True, text=True,
                              timeout=300)

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import shardscope; print(shardscope.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(venv), where  # the wheel's shardscope, not the repository's
    installed = Path(where).parent / "demo_files"
    descriptions = sorted(p.name for p in (Path(where).parent / "gpu_descriptions").glob("*.txtpb"))
    assert descriptions == ["a100.txtpb", "b200.txtpb", "h100.txtpb", "h200.txtpb"]  # --target gpu:NAME:N's data

    listed = run("demos")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0] == f"shipped demos (in {installed}):"
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:-1]] == SHIPPED

    report = run("report", "linear", "-r", "1", "--json")
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert Path(data["file"]) == installed / "linear.py"
    assert data["variants"]["naive"]["executed_collectives"] == 2
