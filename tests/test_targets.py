"""Compiling for a TPU slice without a TPU (shardscope.targets.compile), on real libtpu.

Where each all-reduce sits is recounted here from the compiled text (which computations a while
loop runs), never taken from shardscope's own parser. The retargeted compile is checked against
the same program written for the target's devices directly. libtpu ships for Linux x86-64 only:
elsewhere the tests that need it skip; on Linux x86-64 a missing libtpu fails them (``make test``
installs the ``tpu`` extra there).
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.experimental import topologies
from jax.sharding import Mesh as JaxMesh, NamedSharding, PartitionSpec as P

import _target_programs as programs
from _hidden_compilers import environment_without
from _tpu_text import all_reduces, entry_parameters as _entry_parameters, padded_bytes as _padded_bytes
from shardscope.sources.loading import load_demo_file
from shardscope.errors import SettingsError, ShardscopeError, TargetError
from shardscope.config.mesh import Mesh
from shardscope.distributed.compile_cache import cache_options
from shardscope.targets import compile as targets, registry, tpu as tpu_target
from shardscope.plans.registry import build_plans
from shardscope.sources.loading import load_file
from shardscope.config.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
LIBTPU_SHIPS = sys.platform.startswith("linux") and platform.machine() == "x86_64"
needs_libtpu = pytest.mark.skipif(not LIBTPU_SHIPS, reason=(
    f"libtpu ships for Linux x86-64 only (this is {sys.platform} {platform.machine()}): "
    "the tpu extra cannot be installed here"))


def without_cuda_plugin_lines(stderr: str) -> str:
    """``stderr`` less what JAX's CUDA plugin (the gpu extra) prints at ``import jax`` on a machine
    without CUDA: its libraries' own log lines, before any of shardscope's code runs."""
    noise = ("absl::InitializeLog()", "cudart_stub.cc")
    return "".join(line for line in stderr.splitlines(keepends=True) if not any(n in line for n in noise))


def _normalized(text: str) -> str:
    """The module without its name and its stack-frame tables (those hold the tracing call site)."""
    text = re.sub(r"^HloModule \S+", "HloModule m", text, flags=re.M)
    text = re.sub(r"^(FileNames|FunctionNames|FileLocations|StackFrames)\n.*?\n\n", "", text, flags=re.S | re.M)
    return re.sub(r" stack_frame_id=\d+", "", text)


# --- parsing a target (no libtpu needed) ------------------------------------------------------

@pytest.mark.parametrize("text, topology", [
    ("tpu:v5e:16x16", "v5e:16x16"), ("TPU:v4:2x2x2", "v4:2x2x2"), (" tpu:v5p:4x4x4_twisted ", "v5p:4x4x4_twisted"),
    ("tpu:TPU v5 lite:2x2", "TPU v5 lite:2x2"),
])
def test_a_target_is_its_platform_and_topology_name(text, topology):
    target = registry.parse_target(text)
    assert (target.platform, target.topology) == ("tpu", topology)
    assert registry.parse_target(target.text()) == target and str(target) == f"tpu:{topology}"


@pytest.mark.parametrize("text", ["v5e:16x16", "tpu:", "tpu:v5e", "tpu:v5e:16by16", "cpu", "tpu:v5e:", ""])
def test_a_malformed_target_is_one_message_with_examples(text):
    with pytest.raises(SettingsError) as error:
        registry.parse_target(text)
    assert "tpu:v5e:16x16" in error.value.hint and "\n" not in error.value.message


def test_every_target_is_one_interface_printed_as_it_is_read():
    """A TPU slice, GPUs and the CPU: one parse, and each prints back as the text it came from."""
    for text, platform, topology in [("tpu:v5e:2x4", "tpu", "v5e:2x4"), ("gpu:h100:8", "gpu", "h100:8"),
                                     ("gpu:H100:2x8", "gpu", "h100:2x8"), ("cpu:8", "cpu", "8")]:
        target = registry.parse_target(text)
        assert isinstance(target, targets.Target)
        assert (target.platform, target.topology) == (platform, topology)
        assert registry.parse_target(target.text()) == target


def test_without_libtpu_a_target_says_which_extra_to_install(tmp_path):
    """libtpu hidden from a fresh process, as on a machine without it: exit-2 kind of error."""
    script = textwrap.dedent("""
        import json
        from shardscope.errors import ShardscopeError
        from shardscope.targets import compile as targets, registry
        try:
            registry.load_target(registry.parse_target("tpu:v5e:2x2"))
        except ShardscopeError as exc:
            print(json.dumps([type(exc).__name__, exc.message, exc.hint]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=environment_without(tmp_path, "tpu"))
    kind, message, hint = json.loads(done.stdout)
    assert kind == "TargetError" and issubclass(TargetError, ShardscopeError)
    assert "needs libtpu" in message and "pip install 'shardscope[tpu]'" in hint
    assert "Traceback" not in done.stderr


# --- topologies and meshes --------------------------------------------------------------------

@needs_libtpu
@pytest.mark.parametrize("topology, kind", [
    ("v4:2x2x1", "TPU v4"), ("v5e:2x2", "TPU v5 lite"), ("v5e:16x16", "TPU v5 lite"),
    ("v5p:2x2x2", "TPU v5"), ("v6e:4x4", "TPU v6 lite"),
])
def test_a_topology_has_one_device_per_chip_as_on_a_live_host(topology, kind):
    devices = registry.load_target(registry.parse_target(f"tpu:{topology}"))
    chips = math.prod(int(n) for n in topology.split(":")[1].split("x"))
    assert devices.count == chips and devices.device_kind == kind
    assert all(d.platform == "tpu" for d in devices.devices)
    assert len({tuple(d.coords) for d in devices.devices}) == chips  # v4: megacore, not a device per core


@needs_libtpu
@pytest.mark.parametrize("topology", ["v9:2x2", "v5e:3x3"])
def test_a_topology_libtpu_does_not_know_quotes_libtpu_and_lists_examples(topology):
    with pytest.raises(TargetError) as error:
        registry.load_target(registry.parse_target(f"tpu:{topology}"))
    assert f"libtpu does not know the topology {topology!r}" in error.value.message
    assert "INVALID_ARGUMENT" in error.value.message and "tpu:v5e:16x16" in error.value.hint


@needs_libtpu
def test_the_target_mesh_covers_every_device_in_jax_make_mesh_layout():
    devices = registry.load_target(registry.parse_target("tpu:v5e:2x4"))
    one_axis = targets.target_mesh(devices, axis="data")
    assert one_axis.shape == {"data": 8} and set(one_axis.devices.flat) == set(devices.devices)
    two_axes = targets.target_mesh(devices, Mesh.parse("data=2,model=4"))
    topology = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x4")
    expected = topologies.make_mesh(topology, (2, 4), ("data", "model"))
    assert [d.id for d in two_axes.devices.flat] == [d.id for d in expected.devices.flat]
    with pytest.raises(SettingsError, match="has 4 devices; tpu:v5e:2x4 has 8") as error:
        targets.target_mesh(devices, Mesh.parse("data=4"))
    assert "multiply to 8" in error.value.hint


# --- the retargeted compile -------------------------------------------------------------------

def _cpu_mesh(count: int, names: tuple[str, ...] = ("data",), shape: tuple[int, ...] | None = None) -> JaxMesh:
    return JaxMesh(np.array(jax.devices()[:count]).reshape(shape or (count,)), names)


def _direct_compile(built: programs.Built) -> str:
    """The standard JAX route for a program written against the target's own mesh."""
    return built.trace().lower().compile().as_text()


@needs_libtpu
@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_a_program_traced_on_cpu_compiles_as_if_written_for_the_target(name):
    """Auto and Explicit axes, shard_map, nested jits: the same module as the direct route."""
    devices = registry.load_target(registry.parse_target("tpu:v5e:2x4"))
    make = programs.PROGRAMS[name]
    on_cpu = make(_cpu_mesh(8)).trace()
    expected = _direct_compile(make(targets.target_mesh(devices, axis="data")))
    compiled = targets.compile_for_target(on_cpu, devices, name)
    assert compiled.devices == 8 and compiled.device_kind == "TPU v5 lite"
    assert "num_partitions=8" in compiled.hlo_text
    assert _normalized(compiled.hlo_text) == _normalized(expected)
    traced_on_target = make(targets.target_mesh(devices, axis="data")).trace()
    assert _normalized(targets.compile_for_target(traced_on_target, devices).hlo_text) == _normalized(expected)


def _two_axis_program(mesh: JaxMesh) -> programs.Built:
    """The batch over ``data``, W's columns over ``model``, one psum over ``model`` only."""
    W = jax.ShapeDtypeStruct((16, 16), np.float32, sharding=NamedSharding(mesh, P(None, "model")))
    x = jax.ShapeDtypeStruct((16, 16), np.float32, sharding=NamedSharding(mesh, P("data")))

    def local(W, x):
        return jax.lax.psum(x @ W, "model")

    sm = jax.shard_map(local, mesh=mesh, in_specs=(P(None, "model"), P("data")), out_specs=P("data"))
    return programs.Built(jax.jit(sm), (W, x))


@needs_libtpu
def test_a_permuted_two_axis_mesh_keeps_its_device_positions():
    """CPU devices in transposed order: device positions, and so the replica groups, are kept."""
    devices = registry.load_target(registry.parse_target("tpu:v5e:2x4"))
    cpu = JaxMesh(np.array(jax.devices()[:8]).reshape(4, 2).T, ("data", "model"))
    compiled = targets.compile_for_target(_two_axis_program(cpu).trace(), devices)
    layout = targets.target_mesh(devices, Mesh.parse("data=2,model=4"))
    assert [d.id for d in layout.devices.flat] == list(compiled.device_ids)
    assert _normalized(compiled.hlo_text) == _normalized(_direct_compile(_two_axis_program(layout)))


def _psum_at_one_line(mesh: JaxMesh) -> programs.Built:
    def local(x):
        return jax.lax.psum(x, "data")
    return programs.Built(jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("data"), out_specs=P())),
                          (jax.ShapeDtypeStruct((8, 4), np.float32),))


