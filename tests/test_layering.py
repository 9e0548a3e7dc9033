"""The core never imports Textual; ``import shardscope`` alone does not even import JAX."""

from __future__ import annotations

import json
import pkgutil
import subprocess

import pytest

import shardscope
from _support import PYTHON, ROOT


def loaded_after(code: str) -> set[str]:
    """The top-level modules a fresh interpreter has loaded after running ``code``."""
    probe = code + "\nimport sys, json\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    result = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def core_modules() -> list[str]:
    """Every module of the package outside shardscope.app (and the __main__ entry, and the shipped demos)."""
    found = [
        m.name for m in pkgutil.walk_packages(shardscope.__path__, "shardscope.")
        if m.name.split(".")[1] not in ("app", "__main__", "demo_files")
    ]
    assert {"shardscope.pipeline.analysis", "shardscope.cli", "shardscope.render.report", "shardscope.engine.jaxpr.model",
            "shardscope.engine.dispatch.plan"} <= set(found)
    return found


@pytest.mark.slow  # a fresh interpreter's imports
def test_core_never_imports_textual():
    modules = core_modules()
    loaded = loaded_after("import shardscope\n" + "\n".join(f"import {m}" for m in modules))
    assert "jax" in loaded  # the probe really imported the analysis
    assert "textual" not in loaded


@pytest.mark.slow  # a fresh interpreter's imports
def test_running_an_analysis_never_imports_textual():
    code = (
        "from shardscope.targets.host import ensure_devices\nensure_devices(2)\n"
        "from pathlib import Path\nfrom shardscope.pipeline.run import analyze\nfrom shardscope.config.settings import Settings\n"
        "from shardscope.render.report import to_json\n"
        "a = analyze(Settings(path=Path('demos/linear.py'), repeats=1))\nto_json(a)\n"
    )
    loaded = loaded_after(code)
    assert "textual" not in loaded


def test_import_shardscope_is_cheap():
    loaded = loaded_after("import shardscope")
    assert "jax" not in loaded and "textual" not in loaded and "networkx" not in loaded


@pytest.mark.slow  # a fresh interpreter's backend
def test_loading_a_demo_file_does_not_start_the_backend():
    code = (
        "from shardscope.sources.loading import load_demo_file\n"
        "for name in ('linear', 'mlp', 'rnn', 'rbm'):\n"
        "    load_demo_file(f'demos/{name}.py')\n"
        "from jax._src import xla_bridge\nassert not xla_bridge.backends_are_initialized()\n"
    )
    loaded_after(code)


@pytest.mark.slow  # a fresh interpreter's imports
def test_headless_commands_never_import_textual():
    code = (
        "from shardscope.cli import main\n"
        "assert main(['report', 'demos/linear.py', '--json', '-r', '1']) == 0\n"
        "assert main(['report', 'demos/linear.py', '-r', '1']) == 0\n"
        "assert main(['diff', 'demos/linear.py']) == 0\n"
    )
    loaded = loaded_after(code)
    assert "rich" in loaded and "textual" not in loaded


@pytest.mark.slow  # a fresh interpreter's imports
def test_check_loads_the_what_if_only_with_what_if():
    """``check FILE`` reads a program file and a demo file without one module of the what-if
    (the 16 of shardscope.whatif and the runner that times its rewrites); ``--what-if`` loads them."""
    probe = (
        "import contextlib, io, json, sys\nfrom shardscope.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    statuses = [main(['check', 'demos/train_step.py']), main(['check', 'demos/linear.py', '--json'])]\n"
        "print(json.dumps([statuses, sorted(m for m in sys.modules if m.startswith('shardscope'))]))"
    )
    result = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    statuses, modules = json.loads(result.stdout.strip().splitlines()[-1])
    assert statuses == [1, 1]  # both checked: each has a collective in a loop that need not be there
    assert "shardscope.pipeline.check" in modules and "shardscope.engine.joined.inspection" in modules
    what_if = [m for m in modules if m.startswith("shardscope.whatif") or m.endswith(".what_if")
               or m.endswith(".what_if_programs")]
    assert what_if == []
    with_it = "import sys\nfrom shardscope.whatif import what_if\nprint(len([m for m in sys.modules if m.startswith('shardscope.whatif.')]))"
    loaded = subprocess.run([PYTHON, "-c", with_it], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert int(loaded.stdout.split()[-1]) >= 10  # what --what-if loads, so that the absence above means something
