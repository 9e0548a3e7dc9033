"""``--target gpu:...``: XLA's GPU compiler without a GPU, beside the CPU's plan.

Every expected number is counted here, in the module text compiled in the test (which
computation holds each all-reduce, its shape), never read from shardscope's own output.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh as JaxMesh, NamedSharding, PartitionSpec as P

import _target_programs as programs
from _gpu_plugin import needs_gpu_plugin
from _hidden_compilers import hide_compilers
from _support import DEMOS
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.errors import SettingsError, TargetError
from shardscope.targets import compile as targets, gpu as gpu_target, registry
from shardscope.plans.registry import build_plans
from shardscope.config.settings import Settings
from shardscope.sources.loading import load_demo_file


needs_plugin = needs_gpu_plugin

_MAXTEXT = textwrap.dedent('''
    """MaxText-style gradient accumulation: lax.scan over 4 micro-batches, 8-way data parallel."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import shardscope

    mesh = jax.make_mesh((8,), ("data",), devices=jax.devices()[:8])
    params = {"w1": jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, P())),
              "w2": jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=NamedSharding(mesh, P()))}
    batch = jax.ShapeDtypeStruct((4, 64, 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))


    def loss_fn(params, x):
        return jnp.mean((jnp.tanh(x @ params["w1"]) @ params["w2"]) ** 2)


    @shardscope.program(args=(params, batch))
    @jax.jit
    def train_step(params, batch):
        def micro(carry, x):
            grads, loss = carry
            l, g = jax.value_and_grad(loss_fn)(params, x)
            return (jax.tree.map(jnp.add, grads, g), loss + l), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        (grads, loss), _ = lax.scan(micro, (zeros, 0.0), batch)
        return grads, loss