def _psum_at_another_line(mesh: JaxMesh) -> programs.Built:
    def local(x):

        return jax.lax.psum(x, "data")  # the same program, two lines further down
    return programs.Built(jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("data"), out_specs=P())),
                          (jax.ShapeDtypeStruct((8, 4), np.float32),))


@needs_libtpu
def test_a_program_compiled_again_for_the_same_target_is_taken_from_the_first_compile():
    """A slice's compile is not read back from JAX's cache: the process keeps it. A new trace of
    the same program is the same compile; another device order, another slice or moved source
    lines (the compiled module names them) compile afresh."""
    slice_2x4 = registry.load_target(registry.parse_target("tpu:v5e:2x4"))
    mesh = _cpu_mesh(8, ("data", "model"), (2, 4))
    # traced from one line each time (the lines of the calls that traced it are in its module too)
    first, again = [targets.compile_for_target(_two_axis_program(mesh).trace(), slice_2x4) for _ in range(2)]
    assert again is first

    permuted = JaxMesh(np.array(jax.devices()[:8]).reshape(4, 2).T, ("data", "model"))
    other_positions = targets.compile_for_target(_two_axis_program(permuted).trace(), slice_2x4)
    assert other_positions is not first
    slice_2x2 = registry.load_target(registry.parse_target("tpu:v5e:2x2"))
    assert targets.compile_for_target(_two_axis_program(_cpu_mesh(4, ("data", "model"), (2, 2))).trace(),
                                      slice_2x2).device_kind == first.device_kind

    here = targets.compile_for_target(_psum_at_one_line(_cpu_mesh(4)).trace(), slice_2x2)
    there = targets.compile_for_target(_psum_at_another_line(_cpu_mesh(4)).trace(), slice_2x2)
    assert there is not here


