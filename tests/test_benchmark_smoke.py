"""Every benchmark still runs: its smallest cell (``--smoke``), once, and what it writes renders
into its section of BENCHMARKS.md.

Each runs in a process of its own as ``make bench`` runs it, but those whose smoke cell starts no
process of its own (:data:`IN_ONE_PROCESS`): they run one after another in one fresh process
(``tests/helpers/benchmarks_in_one_process.py``), each as ``python -m benchmarks.NAME --smoke``
would, where each would spend a second of CPU starting Python, JAX and shardscope alone.

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
IN_ONE_PROCESS = ("what_if_gain", "plans_at_scale", "scaling", "layouts", "target_compile", "target_placements",
                  "compiled_parse", "cache_writes", "dispatch_steps", "step_estimate", "tpu_corpus_report",
                  "profile_kinds")
"""The benchmarks whose smoke cell runs in its own process alone (measured: none starts another), in
the order they share one: ``what_if_gain`` first, as it sets JAX's CPU device count (8, which the
others ask for too) with ``jax.config`` before the backend starts."""


def test_every_module_of_benchmarks_is_a_listed_benchmark_or_a_helper():
    """A new benchmark is smoke-tested once it is listed in benchmarks/run.py."""
    modules = {path.stem for path in (ROOT / "benchmarks").glob("*.py")}
    modules -= {"__init__"}
    assert modules == set(EVERY) | set(run.HELPERS)
    assert not set(run.BENCHMARKS) & set(run.ALONE)


def test_the_benchmarks_sharing_a_process_are_listed_ones():
    assert set(IN_ONE_PROCESS) <= set(EVERY) and len(set(IN_ONE_PROCESS)) == len(IN_ONE_PROCESS)
    assert IN_ONE_PROCESS[0] == "what_if_gain"


@pytest.mark.parametrize("name", [name for name in EVERY if name not in IN_ONE_PROCESS])
def test_the_smallest_cell_of_each_benchmark_runs_and_renders(name, tmp_path):
    if name in NEEDS_THE_TPU_EXTRA and not ON_THIS_MACHINE:
        pytest.skip("libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")
    out = tmp_path / f"{name}.json"
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--smoke", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"python -m benchmarks.{name} --smoke failed:\n{done.stderr[-4000:]}"
    if name == "layout_anchors":  # the sweep's fresh compilation cache (tens of MB) is removed, not left in /tmp
        assert json.loads(out.read_text())["cache"] is None
    _renders(name, out)


def test_the_smallest_cells_of_the_benchmarks_that_start_no_process_run_in_one_and_render(tmp_path):
    names = [name for name in IN_ONE_PROCESS if ON_THIS_MACHINE or name not in NEEDS_THE_TPU_EXTRA]
    cells = [[name, str(tmp_path / f"{name}.json")] for name in names]
    helper = ROOT / "tests" / "helpers" / "benchmarks_in_one_process.py"
    done = subprocess.run([sys.executable, str(helper), json.dumps(cells)], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout)
    assert list(results) == names
    failed = {name: result["error"][-3000:] for name, result in results.items() if result["error"] is not None}
    assert not failed, "\n".join(f"benchmarks.{name} --smoke failed:\n{error}" for name, error in failed.items())
    for name in names:
        _renders(name, tmp_path / f"{name}.json")


def _renders(name: str, out) -> None:
    """The smoke cell's JSON file ``out`` is a smoke run's and renders into the benchmark's section."""
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