''')


# --- counting in the module text --------------------------------------------------------------

_HEADER = re.compile(r"^(ENTRY )?%(\S+) .*\{$")
_ALL_REDUCE = re.compile(r"= (\S+?)(?:\{[^}]*\})? all-reduce(?:-start)?\(")


def _all_reduces(text: str) -> list[tuple[str, bool]]:
    """``[(shape, in a loop body)]`` of every all-reduce, placed by the computation that holds it."""
    bodies = set(re.findall(r"body=%([\w.\-]+)", text))
    found, computation = [], ""
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            computation = header.group(2)
            continue
        match = _ALL_REDUCE.search(line)
        if match:
            found.append((match.group(1), computation in bodies))
    return found


def _opcodes(text: str) -> set[str]:
    return set(re.findall(r"= \S+ ([a-z\-]+)\(", text))


def _gpu(traced, target: str = "gpu:h100:8") -> str:
    return targets.compile_for_target(traced, registry.load_target(registry.parse_target(target))).hlo_text


def _cpu_mesh(count: int = 8) -> JaxMesh:
    return JaxMesh(np.array(jax.devices()[:count]), ("data",))


# --- parsing (no plugin needed) ---------------------------------------------------------------

@pytest.mark.parametrize("text, gpu, hosts, per_host", [
    ("gpu:h100:8", "h100", 1, 8), ("gpu:H100:2x8", "h100", 2, 8), ("gpu:a100:4", "a100", 1, 4),
    ("gpu:b200:8", "b200", 1, 8), ("gpu:h200:1x8", "h200", 1, 8), ("gpu:my/gpu.txtpb:8", "my/gpu.txtpb", 1, 8),
])
def test_a_gpu_target_is_a_described_gpu_and_hosts_of_devices(text, gpu, hosts, per_host):
    target = registry.parse_target(text)
    assert isinstance(target, gpu_target.GpuTarget)
    assert (target.gpu, target.hosts, target.per_host) == (gpu, hosts, per_host)
    assert registry.parse_target(target.text()) == target


def test_shardscope_describes_four_gpus_each_naming_what_it_is_based_on():
    assert gpu_target.gpu_names() == ("a100", "b200", "h100", "h200")
    for name in gpu_target.gpu_names():
        text = (gpu_target.DESCRIPTIONS / f"{name}.txtpb").read_text()
        assert "Based on the vendor's published figures" in text and "datasheet" in text
        assert re.search(r"^\s*core_count: \d+$", text, re.M) and 'platform_name: "CUDA"' in text


def test_an_unknown_gpu_lists_the_gpus_shardscope_describes():
    with pytest.raises(SettingsError) as error:
        registry.parse_target("gpu:v100:8")
    assert "'v100'" in error.value.message and "a100, b200, h100, h200" in error.value.message
    assert "gpu:path/to/file.txtpb:8" in error.value.hint


@pytest.mark.parametrize("text", ["gpu:h100", "gpu:h100:eight", "gpu:h100:0", "gpu::8", "gpu:"])
def test_a_malformed_gpu_target_is_one_message(text):
    with pytest.raises(SettingsError) as error:
        registry.parse_target(text)
    assert "\n" not in error.value.message


def test_without_the_plugin_a_gpu_target_names_the_extra(monkeypatch, tmp_path):
    """The plugin not installed (in site-packages nor in shardscope's folder): one TargetError naming it."""
    hide_compilers(monkeypatch, tmp_path, "gpu")
    with pytest.raises(TargetError) as error:
        gpu_target.require_plugin()
    assert "jax-cuda12-plugin" in error.value.message and "pip install 'shardscope[gpu]'" in error.value.hint


def test_a_plugin_of_another_version_than_jax_is_refused_naming_both(monkeypatch, tmp_path):
    hide_compilers(monkeypatch, tmp_path, "gpu")  # shardscope's folder holds none: the metadata below is read
    monkeypatch.setattr(gpu_target.importlib.metadata, "version", lambda name: "0.0.1")
    with pytest.raises(TargetError) as error:
        gpu_target.require_plugin()
    assert "jax-cuda12-plugin 0.0.1" in error.value.message and f"jax {jax.__version__}" in error.value.message
    assert f"jax-cuda12-plugin=={jax.__version__}" in error.value.hint


# --- devices, descriptions and modules --------------------------------------------------------

@needs_plugin
@pytest.mark.parametrize("name, kind", [("h100", "NVIDIA H100 80GB HBM3"), ("h200", "NVIDIA H200"),
                                        ("b200", "NVIDIA B200"), ("a100", "NVIDIA A100-SXM4-80GB")])
def test_each_description_gives_compile_only_gpus(name, kind):
    devices = registry.load_target(registry.parse_target(f"gpu:{name}:8"))
    assert devices.count == 8 and devices.device_kind == kind
    assert devices.devices[0].client.runtime_type == "compile_only_runtime"


@needs_plugin
def test_two_hosts_of_eight_are_sixteen_devices():
    devices = registry.load_target(registry.parse_target("gpu:h100:2x8"))
    assert devices.count == 16 and {d.process_index for d in devices.devices} == {0, 1}


@needs_plugin
def test_a_file_that_is_no_gpu_description_quotes_jax(tmp_path: Path):
    bad = tmp_path / "bad.txtpb"
    bad.write_text("this is not a GpuTargetConfigProto\n")
    with pytest.raises(TargetError) as error:
        registry.load_target(registry.parse_target(f"gpu:{bad}:8"))
    assert f"JAX did not take {bad} as a GPU description" in error.value.message
    assert "h100.txtpb" in error.value.hint


@needs_plugin
def test_a_users_own_description_file_compiles(tmp_path: Path):
    own = tmp_path / "mine.txtpb"
    own.write_text((gpu_target.DESCRIPTIONS / "a100.txtpb").read_text())
    devices = registry.load_target(registry.parse_target(f"gpu:{own}:8"))
    assert devices.count == 8 and devices.device_kind == "NVIDIA A100-SXM4-80GB"


@needs_plugin
def test_a_mesh_that_does_not_fit_the_gpus_is_refused_with_both_counts():
    traced = programs.gspmd_accumulate(_cpu_mesh(8)).trace()
    with pytest.raises(TargetError, match="runs on 8 devices; gpu:h100:4 has 4"):
        targets.compile_for_target(traced, registry.load_target(registry.parse_target("gpu:h100:4")), "step")


@needs_plugin
def test_the_gpu_hoists_the_accumulated_gradients_all_reduce_the_cpu_keeps_in_the_loop():
    """jit + shardings, W replicated: XLA:GPU's code motion takes the gradient's all-reduce out of
    the scan (one run per call, in ENTRY); XLA:CPU keeps it in the body (4 runs)."""
    traced = programs.gspmd_accumulate(_cpu_mesh(8)).trace()
    cpu, gpu = traced.lower().compile().as_text(), _gpu(traced)
    assert _all_reduces(cpu) == [("f32[16,16]", True)]
    assert _all_reduces(gpu) == [("f32[16,16]", False)] or _all_reduces(gpu) == [("f32[256]", False)]
    (hoisted,) = compiled_plan(gpu).collectives  # placed by its computation, whatever its op_name says
    assert hoisted.loops == () and hoisted.executions == 1 and hoisted.opcode in ("all-reduce-start", "all-reduce")


@needs_plugin
def test_the_fsdp_accumulation_keeps_its_reduce_scatters_in_the_loop_on_the_gpu():
    traced = programs.fsdp_accumulate(_cpu_mesh(8)).trace()
    gpu = _gpu(traced)
    bodies = set(re.findall(r"body=%([\w.\-]+)", gpu))
    computation, in_loop = "", []
    for line in gpu.splitlines():
        if (header := _HEADER.match(line)):
            computation = header.group(2)
        elif re.search(r" reduce-scatter(-start)?\(", line):
            in_loop.append(computation in bodies)
    assert in_loop and all(in_loop)  # the weights' gradients (combined or not), scattered in every micro-batch
    scatters = [c for c in compiled_plan(gpu).collectives if c.kind == "reduce-scatter"]
    assert len(scatters) == len(in_loop) and all(c.loops and c.executions == programs.MICRO_BATCHES for c in scatters)


# --- check and report ---------------------------------------------------------------------------

@needs_plugin
def test_check_on_h100s_says_the_compiler_moves_the_gradients_and_keeps_the_loss(tmp_path: Path, shardscope_cli):
    path = tmp_path / "maxtext_accum.py"
    path.write_text(_MAXTEXT)
    result = shardscope_cli("check", path, "--target", "gpu:h100:8", "--json")
    data = json.loads(result.stdout)
    (program,) = data["programs"]
    target = program["targets"]["gpu:h100:8"]
    assert target["compiler"] == "XLA:GPU"
    # by hand: the gradients (16*16 + 16*32 = 768 floats) in one flat all-reduce outside every
    # loop, the loss's scalar in the body, 4 runs
    collectives = target["compiled_collectives"]
    outside = [c for c in collectives if not c["loops"]]
    inside = [c for c in collectives if c["loops"]]
    assert [(c["values"], c["executions"], c["bytes"]) for c in outside] == [(["grad(params['w1'])", "grad(params['w2'])"], 1, 768 * 4)]
    # the loss's sum is named by the variable micro assigns value_and_grad's first result to (l), not out[1]
    (assigned,) = re.findall(r"(\w+), \w+ = jax\.value_and_grad\(loss_fn\)", _MAXTEXT)
    assert [(c["values"], c["executions"]) for c in inside] == [([assigned], 4)]
    assert result.returncode == 1  # the loss's sum is deferrable and the GPU keeps it in the loop


@needs_plugin
def test_report_on_h100s_shows_the_seed_naive_plans_all_reduce_leave_the_loop(shardscope_cli):
    """linear.py on gpu:h100:8: the naive plan's all-reduce of W's gradient leaves the chunk loop
    on the GPU (1 run per call; the CPU runs it once per chunk), the deferred one was outside already."""
    result = shardscope_cli("report", DEMOS / "linear.py", "--target", "gpu:h100:8", "--json", "-r", "1")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["devices"] == 8 and data["mesh"] == {"s": 8}
    target = data["targets"]["gpu:h100:8"]
    assert (target["compiler"], target["devices"], target["device_kind"]) == ("XLA:GPU", 8, "NVIDIA H100 80GB HBM3")
    settings = Settings(path=DEMOS / "linear.py", devices=8)
    built = build_plans(load_demo_file(settings.path).functions["linear"], settings)
    texts = {plan: (built.functions[plan].trace(*built.args).lower().compile().as_text(),
                    _gpu(built.functions[plan].trace(*built.args))) for plan in ("naive", "deferred")}
    cpu, gpu = texts["naive"]
    assert [loop for _, loop in _all_reduces(cpu)] == [True] and [loop for _, loop in _all_reduces(gpu)] == [False]
    naive = target["variants"]["naive"]
    (moved,) = naive["compiled_collectives"]
    assert moved["loops"] == [] and moved["executions"] == 1 and moved["left_loop"] is True
    (placement,) = naive["placements"]
    assert placement["change"] == "left_loop" and placement["cpu_executions"] == 2
    ((shape, _),) = _all_reduces(gpu)  # its size, from the GPU module's own shape
    size = 4 * math.prod(int(d) for d in re.search(r"f32\[([\d,]*)\]", shape).group(1).split(",") if d)
    assert naive["verdict"] == ("on h100:8 the naive plan's all-reduce of grad(params) leaves the loop: "
                                f"the compiler already does the deferral here. Its all-reduce of grad(params) moves "
                                f"{size:,} B per run.")
    assert naive["memory"]["argument_size_in_bytes"] > 0
    assert [loop for _, loop in _all_reduces(texts["deferred"][1])] == [False]
    assert [c["loops"] for c in target["variants"]["deferred"]["compiled_collectives"]] == [[]]


# --- the GPU's text forms, from modules compiled here ---------------------------------------------

def _shard_map_step(mesh: JaxMesh, collective):
    from jax import shard_map

    @jax.jit
    def step(x):
        return shard_map(collective, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)

    return step.trace(jax.ShapeDtypeStruct((8 * 64, 16), jnp.float32, sharding=NamedSharding(mesh, P("data"))))


@needs_plugin
@pytest.mark.parametrize("kind, collective", [
    ("all-reduce", lambda x: lax.psum(x, "data")),
    ("all-gather", lambda x: lax.all_gather(x, "data", tiled=True)[:64]),
    ("reduce-scatter", lambda x: jnp.tile(lax.psum_scatter(x, "data", tiled=True), (8, 1))),
    ("all-to-all", lambda x: lax.all_to_all(x, "data", 0, 0, tiled=True)),
    ("collective-permute", lambda x: lax.ppermute(x, "data", [(i, (i + 1) % 8) for i in range(8)])),
])
def test_each_gpu_form_of_a_collective_is_one_collective_of_its_kind(kind, collective):
    """The GPU prints a collective as ``KIND-start``/``-done`` (0.10.2; a sync one with
    "is_sync":true) or plainly (0.12's sync forms): each is one collective of its kind, run once."""
    gpu = _gpu(_shard_map_step(_cpu_mesh(8), collective))
    printed = re.findall(rf"^\s*(?:ROOT )?%\S+ = .*?\s({kind}(?:-start)?)\(", gpu, re.M)
    assert len(printed) == 1, printed  # counted in the text: one instruction of that kind (a start or plain)
    (found,) = [c for c in compiled_plan(gpu).collectives if c.kind == kind]
    assert found.opcode == printed[0] and found.executions == 1 and found.loops == ()


@needs_plugin
@pytest.mark.parametrize(("args", "message", "hint"), [
    (("check", DEMOS / "gspmd_accumulate.py", "--target", "gpu:h100:4"),
     "step, step_fixed run on 8 devices; gpu:h100:4 has 4", "shardscope check --devices 4"),
    (("report", DEMOS / "linear.py", "--target", "gpu:h100:4", "--devices", "2"),
     "The mesh s=2 has 2 devices; gpu:h100:4 has 4.", "multiply to 4"),
    (("check", DEMOS / "linear.py", "--target", "gpu:nosuch/gpu.txtpb:8"),
     "Cannot read the GPU description 'nosuch/gpu.txtpb'", "gpu:h100:8"),
    (("report", DEMOS / "linear.py", "--target", "gpu:h100:4", "--target", "tpu:v5e:2x4"),
     "different device counts (gpu:h100:4 has 4, tpu:v5e:2x4 has 8)", "run once per device count"),
])
def test_a_gpu_target_that_does_not_fit_is_one_message_with_exit_2(args, message, hint, shardscope_cli):
    result = shardscope_cli(*args)
    assert result.returncode == 2, result.stdout
    assert message in " ".join(result.stderr.split()) and hint in result.stderr
    assert "Traceback" not in result.stderr


@needs_plugin
def test_without_the_plugin_check_names_the_extra_and_exits_2(monkeypatch, tmp_path, shardscope_cli):
    hide_compilers(monkeypatch, tmp_path, "gpu")
    gpu_target._load_gpus.cache_clear()  # a target loaded earlier in this process would not look again
    try:
        result = shardscope_cli("check", DEMOS / "linear.py", "--target", "gpu:a100:8")
    finally:
        gpu_target._load_gpus.cache_clear()
    assert result.returncode == 2 and "needs JAX's CUDA plugin" in result.stderr
    assert "pip install 'shardscope[gpu]'" in result.stderr and "Traceback" not in result.stderr


@needs_plugin
def test_two_targets_side_by_side_each_judge_their_own_plan(shardscope_cli):
    """gspmd_accumulate on 8 H100s and a v5e 2x4 slice: each compiler moves the gradients' sum out
    of the loop (counted in both modules here), so check passes on both; without a target it fails."""
    result = shardscope_cli("check", DEMOS / "gspmd_accumulate.py", "--function", "step", "--target", "gpu:h100:8",
                            "--target", "tpu:v5e:2x4", "--json")
    data = json.loads(result.stdout)
    assert data["judged_on"] == ["XLA:GPU", "XLA:TPU"] and result.returncode == 0
    for target in ("gpu:h100:8", "tpu:v5e:2x4"):
        (placement,) = data["targets"][target]["variants"]["step"]["placements"]
        assert placement["change"] == "left_loop", target
    cpu_only = shardscope_cli("check", DEMOS / "gspmd_accumulate.py", "--function", "step", "--json")
    assert json.loads(cpu_only.stdout)["judged_on"] == ["XLA:CPU"] and cpu_only.returncode == 1
    text = shardscope_cli("check", DEMOS / "gspmd_accumulate.py", "--function", "step")
    assert "This judges the plan XLA:CPU compiled" in " ".join(text.stdout.split())
    assert "--target gpu:h100:8" in " ".join(text.stdout.split())


@needs_plugin
def test_inspect_on_and_the_testing_helpers_read_the_gpus_plan():
    import shardscope
    from shardscope import testing

    built = programs.gspmd_accumulate(_cpu_mesh(8))
    gpu = _gpu(built.trace())
    hoisted = [loop for _, loop in _all_reduces(gpu)]
    assert hoisted == [False]  # counted in the module: the one all-reduce outside every loop
    inspection = shardscope.inspect_on("gpu:h100:8", built.fn, *built.args)
    (plan,) = inspection.targets
    assert plan.compiler == "XLA:GPU" and plan.staying_findings == ()
    assert testing.collective_counts_on("gpu:h100:8", built.fn, *built.args) == {"all-reduce": len(hoisted)}
    testing.assert_no_deferrable_collectives_in_loops_on("gpu:h100:8", built.fn, *built.args)
    with pytest.raises(AssertionError, match="collective"):
        testing.assert_no_collectives_in_loops(built.fn, *built.args)  # the CPU plan keeps it in the loop


@needs_plugin
def test_with_the_gpus_pipelining_flags_a_peeled_loop_still_counts_every_run():
    """The collective pipeliner peels an iteration: the loop runs n-1 times and a copy of each
    collective runs in ENTRY. Per call, the reduce-scatters still run once per micro-batch:
    counted here from the module (the loop's trip count times the body's, plus ENTRY's)."""
    devices = registry.load_target(registry.parse_target("gpu:h100:8"))
    built = programs.fsdp_accumulate(targets.target_mesh(devices, axis="data"))
    flags = {"xla_gpu_enable_pipelined_all_reduce": True, "xla_gpu_enable_pipelined_all_gather": True,
             "xla_gpu_enable_pipelined_reduce_scatter": True}
    lowered = built.fn.trace(*built.args).lower()
    while True:  # the flags this XLA knows (0.12 renamed some): "No such compile option" names the one it does not
        try:
            with gpu_target.cpu_platforms():
                text = lowered.compile(compiler_options=flags).as_text()
            break
        except Exception as exc:
            unknown = re.search(r"No such compile option: '(\w+)'", str(exc))
            if unknown is None:
                raise
            flags.pop(unknown.group(1))
    (trip,) = {int(n) for n in re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', text)}
    bodies = set(re.findall(r"body=%([\w.\-]+)", text))
    in_body = in_entry = 0
    computation = ""
    for line in text.splitlines():
        if (header := _HEADER.match(line)):
            computation = header.group(2)
        elif re.search(r" reduce-scatter(-start)?\(", line):
            in_body += computation in bodies
            in_entry += line.startswith("  ") and computation not in bodies
    if "xla_gpu_enable_pipelined_reduce_scatter" in flags:  # jax 0.10.2's XLA: peeled, one iteration outside
        assert trip == programs.MICRO_BATCHES - 1 and in_body and in_entry
    assert compiled_plan(text).counts()["reduce-scatter"] == in_body * trip + in_entry == programs.MICRO_BATCHES * in_body


_TOO_BIG = textwrap.dedent('''
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    x = jax.ShapeDtypeStruct((18 * 2**30,), jnp.float32, sharding=NamedSharding(mesh, P()))

    @shardscope.program(args=(x,))
    @jax.jit
    def doubled(x):
        return x * 2.0