@needs_libtpu
def test_a_program_on_another_device_count_than_the_slice_is_refused_with_both():
    devices = registry.load_target(registry.parse_target("tpu:v5e:2x2"))
    traced = programs.gspmd_accumulate(_cpu_mesh(8)).trace()
    with pytest.raises(TargetError, match="step runs on 8 devices; tpu:v5e:2x2 has 4") as error:
        targets.compile_for_target(traced, devices, "step")
    assert "a topology with 8 chips" in error.value.hint and "jax.devices()[:4]" in error.value.hint


@needs_libtpu
def test_a_host_callback_is_refused_in_words():
    """jax.debug.print lowers against its devices' backend: JAX refuses the CPU's for TPU."""
    mesh = _cpu_mesh(4)

    @jax.jit
    def step(x):
        jax.debug.print("sum {}", x.sum())
        return x * 2

    x = jax.ShapeDtypeStruct((8, 16), np.float32, sharding=NamedSharding(mesh, P("data")))
    with pytest.raises(TargetError, match="step calls back to Python") as error:
        targets.compile_for_target(step.trace(x), registry.load_target(registry.parse_target("tpu:v5e:2x2")), "step")
    assert "\n" not in error.value.message and "leave the callback out" in error.value.hint


# --- what the TPU compiler does with the loops' all-reduces (v5e:2x2, 4 chips) -------------------

