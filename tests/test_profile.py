"""Profiles on the plan (issue 46): a real jax.profiler trace on the 8 simulated CPU devices, the
TPU v5e profile captured on the chip (tests/fixtures/profiles/tpu_v5e), and each way a profile
cannot be read. Expected counts are derived by hand: calls x iterations x devices."""

from __future__ import annotations

import functools
import json
import re
import shutil
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

from _support import DEMOS
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.measured import profile_onto
from shardscope.measure.profile_capture import capture
from shardscope.measure.profile_read import ProfileError, read_profile, require_converter


FIXTURE = Path(__file__).parent / "fixtures" / "profiles" / "tpu_v5e"
TPU_RUN = next((FIXTURE / "plugins" / "profile").iterdir())
CALLS, ITERATIONS, DEVICES = 5, 4, 8
TPU_CALLS, TPU_ITERATIONS = 5, 4  # benchmarks/profile_capture_tpu.py: mlp_step, a 4-micro-batch scan, 5 calls

PROGRAM = '''
import functools
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P
import shardscope

mesh = Mesh(jax.devices()[:8], ("s",))

@shardscope.program(args=(jax.ShapeDtypeStruct((64, 64), jnp.float32), jax.ShapeDtypeStruct((4, 64, 64), jnp.float32)))
@jax.jit
@functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(None, "s")), out_specs=P())
def step(w, xs):
    def body(acc, x):
        g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
        return acc + g, None
    acc, _ = lax.scan(body, jnp.zeros_like(w), xs)
    return acc
'''


def _step():
    mesh = Mesh(jax.devices()[:DEVICES], ("s",))

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(None, "s")), out_specs=P())
    def step(w, xs):
        def body(acc, x):
            g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
            return acc + g, None
        acc, _ = lax.scan(body, jnp.zeros_like(w), xs)
        return acc

    return step, jnp.ones((64, 64)), jnp.ones((ITERATIONS, 64, 64))


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    """The step called CALLS times under jax.profiler, and its compiled module's text."""
    step, w, xs = _step()
    compiled = step.lower(w, xs).compile()
    folder = tmp_path_factory.mktemp("trace")
    capture({"step": lambda: compiled(w, xs)}, CALLS, folder)
    return folder, compiled.as_text()


