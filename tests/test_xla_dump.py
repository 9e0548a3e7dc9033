"""``check --xla-dump``: the plan of a real run read from the modules XLA dumped for it.

A small step (``_xla_dump_step.py``) runs for real in a subprocess with
``XLA_FLAGS=--xla_dump_to=DIR`` on 8 simulated CPU devices. The plan read from its dump is
checked against numbers read from the dumped text here (regular expressions written in the
test: each all-reduce, the while loop's known trip count, the bytes of each operand's shape)
and against the plan shardscope builds by tracing and compiling the same program in this process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from math import prod
from pathlib import Path

import pytest

import _xla_dump_step as dumped_step
import shardscope
from _support import PYTHON, run_main
from shardscope.pipeline.xla_dump import dump_check

STEP = Path(__file__).parent / "_xla_dump_step.py"
DTYPE_BYTES = {"f32": 4, "bf16": 2, "s32": 4}


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    """The folder a real run of the step wrote with --xla_dump_to."""
    folder = tmp_path_factory.mktemp("xla_dump")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}  # a cached module is not compiled, nor dumped
    subprocess.run([PYTHON, str(STEP), str(folder)], check=True, capture_output=True, env=env, timeout=300)
    return folder


def _step_file(folder: Path) -> Path:
    (path,) = folder.glob("*jit_step*cpu_after_optimizations.txt")
    return path


def _read_by_hand(text: str) -> tuple[dict[str, int], int]:
    """``({all-reduce name: bytes of its operand}, the while's known trip count)`` from the text."""
    found = {}
    for name, dtype, dims in re.findall(r"^\s+%?([\w.\-]+) = (\w+)\[([\d,]*)\]\S* all-reduce\(", text, re.M):
        found[name] = DTYPE_BYTES[dtype] * prod(int(d) for d in dims.split(",") if d)
    (trip,) = re.findall(r' while\(.*"known_trip_count":\{"n":"(\d+)"\}', text)
    return found, int(trip)


def test_the_plan_of_a_real_dump_is_read_from_its_text_and_is_the_traced_plan(dump):
    (inspection,) = dump_check(dump).inspections
    plan = inspection.compiled
    assert inspection.function == "jit_step" and inspection.dumped == _step_file(dump).name
    by_hand, trip = _read_by_hand(_step_file(dump).read_text())
    assert trip == dumped_step.MICRO and len(by_hand) == 2
    assert {c.name: c.bytes_per_execution for c in plan.collectives} == by_hand
    for c in plan.collectives:
        assert c.kind == "all-reduce" and c.loop_trip_counts == (trip,) and c.executions == trip
        assert c.source.startswith("_xla_dump_step.py:") and c.op_name.startswith("jit(step)/shard_map/while/body/")
    step, args = dumped_step.step_and_arguments()
    traced = shardscope.inspect(step, *args).compiled

    def facts(p):
        return sorted((c.name, c.kind, c.loop_trip_counts, c.executions, c.bytes_per_execution, c.source,
                       c.verdict_kind) for c in p.collectives)

    assert facts(plan) == facts(traced)
    assert plan.executed_collectives == traced.executed_collectives == 2 * trip
    assert [c.verdict_kind for c in plan.flagged] == ["deferrable"]


def test_check_reads_a_dump_folder_and_one_module_file(dump):
    by_hand, trip = _read_by_hand(_step_file(dump).read_text())
    for path in (dump, _step_file(dump)):
        result = run_main("check", "--xla-dump", path, "--json")
        assert result.returncode == 1, result.stderr  # the deferrable all-reduce fails the check
        (program,) = json.loads(result.stdout)["programs"]
        assert program["function"] == "jit_step" and program["flagged"] == 1
        rows = {row["name"]: row for row in program["compiled_collectives"]}
        assert {name: row["bytes"] for name, row in rows.items()} == by_hand
        assert all(row["loop_trip_counts"] == [trip] for row in rows.values())
    words = " ".join(run_main("check", "--xla-dump", dump).stdout.split())
    assert f"read from {_step_file(dump).name}, no jaxpr" in words and "deferrable" in words and "Fix:" in words


def test_a_module_copied_with_windows_line_endings_reads_as_written(dump, tmp_path):
    """A dump that went through a Windows editor or git's autocrlf: the same plan, counted by hand."""
    by_hand, trip = _read_by_hand(_step_file(dump).read_text())
    crlf = tmp_path / _step_file(dump).name
    crlf.write_bytes(_step_file(dump).read_bytes().replace(b"\n", b"\r\n"))
    result = run_main("check", "--xla-dump", crlf, "--json")
    assert result.returncode == 1, result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    assert {row["name"]: row["bytes"] for row in program["compiled_collectives"]} == by_hand
    assert all(row["loop_trip_counts"] == [trip] for row in program["compiled_collectives"])


def test_a_folder_with_several_steps_names_them_and_f_picks_one(dump, tmp_path):
    text = _step_file(dump).read_text()
    (tmp_path / "module_0001.jit_step.cpu_after_optimizations.txt").write_text(text)
    (tmp_path / "module_0002.jit_eval.cpu_after_optimizations.txt").write_text(
        text.replace("HloModule jit_step", "HloModule jit_eval", 1))
    result = run_main("check", "--xla-dump", tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "2 modules with collectives" in result.stderr and "jit_step" in result.stderr and "jit_eval" in result.stderr
    picked = run_main("check", "--xla-dump", tmp_path, "-f", "eval", "--json")
    assert picked.returncode == 1 and json.loads(picked.stdout)["programs"][0]["function"] == "jit_eval"


def test_a_step_compiled_twice_to_the_same_module_is_one_program_and_another_shape_is_kept(dump, tmp_path):
    """The same step compiled again at the same shapes (a cache cleared, a second process) is the
    same module but for its source-location table's row of the line that called it: one entry,
    said to be compiled twice; a compilation to another module stays an entry of its own."""
    text = _step_file(dump).read_text()
    at = text.index(" line=", text.index("\nFileLocations\n"))
    called_elsewhere = text[:at] + " line=1" + text[at + len(" line="):]  # line=9 -> line=19: the call's row alone
    assert called_elsewhere != text
    first, again = (tmp_path / f"module_00{n}.jit_step.cpu_after_optimizations.txt" for n in (14, 16))
    first.write_text(text)
    again.write_text(called_elsewhere)
    os.utime(first, (1_000_000, 1_000_000))  # written first
    (tmp_path / "module_0020.jit_eval.cpu_after_optimizations.txt").write_text(
        text.replace("HloModule jit_step", "HloModule jit_eval", 1))
    listed = run_main("check", "--xla-dump", tmp_path)
    said = " ".join(listed.stderr.split())
    assert listed.returncode == 2 and "Traceback" not in listed.stderr
    assert ("--xla-dump holds 2 modules with collectives: jit_step (module_0016.jit_step.cpu_after_optimizations.txt, "
            "compiled 2 times to this same module, 2 collectives), jit_eval (module_0020") in said
    assert said.count("jit_step (") == 1 and "module_0014" not in said

    (tmp_path / "module_0020.jit_eval.cpu_after_optimizations.txt").unlink()
    read = run_main("check", "--xla-dump", tmp_path, "--json")
    assert read.returncode == 1 and len(json.loads(read.stdout)["programs"]) == 1
    said = " ".join(read.stderr.split())
    assert ("holds 2 compilations of jit_step to the same module (one program, compiled 2 times): read "
            "module_0016.jit_step.cpu_after_optimizations.txt, the newest") in said
    assert "the same module in module_0014.jit_step.cpu_after_optimizations.txt" in said
    assert "Pass one file to read another" not in said  # either file is the same program

    other = tmp_path / "module_0030.jit_step.cpu_after_optimizations.txt"  # compiled at another batch size
    other.write_text(text.replace("f32[4,8,16]", "f32[4,4,16]"))
    kept = " ".join(run_main("check", "--xla-dump", tmp_path, "-f", "module_0016.jit_step.cpu_after_optimizations.txt",
                             "--json").stderr.split())
    assert "holds 3 compilations of jit_step: read module_0016" in kept
    assert "the same module in module_0014" in kept and "another module in module_0030" in kept
    assert "Pass one file to read another" in kept


def test_each_bad_input_is_one_message_and_exit_2(dump, tmp_path):
    text = _step_file(dump).read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no module here\n")
    truncated = tmp_path / "module_0003.jit_step.cpu_after_optimizations.txt"
    truncated.write_text(text[: text.index("ENTRY") + 200])
    not_hlo = tmp_path / "notes.txt"
    not_hlo.write_text("loss 0.31 at step 100\n")
    cases = {
        tmp_path / "missing": "no such file or folder",
        empty: "no compiled module (*after_optimizations.txt)",
        truncated: "is not closed: the text ends inside it; was the run killed while writing its dump?",
        not_hlo: "is not HLO text",
    }
    for path, words in cases.items():
        result = run_main("check", "--xla-dump", path)
        assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.count("error:") == 1
    neither = run_main("check")
    assert neither.returncode == 2 and "or --xla-dump PATH" in neither.stderr
    both = run_main("check", "step.py", "--xla-dump", dump)
    assert both.returncode == 2 and "no FILE" in both.stderr
    traced_flags = run_main("check", "--xla-dump", dump, "--what-if")
    assert traced_flags.returncode == 2 and "--what-if" in traced_flags.stderr


def test_a_tpu_dump_is_the_tpu_compiler_s_plan():
    """A real TPU v5e dump (``fixtures/xla_dump/tpu_v5e``, written by its ``capture.py`` on one
    chip): its files are named ``module_0011.jit_step.cl_<n>.after_optimizations.txt``, with no
    backend in the name; the TPU's tiled layouts in the text say it."""
    folder = Path(__file__).parent / "fixtures" / "xla_dump" / "tpu_v5e"
    text = next(folder.glob("*after_optimizations.txt")).read_text()
    assert "T(8,128)" in text and "tpu" not in next(folder.glob("*after_optimizations.txt")).name
    (inspection,) = dump_check(folder).inspections
    (loop,) = inspection.compiled.loops
    assert inspection.compiled.backend == "tpu" and inspection.compiled.collectives == ()  # one chip
    written = int(re.search(r"fori_loop\(0, (\d+),", (folder / "capture.py").read_text()).group(1))
    assert loop.trip_count == written == 4  # XLA:TPU printed no known_trip_count: the loop's own bound says it
    result = json.loads(run_main("check", "--xla-dump", folder, "--json").stdout)
    assert result["judged_on"] == ["XLA:TPU"] and result["exit_code"] == 0


def test_a_stored_jax_0_12_dump_with_elements_read_in_place(dump):
    """The same step dumped by jax 0.12.0.1 (``fixtures/xla_dump/cpu_jax-0.12.0.1``, written by
    ``_xla_dump_step.py``): its XLA prints get-tuple-elements in place (``%param.12#2``). Read on
    either version, its plan is this version's live dump's: the same all-reduces (by the bytes and
    loop read from its text here), runs and verdicts."""
    folder = Path(__file__).parent / "fixtures" / "xla_dump" / "cpu_jax-0.12.0.1"
    text = next(folder.glob("*after_optimizations.txt")).read_text()
    assert re.search(r"%param\.\d+#\d", text)
    by_hand, trip = _read_by_hand(text)
    (stored,) = dump_check(folder).inspections
    assert {c.name: c.bytes_per_execution for c in stored.compiled.collectives} == by_hand
    assert all(o in stored.compiled.module.by_name for i in stored.compiled.module.instructions() for o in i.operands)
    (live,) = dump_check(dump).inspections

    def facts(plan):
        return sorted((c.kind, c.loop_trip_counts, c.executions, c.bytes_per_execution, c.verdict_kind)
                      for c in plan.collectives)

    assert facts(stored.compiled) == facts(live.compiled) and {c.loop_trip_counts for c in live.compiled.collectives} == {(trip,)}


def test_profile_dir_needs_no_converter(tmp_path, monkeypatch, shardscope_cli):
    """``--profile-dir`` reads a profile with JAX's own reader: without XProf's package it still
    reads (here an empty folder: the one message is the folder's, not a missing extra's)."""
    folder = Path(__file__).parent / "fixtures" / "xla_dump" / "cpu_jax-0.12.0.1"
    for name in ["xprof", *(name for name in sys.modules if name.startswith("xprof."))]:
        monkeypatch.setitem(sys.modules, name, None)  # xprof not installed: its import fails (restored after)
    result = shardscope_cli("check", "--xla-dump", folder, "--profile-dir", tmp_path)
    assert result.returncode == 2, result.stderr
    assert "is empty: no profile in it" in result.stderr and "xprof" not in result.stderr
    assert "Traceback" not in result.stderr
