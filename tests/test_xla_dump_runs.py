"""``check --xla-dump`` of a user's jit-with-shardings trainer (``_profiled_trainer.py``), dumped
for real in subprocesses (issue 52): the fix names every argument of the step as ``check FILE``
does, a folder holding an earlier run's compilation of the step reads the newest and says
which, and the run's own profile goes on the dumped plan."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from _support import PYTHON

TESTS = Path(__file__).parent
TRAINER = TESTS / "_profiled_trainer.py"


def _dumped_run(folder: Path, micro: int, profile: Path | None = None) -> Path:
    """The dump folder of one run of the trainer's train step (``micro`` micro-batches), with its
    profile of 5 calls in ``profile`` when given."""
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["XLA_FLAGS"] = "--xla_dump_to={folder} --xla_dump_hlo_module_re=train_step"
        import jax
        jax.config.update("jax_num_cpu_devices", 8)
        sys.path.insert(0, {str(TESTS)!r})
        import _profiled_trainer as t
        state = jax.tree.map(t._filled, t.params)
        batch = t._filled(t.xs), t._filled(t.ys)
        state = t.train_step(state, *batch)
        if {str(profile) if profile else ""!r}:
            jax.profiler.start_trace({str(profile)!r})
            for _ in range(5):
                state = t.train_step(state, *batch)
            jax.block_until_ready(state)
            jax.profiler.stop_trace()
        jax.block_until_ready(state)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}  # a cached module is not compiled, nor dumped
    env["TRAINER_MICRO"] = str(micro)
    subprocess.run([PYTHON, "-c", script], check=True, capture_output=True, env=env, timeout=300)
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    """``(the run's dump, its profile, an earlier run's dump with 8 micro-batches)``."""
    base = tmp_path_factory.mktemp("trainer_runs")
    earlier = _dumped_run(base / "earlier", 8)
    dump = _dumped_run(base / "dump", 4, base / "profile")
    return dump, base / "profile", earlier


def _step_file(folder: Path) -> Path:
    (path,) = folder.glob("*jit_train_step*after_optimizations.txt")
    return path


def test_the_dump_s_fix_passes_every_argument_as_the_file_s_does(runs, shardscope_cli):
    dump, _, _ = runs
    from_dump = " ".join(shardscope_cli("check", "--xla-dump", dump).stdout.split())
    from_file = " ".join(shardscope_cli("check", TRAINER, "-f", "train_step").stdout.split())
    in_specs = re.search(r"in_specs=(\(P\(.*?\)\)),", from_file).group(1)
    assert in_specs == "(P(), P(None, 'data'), P(None, 'data'))"  # params, xs, ys
    assert f"in_specs={in_specs}" in from_dump


def _two_runs(tmp_path: Path, earlier: Path, later: Path, older_name: str, newer_name: str) -> tuple[Path, Path, Path]:
    """``(folder, older, newer)``: the two runs' step modules in one folder, the earlier run's
    written an hour before the later's, under the given module file names."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    older, newer = mixed / older_name, mixed / newer_name
    older.write_text(_step_file(earlier).read_text())
    newer.write_text(_step_file(later).read_text())
    now = time.time()
    os.utime(older, (now - 3600, now - 3600))
    os.utime(newer, (now, now))
    return mixed, older, newer


def _loop_trips(stdout: str) -> tuple[int, ...]:
    """The one loop's trip counts of the one program ``check --json`` read."""
    (program,) = json.loads(stdout)["programs"]
    (loop,) = {tuple(c["loop_trip_counts"]) for c in program["compiled_collectives"] if c["loop_trip_counts"]}
    return loop


def test_an_earlier_run_s_compilation_in_the_folder_is_passed_over_and_said(runs, tmp_path, shardscope_cli):
    dump, _, earlier = runs
    # the older numbered higher: another process's count
    mixed, _, newer = _two_runs(tmp_path, earlier, dump, "module_0099.jit_train_step.cpu_after_optimizations.txt",
                                "module_0014.jit_train_step.cpu_after_optimizations.txt")
    result = shardscope_cli("check", "--xla-dump", mixed, "--json")
    trip = int(re.search(r'"known_trip_count":\{"n":"(\d+)"\}', newer.read_text()).group(1))
    assert _loop_trips(result.stdout) == (trip,) == (4,)  # the newer run's 4 micro-batches, not the earlier's 8
    said = " ".join(result.stderr.split())
    assert "2 compilations of jit_train_step: read module_0014" in said and "module_0099" in said


def test_an_older_compilation_named_with_f_is_read_and_not_called_the_newest(runs, tmp_path, shardscope_cli):
    dump, _, earlier = runs
    mixed, older, _ = _two_runs(tmp_path, earlier, dump, "module_0020.jit_train_step.cpu_after_optimizations.txt",
                                "module_0024.jit_train_step.cpu_after_optimizations.txt")
    result = shardscope_cli("check", "--xla-dump", mixed, "-f", older.name, "--json")
    assert _loop_trips(result.stdout) == (8,)  # the earlier run's 8 micro-batches: the file asked for
    said = " ".join(result.stderr.split())
    assert "read module_0020.jit_train_step.cpu_after_optimizations.txt, as asked, not the newest" in said


def test_the_run_s_profile_goes_on_its_dumped_plan(runs, shardscope_cli):
    dump, profile, _ = runs
    result = shardscope_cli("check", "--xla-dump", dump, "--profile-dir", profile, "--json")
    assert result.returncode == 1, result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    measured = program["measured"]
    (name,) = re.findall(r"^\s+%?([\w.\-]+) = [^=]*? all-reduce\(", _step_file(dump).read_text(), re.M)
    assert measured["calls"] == 5 and measured["devices"] == 8 and measured["collectives"][0]["name"] == name
    assert measured["collectives"][0]["runs_per_call"] == 4


def test_another_run_s_profile_on_a_dump_is_one_message(runs, shardscope_cli):
    _, profile, earlier = runs  # the 8-micro-batch run's dump, the 4-micro-batch run's profile
    result = shardscope_cli("check", "--xla-dump", earlier, "--profile-dir", profile)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert re.search(r"runs the loop [\w.]+ 4 times per call, this program 8", " ".join(result.stderr.split()))