def _all_reduce_names(text: str) -> list[str]:
    """The all-reduce instructions of a module's text, read with a regex."""
    return re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = \S+ all-reduce\(", text, re.M)


def test_a_cpu_trace_holds_every_run_of_the_all_reduce_on_every_device(cpu_trace):
    folder, text = cpu_trace
    (name,) = _all_reduce_names(text)
    profile = read_profile(folder)
    runs = [op for op in profile.ops if op.name == name]
    assert len(runs) == CALLS * ITERATIONS * DEVICES  # 5 x 4 x 8 = 160
    per_call = {}
    for op in runs:
        per_call[op.call] = per_call.get(op.call, 0) + 1
    # every call (the runtime's run id of the execution) ran it 4 times on each of the 8 devices,
    # each device named by its own ordinal
    assert sorted(per_call.values()) == [ITERATIONS * DEVICES] * CALLS
    assert {op.device for op in runs} == {f"cpu:{d}" for d in range(DEVICES)}


def test_the_cpu_profile_on_the_plan_gives_per_run_and_per_step_times(cpu_trace):
    folder, text = cpu_trace
    (name,) = _all_reduce_names(text)
    measured = profile_onto(compiled_plan(text), read_profile(folder))
    assert measured.calls == CALLS and measured.devices == DEVICES and measured.missing == ()
    collective = measured.of(name)
    assert collective is not None
    assert collective.runs_per_call == ITERATIONS and collective.devices == DEVICES
    assert collective.per_step_s == pytest.approx(collective.per_run_s * ITERATIONS)
    assert 0 < collective.fastest_step_s <= collective.per_step_s
    assert collective.overlapped_s == 0.0  # a CPU device runs its program on one thread
    assert measured.step_s is not None and measured.step_s >= collective.per_step_s * 0.99


def test_the_tpu_profile_maps_onto_the_chips_module():
    text = (FIXTURE / "mlp_step.hlo.txt").read_text()
    names = set(re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = ", text, re.M))
    profile = read_profile(TPU_RUN, stats=True)
    assert profile.modules == ("jit_mlp_step",) and profile.device_kind == "TPU v5 Lite" and profile.platform == "tpu"
    # every instruction that ran on the chip is named as the module text names it
    assert {op.name for op in profile.ops} <= names
    assert profile.stats and {row.name for row in profile.stats} <= names
    body = re.search(r"body=%?([\w.\-]+)", text[text.index(" while("):]).group(1)
    in_body = set(re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*", _computation(text, body), re.M))
    for row in profile.stats:
        if row.name in in_body and "fusion" in row.name:
            assert row.occurrences == TPU_CALLS * TPU_ITERATIONS  # 20
    measured = profile_onto(compiled_plan(text, backend="tpu"), profile)
    assert measured.calls == TPU_CALLS and measured.devices == 1 and measured.collectives == ()
    assert measured.step_s is not None and measured.step_s > 0


def _computation(text: str, name: str) -> str:
    """The lines of computation ``name`` in a module's text."""
    start = re.search(rf"^%?{re.escape(name)} .*{{\s*$", text, re.M)
    return text[start.end(): text.index("\n}", start.end())]


def test_a_profile_of_another_program_names_the_modules_it_holds(cpu_trace):
    _, text = cpu_trace
    with pytest.raises(ProfileError, match="jit_mlp_step"):
        profile_onto(compiled_plan(text), read_profile(TPU_RUN))


def test_an_empty_folder_is_one_message(tmp_path):
    with pytest.raises(ProfileError, match="empty"):
        read_profile(tmp_path)


def test_a_folder_without_a_profile_is_one_message(tmp_path):
    (tmp_path / "notes.txt").write_text("no profile here")
    with pytest.raises(ProfileError, match="holds no profile"):
        read_profile(tmp_path)


def test_a_truncated_profile_is_one_message(tmp_path):
    whole = next(TPU_RUN.glob("*.xplane.pb")).read_bytes()
    (tmp_path / "host.xplane.pb").write_bytes(whole[: len(whole) // 3])
    with pytest.raises(ProfileError, match="truncated"):
        read_profile(tmp_path)


def test_gs_without_gcsfs_is_one_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if not installed
    with pytest.raises(ProfileError, match="gcsfs"):
        read_profile("gs://bucket/plugins/profile/run")


def test_without_xprof_the_message_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "xprof.convert.raw_to_tool_data", None)  # as if not installed
    with pytest.raises(ProfileError) as error:
        require_converter()
    assert "shardscope[profile]" in error.value.hint


def test_check_profile_shows_and_writes_the_measured_times(tmp_path, shardscope_cli):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    result = shardscope_cli("check", path, "--profile", "--json")
    assert result.returncode == 1, result.stderr
    program = json.loads(result.stdout)["programs"][0]
    measured = program["measured"]
    (collective,) = measured["collectives"]
    assert collective["name"] == program["compiled_collectives"][0]["name"]
    assert collective["runs_per_call"] == ITERATIONS and measured["devices"] == DEVICES
    assert measured["calls"] == 5  # DEFAULT_CALLS
    text = shardscope_cli("check", path, "--profile")
    assert "measured: 5 calls of jit_step on 8 CPU devices" in text.stdout and "step measured" in text.stdout
    assert "I0000" not in text.stderr  # the converter's log lines stay off the terminal


def test_check_profile_dir_of_a_tpu_run_on_a_cpu_host_points_at_its_dump(tmp_path, shardscope_cli):
    # a TPU run's profile on a machine without a TPU: the plan compiled here is XLA:CPU's, another
    # compiler's program; the run's own is in its dump (check --xla-dump DUMP --profile-dir RUN)
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    result = shardscope_cli("check", path, "--profile-dir", TPU_RUN)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())
    assert "is of a run on TPU v5 Lite" in message and "--xla-dump DUMP --profile-dir" in message
    assert message.count("shardscope: error:") == 1
    assert "step: 1 compiled collective" in result.stdout  # the CPU's plan, shown all the same


def test_check_profile_dir_of_an_empty_folder_exits_2(tmp_path, shardscope_cli):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = shardscope_cli("check", path, "--profile-dir", empty)
    assert result.returncode == 2 and "empty" in result.stderr


def test_every_measured_key_is_in_the_json_reference(tmp_path, shardscope_cli):
    reference = (Path(__file__).parents[1] / "docs" / "reference" / "json.md").read_text()
    section = reference[reference.index("### Measured times"):]
    block = re.search(r"^```\n(.*?)^```", section, re.M | re.S).group(1)
    names = set(re.findall(r'"(\w+)"', block))
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    measured = json.loads(shardscope_cli("check", path, "--profile", "--json").stdout)["programs"][0]["measured"]
    assert set(measured) - names == set()
    assert set(measured["collectives"][0]) - names == set()


def test_report_profile_gives_each_plan_its_runs_per_call(shardscope_cli):
    # the seed case on 2 devices, 32 examples each in chunks of 16: naive sums once per chunk (2),
    # deferred once after the loop (1)
    result = shardscope_cli("report", DEMOS / "linear.py", "--profile", "--json", "-r", "1", "--chunk-size", "16")
    assert result.returncode == 0, result.stderr
    variants = json.loads(result.stdout)["variants"]
    assert variants["naive"]["measured"]["collectives"][0]["runs_per_call"] == 2
    assert variants["deferred"]["measured"]["collectives"][0]["runs_per_call"] == 1
    assert variants["naive"]["measured"]["devices"] == 2


def test_sweep_profile_measures_each_point(shardscope_cli):
    result = shardscope_cli("sweep", DEMOS / "linear.py", "--profile", "--json", "-r", "1", "--chunk-sizes", "8,16")
    assert result.returncode == 0, result.stderr
    points = {(p["plan"], p["chunk_size"]): p["measured"] for p in json.loads(result.stdout)["points"]}
    # 32 examples per device: 4 chunks of 8, 2 of 16; the naive plan sums once per chunk
    assert points[("naive", 8)]["collectives"][0]["runs_per_call"] == 4
    assert points[("naive", 16)]["collectives"][0]["runs_per_call"] == 2
    assert points[("deferred", 8)]["collectives"][0]["runs_per_call"] == 1


def test_report_profile_dir_of_another_program_exits_2(shardscope_cli):
    result = shardscope_cli("report", DEMOS / "linear.py", "--profile-dir", TPU_RUN, "-r", "1")
    assert result.returncode == 2 and "TPU v5 Lite" in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("shardscope: error:") == 1 and "naive" in result.stdout  # the plans stay


def test_profile_and_profile_dir_together_are_one_message(tmp_path, shardscope_cli):
    result = shardscope_cli("report", DEMOS / "linear.py", "--profile", "--profile-dir", tmp_path)
    assert result.returncode == 2 and "give one of them" in result.stderr


def test_check_profile_of_a_demo_measures_each_plan(shardscope_cli):
    # the seed case's own mesh: 2 devices, 2 chunks each; naive sums once per chunk, deferred once
    result = shardscope_cli("check", DEMOS / "linear.py", "--profile", "--json")
    assert result.returncode == 1, result.stderr
    measured = {p["function"]: p["measured"] for p in json.loads(result.stdout)["programs"]}
    assert measured["linear[naive]"]["collectives"][0]["runs_per_call"] == 2
    assert measured["linear[deferred]"]["collectives"][0]["runs_per_call"] == 1


def test_an_async_pair_on_the_chip_is_timed_from_its_start_to_its_done_with_the_compute_between():
    # on one chip no collective runs, but the TPU's async copies are start/done pairs as its
    # async collectives are: copy-start.3 ... copy-done.3 in the entry, with instructions the
    # schedule (the module is printed in its scheduled order) puts between them
    from shardscope.engine.hlo.measured import profile_instruction
    from shardscope.engine.hlo.text import parse

    text = (FIXTURE / "mlp_step.hlo.txt").read_text()
    entry = [line.split("=")[0].strip().removeprefix("ROOT ").lstrip("%")
             for line in text[text.index("\nENTRY"):].splitlines()[1:] if " = " in line]
    between = entry[entry.index("copy-start.3") + 1: entry.index("copy-done.3")]
    profile = read_profile(TPU_RUN)
    assert set(between) & {op.name for op in profile.ops}  # some of them ran on the chip
    measured = profile_instruction(parse(text), profile, "copy-start.3")
    start_alone = sum(op.dur_us for op in profile.ops if op.name == "copy-start.3") / TPU_CALLS * 1e-6
    assert measured.runs_per_call == 1 and measured.devices == 1
    assert measured.per_step_s > start_alone  # the window reaches the end of copy-done.3
    assert 0 < measured.overlapped_s <= measured.per_step_s
