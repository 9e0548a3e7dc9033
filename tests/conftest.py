"""Test set-up: real JAX on 8 simulated CPU devices, fixed before any array exists."""

from __future__ import annotations

import contextlib
import functools
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from shardscope.pipeline.devices import ensure_devices

MAX_DEVICES = 8
ensure_devices(MAX_DEVICES)

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ROOT / "demos"


@functools.lru_cache(maxsize=None)
def _analysis(demo: str, function: str | None, devices: int, chunk_size: int | None, repeats: int):
    from shardscope.pipeline.run import analyze
    from shardscope.plans.settings import Settings

    settings = Settings(path=DEMOS / demo, function=function, devices=devices, chunk_size=chunk_size, repeats=repeats)
    return analyze(settings)


@pytest.fixture(scope="session")
def analysis_of():
    """``analysis_of("linear.py", devices=2, chunk_size=16)``: an analysis, cached per session."""

    def get(demo: str, function: str | None = None, devices: int = 2, chunk_size: int | None = None, repeats: int = 3):
        return _analysis(demo, function, devices, chunk_size, repeats)

    return get


@pytest.fixture
def shardscope_cli(capfd) -> Callable[..., subprocess.CompletedProcess]:
    """``shardscope_cli("report", FILE, ..., cwd=None)``: ``shardscope.cli.main`` in this process,
    with its exit status, stdout and stderr as ``run_cli`` gives them (read at the file
    descriptors, so output that bypasses ``sys.stdout`` is seen too).

    For what a test checks in the command's output and status. JAX here has already started with
    this process's 8 devices: a test that needs another device count, a real signal, the
    interpreter's own exit or a fresh import uses ``run_cli`` (a new process).
    """
    from shardscope.cli import main

    def run(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
        argv = [str(a) for a in args]
        capfd.readouterr()  # what came before is not this command's
        with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
            try:
                status = main(argv)
            except SystemExit as exc:  # argparse: a usage error, --help, --version
                status = 0 if exc.code is None else exc.code
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["shardscope", *argv], status, out, err)

    return run