def _plan_traces(file: str, function: str) -> dict:
    settings = Settings(path=ROOT / "demos" / file, devices=4)
    built = build_plans(load_demo_file(settings.path).functions[function], settings)
    return {plan: built.functions[plan].trace(*built.args) for plan in ("naive", "deferred")}


def _on(topology: str, traced) -> str:
    return targets.compile_for_target(traced, registry.load_target(registry.parse_target(f"tpu:{topology}"))).hlo_text


@needs_libtpu
def test_the_tpu_compiler_moves_the_accumulations_all_reduce_out_of_the_loop():
    traced = programs.gspmd_accumulate(_cpu_mesh(4)).trace()
    assert [depth for _, depth in all_reduces(traced.lower().compile().as_text())] == [1]
    assert all_reduces(_on("v5e:2x2", traced)) == [("f32[16,16]{1,0:T(8,128)}", 0)]


@needs_libtpu
def test_the_seed_naive_plan_all_reduce_leaves_the_loop_on_tpu():
    naive = _plan_traces("linear.py", "linear")["naive"]
    assert [depth for _, depth in all_reduces(naive.lower().compile().as_text())] == [1]
    assert [depth for _, depth in all_reduces(_on("v5e:2x2", naive))] == [0]


@needs_libtpu
def test_the_rnn_naive_plan_keeps_the_recurrent_weights_all_reduce_in_a_loop():
    """On the CPU Wh's gradient is reduced in the time loop inside the chunk loop (depth 2); the
    TPU compiler takes it out of the time loop but not out of the chunk loop (depth 1), and
    combines Wx's and b's into one all-reduce at the entry."""
    plans = _plan_traces("rnn.py", "rnn")
    cpu = all_reduces(plans["naive"].lower().compile().as_text())
    assert sorted(depth for _, depth in cpu) == [1, 2] and ("f32[16,16]{1,0}", 2) in cpu
    tpu = all_reduces(_on("v5e:2x2", plans["naive"]))
    in_loops = [(shape, depth) for shape, depth in tpu if depth]
    assert len(in_loops) == 1 and in_loops[0][0].startswith("f32[16,16]") and in_loops[0][1] == 1
    (entry_shape,) = [shape for shape, depth in tpu if not depth]
    assert entry_shape.startswith("(f32[4,16]") and entry_shape.count("f32[") == 2  # Wx and b, combined
    (deferred,) = all_reduces(_on("v5e:2x2", plans["deferred"]))
    assert deferred[1] == 0 and deferred[0].startswith("(f32[16,16]") and deferred[0].count("f32[") == 3


def _directly_in_loop(op_name: str, loop_op_name: str) -> bool:
    """True when ``op_name`` was written in the body of the loop ``loop_op_name``, not in a loop inside it."""
    body = loop_op_name + "/body/"
    return loop_op_name.endswith("/while") and op_name.startswith(body) and "/while/" not in op_name[len(body):]


def _all_reduce_op_names(text: str) -> list[str]:
    """The op_name metadata of every all-reduce: where in the program it was written."""
    return sorted(re.search(r'op_name="([^"]*)"', line).group(1) for line in text.splitlines()
                  if re.search(r"\sall-reduce(?:-start)?\(", line))