''')


@needs_plugin
def test_xla_gpus_scheduler_limit_is_a_finding_not_a_line_on_the_terminal(tmp_path: Path, shardscope_cli):
    """A 72 GiB argument and its 72 GiB result on one H100: XLA:GPU's scheduler logs "The byte size
    of input/output arguments (154618822656) exceeds the base limit (68719476736)" straight to file
    descriptor 2 while it compiles. It is read into the step's fit (which fails, as the bytes are
    also over the 60 GiB JAX's pool takes of 80 GiB), and the raw line reaches nobody."""
    path = tmp_path / "too_big.py"
    path.write_text(_TOO_BIG)
    result = shardscope_cli("check", path, "--target", "gpu:h100:1", "--json")
    assert result.returncode == 1, result.stderr
    assert "gpu_hlo_schedule" not in result.stderr and "exceeds the base limit" not in result.stderr
    fit = json.loads(result.stdout)["programs"][0]["targets"]["gpu:h100:1"]["fit"]
    argument_and_result = 2 * 18 * 2**30 * 4
    assert fit["compiler_limit"] == {"argument_bytes": argument_and_result, "limit_bytes": 64 * 2**30}
    assert fit["fits"] is False and fit["capacity_bytes"] == 60 * 2**30
    assert "XLA:GPU's scheduler says the arguments and outputs (144 GiB) exceed its limit (64 GiB)" in fit["line"]
    text = " ".join(shardscope_cli("check", path, "--target", "gpu:h100:1").stdout.split())
    assert "exceed its limit (64 GiB)" in text
