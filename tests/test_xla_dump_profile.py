"""``check --xla-dump`` with ``--profile-dir``: the real run's plan, read from its dump, carries the
real run's times, mapped by the module's own instruction names.

A small step (``_xla_dump_step.py``) runs for real in a subprocess on 8 simulated CPU devices,
with ``XLA_FLAGS=--xla_dump_to=DUMP``, and is called ``CALLS`` more times under JAX's profiler.
The numbers expected come from the dumped text (each all-reduce, read by a regular expression
here, and its loop's known trip count) and from the calls written in the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from _support import PYTHON, run_main

pytest.importorskip("xprof")

CALLS = 5
TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """``(dump folder, profile folder)`` of one real run: one call, then CALLS under the profiler."""
    folder = tmp_path_factory.mktemp("real_run")
    dump, profile = folder / "dump", folder / "profile"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(TESTS)!r})
        os.environ["XLA_FLAGS"] = "--xla_dump_to={dump}"
        import jax
        jax.config.update("jax_num_cpu_devices", 8)
        import _xla_dump_step as s
        step, args = s.step_and_arguments()
        jax.block_until_ready(step(*args))
        jax.profiler.start_trace({str(profile)!r})
        for _ in range({CALLS}):
            jax.block_until_ready(step(*args))
        jax.profiler.stop_trace()
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}  # a cached module is not compiled, nor dumped
    subprocess.run([PYTHON, "-c", script], check=True, capture_output=True, env=env, timeout=300)
    return dump, profile


def test_the_dumped_plan_carries_the_profiled_times(run):
    dump, profile = run
    (module,) = dump.glob("*jit_step*cpu_after_optimizations.txt")
    text = module.read_text()
    names = re.findall(r"^\s+%?([\w.\-]+) = \S+ all-reduce\(", text, re.M)
    (trip,) = re.findall(r' while\(.*"known_trip_count":\{"n":"(\d+)"\}', text)
    result = run_main("check", "--xla-dump", dump, "--profile-dir", profile, "--json")
    assert result.returncode == 1, result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    measured = program["measured"]
    assert measured["module"] == "jit_step" and measured["calls"] == CALLS and measured["devices"] == 8
    assert measured["matched_by"] == "instruction names" and measured["missing"] == []
    rows = {row["name"]: row for row in measured["collectives"]}
    assert sorted(rows) == sorted(names)
    assert all(row["runs_per_call"] == int(trip) and row["per_step_s"] > 0 for row in rows.values())


def test_profile_is_refused_with_a_dump(run):
    dump, _ = run
    result = run_main("check", "--xla-dump", dump, "--profile")
    assert result.returncode == 2 and "--profile" in result.stderr and "Traceback" not in result.stderr