@needs_libtpu
@pytest.mark.parametrize("case", ["gspmd", "rnn"])
def test_each_tpu_all_reduce_names_the_cpu_one_it_comes_from(case):
    """What pairs a CPU collective with the TPU's. With libtpu 0.0.50 (jax 0.12) a moved all-reduce
    keeps its op_name (still .../while/body/...); with libtpu 0.0.42 (jax 0.10.2) it takes the
    op_name of the while loop it left: the CPU one's, cut where that loop's body begins."""
    traced = (programs.gspmd_accumulate(_cpu_mesh(4)).trace() if case == "gspmd"
              else _plan_traces("rnn.py", "rnn")["naive"])
    cpu = _all_reduce_op_names(traced.lower().compile().as_text())
    tpu = _all_reduce_op_names(_on("v5e:2x2", traced))
    assert len(tpu) == len(cpu) == (1 if case == "gspmd" else 2)
    for name in tpu:
        pairs = [c for c in cpu if c == name or _directly_in_loop(c, name)]
        assert len(pairs) == 1, (name, cpu)
    if tuple(int(part) for part in jax.__version__.split(".")[:2]) >= (0, 12):
        assert tpu == cpu


@needs_libtpu
@pytest.mark.parametrize("topology", ["v4:2x2x1", "v5e:2x2", "v5p:2x2x1", "v6e:2x2"])
def test_a_reduction_the_next_iteration_reads_stays_in_the_loop_on_every_target(topology):
    traced = programs.needed_in_loop(_cpu_mesh(4)).trace()
    assert [depth for _, depth in all_reduces(_on(topology, traced))] == [1]


@needs_libtpu
def test_a_program_file_that_built_its_mesh_from_cpu_devices_at_import():
    """demos/train_step.py: Mesh(np.array(jax.devices()[:8]), ("batch",)) at module level."""
    devices = registry.load_target(registry.parse_target("tpu:v5e:2x4"))
    step = load_file(ROOT / "demos" / "train_step.py").functions["step"]
    traced = step.fn.trace(*step.spec.args)
    assert [depth for _, depth in all_reduces(traced.lower().compile().as_text())] == [1]
    compiled = targets.compile_for_target(traced, devices, "step")
    assert compiled.devices == 8 and "num_partitions=8" in compiled.hlo_text
    assert [depth for _, depth in all_reduces(compiled.hlo_text)] == [0]


# --- memory and cost per device on the target ------------------------------------------------

@needs_libtpu
def test_memory_per_device_is_the_tpu_modules_with_its_tiled_layouts():
    """W f32[16,16] pads to 16x128 and the device's f32[4,16,16] batch to 4x16x128: 40,960 bytes of
    arguments, recounted from the module's entry layout; the CPU's are the plain 5,120."""
    traced = programs.gspmd_accumulate(_cpu_mesh(4)).trace()
    compiled = targets.compile_for_target(traced, registry.load_target(registry.parse_target("tpu:v5e:2x2")))
    parameters = _entry_parameters(compiled.hlo_text)
    assert parameters == ["f32[16,16]{1,0:T(8,128)}", "f32[4,16,16]{2,1,0:T(8,128)}"]
    assert compiled.memory["argument_size_in_bytes"] == sum(map(_padded_bytes, parameters)) == 40_960
    assert compiled.memory["output_size_in_bytes"] == _padded_bytes("f32[16,16]{1,0:T(8,128)}")
    assert traced.lower().compile().memory_analysis().argument_size_in_bytes == 16 * 16 * 4 + 4 * 16 * 16 * 4
    assert all(isinstance(v, int) for v in compiled.memory.values())
    assert {"flops", "optimal_seconds", "bytes accessed"} <= set(compiled.cost)
    assert all(isinstance(v, float) for v in compiled.cost.values())


# --- one process, two backends ----------------------------------------------------------------

