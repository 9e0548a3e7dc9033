"""Every benchmark still runs: its smallest cell (``--smoke``), once, in a process of its own as
``make bench`` runs it, and what it writes renders into its section of BENCHMARKS.md.

A rename in the package then fails here, not in the benchmark a user reruns from BENCHMARKS.md.
No figure is judged (a smoke cell's times mean nothing, and tests assert no timing).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest
from _support import ROOT

from benchmarks import render, run

EVERY = run.BENCHMARKS + run.ALONE
NEEDS_THE_TPU_EXTRA = {"target_compile", "target_placements", "check_at_scale", "check_ratios"}
ON_THIS_MACHINE = sys.platform.startswith("linux") and platform.machine() == "x86_64"


def test_every_module_of_benchmarks_is_a_listed_benchmark_or_a_helper():
    """A new benchmark is smoke-tested once it is listed in benchmarks/run.py."""
    modules = {path.stem for path in (ROOT / "benchmarks").glob("*.py")}
    modules -= {"__init__"}
    assert modules == set(EVERY) | set(run.HELPERS)
    assert not set(run.BENCHMARKS) & set(run.ALONE)


@pytest.mark.parametrize("name", EVERY)
def test_the_smallest_cell_of_each_benchmark_runs_and_renders(name, tmp_path):
    if name in NEEDS_THE_TPU_EXTRA and not ON_THIS_MACHINE:
        pytest.skip("libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")
    out = tmp_path / f"{name}.json"
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--smoke", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"python -m benchmarks.{name} --smoke failed:\n{done.stderr[-4000:]}"
    written = json.loads(out.read_text())
    if isinstance(written, dict):  # a list of cases (layouts) carries no mode
        assert written["mode"] == "smoke"
    # beside the committed results of the others, as `python -m benchmarks.render` would read it
    declared = next(b for b in render.benchmarks() if b.name == name)
    if declared.several:  # one file of several (a chip's): read as its benchmark reads its folder
        written = {out.stem: written}
    results = {**render.load(ROOT / "benchmarks" / "results"), name: written}
    rendered = render.render(results, {}, None)
    assert f"{'#' * declared.level} {declared.heading}\n" in rendered