_BOTH_ORDERS = textwrap.dedent("""
    import json, os, sys
    from shardscope.targets.host import ensure_devices
    from shardscope.targets import compile as targets, registry
    first = sys.argv[1]
    if first == "target":
        devices = registry.load_target(registry.parse_target("tpu:v5e:2x2"))
    ensure_devices(4)
    import jax
    from jax._src import xla_bridge
    cpu = (jax.default_backend(), len(jax.devices()), jax.devices()[0].platform)
    tried = sorted(xla_bridge._backend_errors)  # the backends JAX tried to start and could not
    if first == "cpu":
        devices = registry.load_target(registry.parse_target("tpu:v5e:2x2"))
    import numpy as np
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sys.path.insert(0, "tests")
    import _target_programs as programs
    compiled = targets.compile_for_target(programs.gspmd_accumulate(mesh).trace(), devices)
    after = (jax.default_backend(), len(jax.devices()))
    from shardscope.targets import tpu as tpu_target
    left = [k for k in tpu_target._COMPILE_ONLY_ENV if k in os.environ]
    print(json.dumps({"cpu": cpu, "tried": tried, "after": after, "tpu": compiled.devices, "left": left}))
""")


@needs_libtpu
@pytest.mark.parametrize("first", ["cpu", "target"])
def test_the_cpu_run_and_the_target_share_a_process_quietly(first):
    """Either order: JAX's backend stays the CPU's with its device count (it never tries a TPU),
    libtpu prints nothing and starts beside this process's libtpu, and the variables that make it
    a quiet compiler are gone once it started."""
    registry.load_target(registry.parse_target("tpu:v5e:2x2"))  # this process holds a libtpu too
    cache = {name.upper() for name in cache_options(Path("."))}  # the test run's cache: a command's, not a library's
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", *tpu_target._COMPILE_ONLY_ENV, *cache)}
    done = subprocess.run([sys.executable, "-c", _BOTH_ORDERS, first], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert without_cuda_plugin_lines(done.stderr) == ""
    assert json.loads(done.stdout) == {"cpu": ["cpu", 4, "cpu"], "tried": [], "after": ["cpu", 4], "tpu": 4, "left": []}


_ONE_WORKER = textwrap.dedent("""
    import json, os, sys
    from shardscope.distributed.workers import WorkerRole, join_as_worker
    from shardscope.cli.processes import free_port
    join_as_worker(WorkerRole(f"127.0.0.1:{free_port()}", 1, 0, os.getppid()), 2)
    import jax
    from jax._src import xla_bridge
    print(json.dumps([jax.default_backend(), len(jax.devices()), sorted(xla_bridge._backend_errors)]), file=sys.stderr)
""")


@needs_libtpu
def test_a_local_worker_starts_the_cpu_backend_without_trying_a_tpu():
    """A --processes worker (here a cluster of one) with libtpu installed: no libtpu lines on its stderr."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run([sys.executable, "-c", _ONE_WORKER], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.strip().splitlines()[-1]) == ["cpu", 2, []]
    assert "TPU" not in done.stderr


# --- the target's compiled plan beside the CPU's ------------------------------------------------

@needs_libtpu
def test_a_targets_plan_of_the_same_trace_pairs_with_the_cpu_plan():
    """plan_of on the TPU module's text (the CPU compile still names the mesh): the CPU's all-reduce
    of W's gradient, 4 runs in the micro-batch loop, runs once after it on v5e:2x2."""
    from shardscope.engine.hlo.compiled import plan_of
    from shardscope.engine.hlo.target_plan import LEFT_LOOP, compare_plans
    from shardscope.engine.joined.inspection import argument_names

    built = programs.gspmd_accumulate(_cpu_mesh(4))
    traced = built.trace()
    compiled = traced.lower().compile()
    names = argument_names(built.fn, built.args, {})
    cpu = plan_of(traced, compiled, input_names=names)
    tpu = plan_of(traced, compiled, text=_on("v5e:2x2", traced), input_names=names, backend="tpu")
    (c,) = cpu.collectives
    assert (c.value, c.executions, c.axes, c.verdict.kind) == ("grad(W)", 4, ("data",), "deferrable")
    (t,) = tpu.collectives
    assert (tpu.backend, t.executions, t.axes, [op.shape for op in t.operands]) == ("tpu", 1, ("data",), ["f32[16,16]"])
    comparison = compare_plans(cpu, tpu, "v5e:2x2")
    (p,) = comparison.placements
    assert p.change == LEFT_LOOP and p.target == (t,) and p.deferred_by_compiler and not comparison.staying_findings


@needs_libtpu
def test_a_sum_the_tpu_moved_out_of_the_loop_is_named_after_the_gradient_it_sums():
    """The TPU's all-reduce after the loop sums the accumulator: its value is still W's gradient,
    as on the CPU, whatever op_name the moved instruction took (jax 0.10.2: the loop's)."""
    from shardscope.engine.hlo.compiled import plan_of
    from shardscope.engine.joined.inspection import argument_names

    built = programs.gspmd_accumulate(_cpu_mesh(4))
    traced = built.trace()
    names = argument_names(built.fn, built.args, {})
    (t,) = plan_of(traced, traced.lower().compile(), text=_on("v5e:2x2", traced), input_names=names).collectives
    assert not t.in_loop and t.value == "grad(W)"


@needs_libtpu
def test_the_seed_naive_plans_psum_the_tpu_moved_is_still_the_programs():
    """The shard_map psum_invariant the TPU moves out of the chunk loop pairs with its jaxpr
    equation on both versions (jax 0.10.2 prints it under the loop's op_name): the program
    wrote it, not the partitioner."""
    from shardscope.engine.hlo.compiled import PROGRAM, plan_of

    naive = _plan_traces("linear.py", "linear")["naive"]
    (t,) = plan_of(naive, naive.lower().compile(), text=_on("v5e:2x2", naive)).collectives
    assert not t.in_loop and t.written_by == PROGRAM and len(t.equations) == 1
    assert t.equations[0].rsplit("/", 1)[-1].startswith("psum_invariant")


def test_the_cpu_as_a_target_compiles_through_the_same_path_to_the_cpus_own_plan():
    """cpu:8, the third implementation of the Target interface: the one compile path gives the
    module the CPU compiles itself (its all-reduce in the scan's body, as many as there)."""
    devices = registry.load_target(registry.parse_target("cpu:8"))
    assert devices.count == 8 and all(d.platform == "cpu" for d in devices.devices)
    traced = programs.gspmd_accumulate(_cpu_mesh(8)).trace()
    own = traced.lower().compile().as_text()
    through = targets.compile_for_target(traced, devices).hlo_text
    assert all_reduces(through) == all_reduces(own) and all_reduces(own)


def test_a_target_owns_one_record_of_its_machine_which_its_consumers_ask(tmp_path):
    """Issue 47: a machine is one record, owned by its Target, with one model of its interconnect.
    The views ask it (what the program is compiled for, whether arrays are padded to tiles)
    instead of reading the target's name; a machine shardscope has no figures for has no model."""
    from shardscope.hardware.tpu_generations import TPU_GENERATIONS
    from shardscope.hardware.fabrics import NodeFabric, TorusFabric
    from shardscope.targets.gpu import DESCRIPTIONS, GpuTarget

    v5e = registry.parse_target("tpu:v5e:2x4").machine("TPU v5 lite")
    assert (v5e.name, v5e.words, v5e.pads_to_tiles) == ("v5e", "the slice", True)
    assert v5e.chip is TPU_GENERATIONS[0].chip  # the generation's record's own chip
    assert isinstance(v5e.fabric, TorusFabric) and v5e.fabric.link_Bps == 4.5e10  # the only v5e model
    by_name = registry.parse_target("tpu:v5litepod_2x4").machine("")  # by the topology's name alone
    assert by_name.fabric is v5e.fabric
    unknown = registry.parse_target("tpu:v7x:2x2x1").machine("TPU7x")
    assert unknown.fabric is None and unknown.words == "the slice"
    h100 = registry.parse_target("gpu:h100:2x8").machine("NVIDIA H100 80GB HBM3")
    assert (h100.words, h100.pads_to_tiles) == ("the GPUs", False)
    assert isinstance(h100.fabric, NodeFabric) and h100.fabric.nic_Bps == 46e9
    own = tmp_path / "my_gpu.txtpb"
    own.write_text((DESCRIPTIONS / "h100.txtpb").read_text())
    mine = GpuTarget(str(own), 1, 8).machine("NVIDIA H100 80GB HBM3")
    assert mine.fabric is None and mine.chip is not None and mine.chip.memory_bytes == 80 * 2**30
    assert registry.parse_target("cpu:8").machine("cpu") is None
