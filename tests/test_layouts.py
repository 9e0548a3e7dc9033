"""``@shardscope.layouts`` and ``shardscope layouts``: every assignment of a target's devices to a
step's mesh axes, compiled for the target and ranked. Small sweeps on ``cpu:8`` (compiled by
XLA:CPU in this process) and on ``tpu:v5e:2x4`` (libtpu's compile-only chips); each number
checked against a count made here: the compiled module's text read with a regular expression,
JAX's own compile's memory analysis, shapes multiplied by hand.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

import shardscope
from _support import PYTHON, ROOT
from shardscope.config.layout_candidates import axis_assignments, candidates, parse_axis_choice
from shardscope.errors import SettingsError
from shardscope.pipeline import layout_ranking
from shardscope.sources.layouts import spec_of
from _gpu_plugin import needs_gpu_plugin
from test_targets import needs_libtpu

MLP = '''
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import shardscope

D, H, TOKENS = 64, 128, 16


@shardscope.layouts(axes=("fsdp", "tensor"), options={"per_device_batch": [1, 2]},
                    tokens=lambda mesh, per_device_batch: per_device_batch * mesh.size * TOKENS)
def build(mesh, per_device_batch):
    """One SGD step of a two-layer MLP: weights over fsdp x tensor, the batch over fsdp."""
    def leaf(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    params = {"w1": leaf((D, H), P("fsdp", "tensor")), "w2": leaf((H, D), P("tensor", "fsdp"))}
    x = leaf((per_device_batch * mesh.size, TOKENS, D), P("fsdp"))

    def loss(p, x):
        return jnp.mean(jnp.tanh(x @ p["w1"]) @ p["w2"] - x) ** 2

    @jax.jit
    def step(p, x):
        grads = jax.grad(loss)(p, x)
        return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads)

    return step, (params, x)
'''


def write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def sweep_json(shardscope_cli, *args: object) -> tuple[dict, str]:
    result = shardscope_cli("layouts", *args, "--json", "--workers", "1")
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout), result.stderr


# --------------------------------------------------------------------------- candidates, by hand


def test_every_assignment_of_the_devices_to_the_axes_is_a_candidate():
    by_hand = [sizes for sizes in itertools.product(range(1, 257), repeat=3) if math.prod(sizes) == 256]
    assert sorted(axis_assignments(256, ("data", "fsdp", "tensor"))) == sorted(by_hand)
    assert len(by_hand) == 45  # 256 = 2**8: the ways to split 8 twos over 3 axes, C(10, 2)
    kept = axis_assignments(256, ("data", "fsdp", "tensor"), {"data": (1,), "tensor": (1, 4, 16, 3)})
    assert kept == [(1, 16, 16), (1, 64, 4), (1, 256, 1)]  # 3 divides nothing: no candidate has it
    made = candidates(8, ("fsdp", "tensor"), [("per_device_batch", (1, 2))])
    assert len(made) == 8 and made[0].label == "tensor=8, per_device_batch=1"
    assert {c.size("fsdp") * c.size("tensor") for c in made} == {8}


def test_an_axis_restriction_that_leaves_nothing_or_names_no_axis_is_one_message():
    with pytest.raises(SettingsError, match="has no axis 'model'"):
        candidates(8, ("fsdp", "tensor"), [], {"model": (2,)})
    with pytest.raises(SettingsError, match="No assignment of 8 devices"):
        candidates(8, ("fsdp", "tensor"), [], {"tensor": (3,)})
    assert parse_axis_choice("tensor=1,4") == ("tensor", (1, 4))
    for text in ("tensor", "tensor=", "tensor=a", "tensor=0", "=4"):
        with pytest.raises(SettingsError, match="is not an axis with its sizes"):
            parse_axis_choice(text)


def test_the_decorator_records_its_spec_and_refuses_what_build_cannot_take():
    @shardscope.layouts(axes=("data", "fsdp"), options={"batch": [1, 2]}, axis_types="explicit",
                        examples=lambda mesh, batch: batch)
    def build(mesh, batch):
        return None

    spec = spec_of(build)
    assert spec is not None and spec.axes == ("data", "fsdp") and spec.options == (("batch", (1, 2)),)
    assert spec.axis_types == ("Explicit", "Explicit") and spec.explicit and spec.unit == "examples"
    with pytest.raises(ValueError, match=r"cannot be called as build\(mesh, size=...\)"):
        shardscope.layouts(axes=("data",), options={"size": [1]})(lambda mesh: None)
    with pytest.raises(ValueError, match="give the mesh axes' names, each once"):
        shardscope.layouts(axes=("data", "data"))
    with pytest.raises(ValueError, match="give tokens= or examples=, not both"):
        shardscope.layouts(axes=("data",), tokens=len, examples=len)
    with pytest.raises(ValueError, match="axis_types="):
        shardscope.layouts(axes=("data",), axis_types="manual")


# --------------------------------------------------------------------------- on the CPU


_KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"f32": 4, "bf16": 2, "s32": 4, "f16": 2, "u32": 4, "pred": 1}


def _shape_bytes(shape: str) -> int:
    return sum(_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
               for dtype, dims in re.findall(r"\b(f32|bf16|s32|f16|u32|pred)\[([\d,]*)\]", shape))


def _collective_bytes(text: str) -> int:
    """Every collective's operand bytes in a compiled module without loops, read from its text:
    each instruction's shape from the line that defines it, each collective's operands by name."""
    shapes, collectives = {}, []
    for line in text.splitlines():
        found = re.match(r"\s*(?:ROOT\s+)?%([\w.\-]+) = (\(.*?\)|\S+) ([\w\-]+)\(([^)]*)\)", line)
        if not found:
            continue
        name, shape, opcode, operands = found.groups()
        shapes[name] = shape
        if opcode in _KINDS:
            collectives.append([o.strip().lstrip("%") for o in operands.split(",") if o.strip()])
    assert collectives, "the module has collectives"
    return sum(_shape_bytes(shapes[operand]) for operands in collectives for operand in operands)


def test_a_cpu_sweep_ranks_by_the_bytes_each_layout_communicates(tmp_path, shardscope_cli):
    import jax
    import numpy as np
    from jax.sharding import Mesh

    path = write(tmp_path, "mlp.py", MLP)
    data, _ = sweep_json(shardscope_cli, path, "--target", "cpu:8", "--option", "per_device_batch=2")
    assert data["candidates"] == 4 and data["target"] == "cpu:8" and data["unit"] == "tokens"
    assert any("no step estimate on cpu:8" in note for note in data["notes"])
    # the bytes each layout's collectives move per device, read from XLA:CPU's own compile here
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the test's own file
    by_hand = {}
    for fsdp, tensor in ((1, 8), (2, 4), (4, 2), (8, 1)):
        mesh = Mesh(np.array(jax.devices()[:8]).reshape(fsdp, tensor), ("fsdp", "tensor"))
        step, args = namespace["build"](mesh, 2)
        by_hand[f"fsdp={fsdp} x tensor={tensor}".replace("fsdp=1 x ", "").replace(" x tensor=1", "")] = \
            _collective_bytes(step.lower(*args).compile().as_text())
    rows = data["rows"]
    assert {r["candidate"]["label"].removesuffix(", per_device_batch=2"): r["communicated_bytes"] for r in rows} == by_hand
    assert [r["communicated_bytes"] for r in rows] == sorted(by_hand.values())  # the fewest bytes first
    assert data["pick"]["label"] == rows[0]["candidate"]["label"]
    for row in rows:  # tokens per step: per-device batch x devices x tokens, as the file says
        assert row["per_step"] == 2 * 8 * 16 and row["outcome"] == "unknown" and row["step"] is None


def test_a_build_that_raises_is_a_row_saying_why_and_the_sweep_goes_on(tmp_path, shardscope_cli):
    path = write(tmp_path, "picky.py", MLP.replace('    """One SGD step', '    if mesh.shape["tensor"] == 8:\n'
                                                   '        raise ValueError("8-way tensor parallelism is not written yet")\n'
                                                   '    """One SGD step'))
    data, stderr = sweep_json(shardscope_cli, path, "--target", "cpu:8", "--axis", "tensor=4,8",
                              "--option", "per_device_batch=1")
    failed = [r for r in data["rows"] if r["outcome"] == "failed"]
    assert [r["candidate"]["label"] for r in failed] == ["tensor=8, per_device_batch=1"]
    assert failed[0]["reason"] == "ValueError: 8-way tensor parallelism is not written yet"
    assert data["rows"][0]["candidate"]["label"] == "fsdp=2 x tensor=4, per_device_batch=1"
    assert data["rows"][-1] is failed[0] and data["counts"] == {"unknown": 1, "failed": 1}
    assert "layouts: 2/2" in stderr  # the progress, one line per candidate off a terminal


@pytest.mark.parametrize("args, message", [
    (("--axis", "model=2"), "the function's mesh has no axis 'model'"),
    (("--axis", "tensor=3"), "No assignment of 8 devices to fsdp, tensor has tensor in {3}"),
    (("--option", "per_device_batch=3"), "none of 3 is among per_device_batch's values"),
    (("--option", "size=3"), "build has no option 'size'"),
    (("-f", "other"), "has no layouts function 'other'"),
])
def test_a_mistake_is_one_message_and_exit_2(tmp_path, shardscope_cli, args, message):
    path = write(tmp_path, "mlp.py", MLP)
    result = shardscope_cli("layouts", path, "--target", "cpu:8", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert message in result.stderr


def test_a_file_without_layouts_and_check_of_a_layouts_file_say_what_to_run(tmp_path, shardscope_cli):
    path = write(tmp_path, "mlp.py", MLP)
    check = shardscope_cli("check", path)
    assert check.returncode == 2 and "shardscope layouts" in check.stderr and "Traceback" not in check.stderr
    plain = write(tmp_path, "plain.py", "import jax\n")
    result = shardscope_cli("layouts", plain, "--target", "cpu:8")
    assert result.returncode == 2 and "has no function marked @shardscope.layouts" in result.stderr


def test_explicit_axes_trace_under_the_candidates_mesh(tmp_path, shardscope_cli):
    explicit = """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import shardscope


    @shardscope.layouts(axes=("data", "fsdp"), axis_types="explicit")
    def build(mesh):
        \"\"\"A weight gathered with reshard(..., P()), which needs the mesh set.\"\"\"
        w = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", None)))
        x = jax.ShapeDtypeStruct((32, 64), jnp.float32, sharding=NamedSharding(mesh, P(("data", "fsdp"), None)))

        @jax.jit
        def step(w, x):
            return jnp.sum(x @ jax.sharding.reshard(w, P()))

        return step, (w, x)
    """
    data, _ = sweep_json(shardscope_cli, write(tmp_path, "explicit.py", explicit), "--target", "cpu:8",
                         "--axis", "data=1,8")
    rows = {r["candidate"]["label"]: r for r in data["rows"]}
    assert [r["outcome"] for r in data["rows"]] == ["unknown", "unknown"], data["rows"]
    # fsdp=8 gathers the weight's eight 8 x 64 float32 shards: each device sends its 2 KiB; data=8 holds it whole
    gathers = [g for g in rows["fsdp=8"]["collectives"] if g["kind"] == "all-gather"]
    assert [(g["axes"], g["bytes_per_step"]) for g in gathers] == [(["fsdp"], 8 * 64 * 4)]
    assert not [g for g in rows["data=8"]["collectives"] if g["kind"] == "all-gather"]


@pytest.mark.slow  # two worker processes, each starting JAX
def test_worker_processes_make_the_rows_this_process_makes(tmp_path, shardscope_cli):
    path = write(tmp_path, "mlp.py", MLP)
    here, _ = sweep_json(shardscope_cli, path, "--target", "cpu:8", "--option", "per_device_batch=1",
                         "--axis", "tensor=2,4")
    result = shardscope_cli("layouts", path, "--target", "cpu:8", "--option", "per_device_batch=1",
                            "--axis", "tensor=2,4", "--json", "--workers", "2")
    assert result.returncode == 0, result.stderr
    spread = json.loads(result.stdout)
    assert spread["cost"]["workers"] == 2 and here["cost"]["workers"] == 1
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("compile")} for r in rows]  # noqa: E731
    assert strip(spread["rows"]) == strip(here["rows"])


def _interrupted(argv: list[str], done: str, *, group: bool = False, wait_s: float = 120) -> tuple[int, str, str]:
    """``(status, stdout, stderr)`` of ``shardscope layouts ARGV`` sent SIGINT once its progress
    says ``done``: to it alone, or with ``group`` to its whole process group, as a terminal's Ctrl+C."""
    process = subprocess.Popen([PYTHON, "-m", "shardscope", "layouts", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=group)
    try:
        assert process.stderr is not None
        seen = ""
        deadline = time.monotonic() + wait_s
        while done not in seen and time.monotonic() < deadline:
            seen += process.stderr.readline()
        assert done in seen, seen
        if group:
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if group:
            with contextlib.suppress(ProcessLookupError):  # the workers too, whatever happened
                os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    return process.returncode, stdout, stderr


@pytest.mark.slow  # a fresh process, interrupted
def test_ctrl_c_keeps_the_rows_done(tmp_path):
    slow = MLP.replace('    """One SGD step', '    if mesh.shape["fsdp"] == 2:\n        import time\n'
                       '        time.sleep(300)\n    """One SGD step')
    path = write(tmp_path, "slow.py", slow)
    status, stdout, stderr = _interrupted([str(path), "--target", "cpu:8", "--json", "--workers", "1", "--option",
                                           "per_device_batch=1"], "layouts: 1/4")
    assert status == 130
    data = json.loads(stdout)
    assert data["interrupted"] and data["candidates"] == 4
    assert [r["candidate"]["label"] for r in data["rows"]] == ["tensor=8, per_device_batch=1"]
    assert "the 1 of 4 candidates done are above" in stderr


@pytest.mark.slow  # a fresh process and its workers, interrupted as a terminal does
@needs_libtpu
def test_ctrl_c_to_the_process_group_with_workers_ends_at_once_and_blames_no_candidate():
    """A terminal's Ctrl+C reaches the command and its worker processes alike: the workers leave the
    interrupt to the command, which stops them at once; the candidates in flight are neither done
    nor failed, and no candidate is blamed on memory (two workers compiling the shipped layouts
    demo for a v5e slice: 3.2 s to end, 5 rows 'failed (signal 15; ... runs out of memory)' before)."""
    status, stdout, stderr = _interrupted(["transformer_layouts", "--target", "tpu:v5e:2x4", "--no-cache", "--json",
                                           "--workers", "2"], "layouts: 2/20", group=True, wait_s=300)
    assert status == 130, stderr
    data = json.loads(stdout)
    outcomes = [r["outcome"] for r in data["rows"]]
    assert data["interrupted"] and "failed" not in outcomes, data["rows"]
    assert f"the {len(outcomes)} of 20 candidates done are above" in stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr and "out of memory" not in stdout + stderr


# --------------------------------------------------------------------------- on a TPU slice


@needs_libtpu
def test_a_tpu_sweep_fits_estimates_and_picks(tmp_path, shardscope_cli):
    import jax
    from jax.experimental import topologies
    from jax.sharding import AxisType

    path = write(tmp_path, "mlp.py", MLP)
    data, _ = sweep_json(shardscope_cli, path, "--target", "tpu:v5e:2x4", "--axis", "tensor=1,8",
                         "--option", "per_device_batch=2")
    rows = {r["candidate"]["label"]: r for r in data["rows"]}
    assert set(rows) == {"fsdp=8, per_device_batch=2", "tensor=8, per_device_batch=2"}
    # the compiler's own bytes per device: JAX's own compile of the same step for the same slice
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the test's own file
    from shardscope.targets.tpu import TpuTarget

    devices = TpuTarget("v5e:2x4").load().devices
    mesh = jax.make_mesh((8, 1), ("fsdp", "tensor"), devices=devices, axis_types=(AxisType.Auto,) * 2)
    step, args = namespace["build"](mesh, 2)
    memory = step.lower(*args).compile().memory_analysis()
    fsdp = rows["fsdp=8, per_device_batch=2"]
    assert fsdp["fit"]["needed_bytes"] == memory.peak_memory_in_bytes  # libtpu's peak (tests/test_memory_fit.py)
    assert fsdp["fit"]["capacity_bytes"] == int(15.75 * 2**30) and fsdp["fit"]["fits"]
    # arguments per device: w1 and w2 (64 x 128 f32) split 8 ways, x (2 x 8, 16, 64) f32 split 8 ways
    assert fsdp["argument_bytes"] == (2 * 64 * 128 * 4 + 16 * 16 * 64 * 4) // 8
    for row in data["rows"]:
        step_s = row["step"]
        assert step_s["low_s"] <= step_s["high_s"]
        assert step_s["high_s"] == pytest.approx(step_s["estimate"]["dispatched_upper_s"])
        low, high = row["per_chip_per_s"]
        assert high == pytest.approx(2 * 8 * 16 / 8 / step_s["low_s"])
        assert low == pytest.approx(2 * 8 * 16 / 8 / step_s["high_s"])
        shares = [c["share_of_step"] for c in row["collectives"]]
        # each group's share is of its time that may be exposed: all but what overlaps by
        # construction (an all-gather stepped by XLA:TPU's async collective fusions beside a dot)
        overlapped = sum(c["overlapped_seconds_per_step"] for c in row["collectives"])
        assert overlapped == pytest.approx(step_s["estimate"]["overlapped_s"])
        assert 0 <= overlapped <= step_s["estimate"]["collectives_s"]
        assert sum(shares) == pytest.approx((step_s["estimate"]["collectives_s"] - overlapped) / step_s["high_s"])
    first = data["rows"][0]
    assert data["pick"]["label"] == first["candidate"]["label"]
    assert first["step"]["high_s"] <= data["rows"][1]["step"]["high_s"]  # the same tokens per step
    assert data["why"].startswith(f"pick: {first['candidate']['label']}: the fastest that fits")
    assert any(note.startswith("checked on a v5e chip") for note in data["notes"])


@needs_libtpu
def test_a_candidate_whose_arguments_cannot_fit_is_cut_before_compiling(tmp_path, shardscope_cli):
    big = '''
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import shardscope


    @shardscope.layouts(axes=("data", "fsdp"))
    def build(mesh):
        """A 20 GiB float32 weight over fsdp, doubled."""
        w = jax.ShapeDtypeStruct((5 * 2**30,), jnp.float32, sharding=NamedSharding(mesh, P("fsdp")))
        return jax.jit(lambda w: w * 2, donate_argnums=0), (w,)
    '''
    data, stderr = sweep_json(shardscope_cli, write(tmp_path, "big.py", big), "--target", "tpu:v5e:2x4",
                              "--axis", "data=1,8")
    rows = {r["candidate"]["label"]: r for r in data["rows"]}
    cut = rows["data=8"]
    assert cut["outcome"] == "cut" and cut["step"] is None
    assert cut["argument_bytes"] == 20 * 2**30 == cut["fit"]["needed_bytes"]
    assert "its arguments alone (parameters and optimizer state) take 20 GiB per device" in cut["reason"]
    assert rows["fsdp=8"]["outcome"] == "fits" and rows["fsdp=8"]["argument_bytes"] == 20 * 2**30 // 8
    assert data["pick"]["label"] == "fsdp=8"
    assert "data=8: cut:" in stderr


@needs_libtpu
def test_the_matmuls_xla_tpu_overlaps_with_a_collective_count_in_the_step_estimate():
    """XLA:TPU runs an FSDP layer's matmul inside the async collective fusion that gathers the next
    weights: its flops are the step's. A scan of 4 layers of tanh(x @ w1) @ w2, its weights gathered
    over 8 chips, differentiated: 2 matmuls forward and 4 backward per layer, each 2 x b x D x H."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    from shardscope.engine.hlo.text import parse
    from shardscope.engine.hlo.work import module_work
    from shardscope.targets.tpu import TpuTarget

    mesh = jax.make_mesh((8,), ("fsdp",), devices=TpuTarget("v5e:2x4").load().devices, axis_types=(AxisType.Auto,))
    layers, d, h, b = 4, 512, 1024, 64
    w1 = jax.ShapeDtypeStruct((layers, d, h), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, "fsdp", None)))
    w2 = jax.ShapeDtypeStruct((layers, h, d), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, None, "fsdp")))
    x = jax.ShapeDtypeStruct((b * 8, d), jnp.bfloat16, sharding=NamedSharding(mesh, P("fsdp")))

    def loss(p, x):
        y, _ = lax.scan(lambda x, w: (jnp.tanh(x @ w[0]) @ w[1], None), x, p)
        return jnp.sum(y.astype(jnp.float32))

    text = jax.jit(jax.grad(loss)).lower((w1, w2), x).compile().as_text()
    assert "async_collective_fusion" in text  # the form this is about
    work = module_work(parse(text))
    matmul = sum(c.flops * i.runs for i in work.instructions for c in i.counts if c.matmul and not c.access)
    assert matmul == layers * 6 * 2 * b * d * h


def test_the_guides_flax_example_ranks_on_the_cpu(tmp_path, shardscope_cli):
    """The flax model with logical axis rules of docs/guides/layouts.md, as the page writes it."""
    page = (ROOT / "docs" / "guides" / "layouts.md").read_text()
    (example,) = [block for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL) if "flax" in block]
    data, _ = sweep_json(shardscope_cli, write(tmp_path, "flax_mlp.py", example), "--target", "cpu:8",
                         "--axis", "data=1", "--axis", "tensor=1,2", "--option", "per_device_batch=4")
    assert [r["outcome"] for r in data["rows"]] == ["unknown", "unknown"], data["rows"]
    assert data["unit"] == "examples" and {r["per_step"] for r in data["rows"]} == {32}
    # fsdp=4 x tensor=2 splits the 64 x 256 kernel's 256 over tensor: its gathers run over fsdp alone
    rows = {r["candidate"]["label"]: r for r in data["rows"]}
    assert {tuple(g["axes"]) for g in rows["fsdp=8, per_device_batch=4"]["collectives"]} <= {("fsdp",), ()}
    assert ("tensor",) in {tuple(g["axes"]) for g in rows["fsdp=4 x tensor=2, per_device_batch=4"]["collectives"]}


@needs_libtpu
@pytest.mark.slow  # three fresh processes
def test_a_targets_compiles_are_kept_beside_the_cache_and_read_back_by_another_process(tmp_path):
    import gzip
    import os

    path = write(tmp_path, "mlp.py", MLP)
    cache = tmp_path / "cache"
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(cache), "SHARDSCOPE_NO_CACHE": ""}

    def sweep(workers: str) -> dict:
        done = subprocess.run([PYTHON, "-m", "shardscope", "layouts", str(path), "--target", "tpu:v5e:2x4", "--json",
                               "--workers", workers, "--option", "per_device_batch=1", "--axis", "tensor=1,2"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def kept() -> list[Path]:
        return sorted(cache.glob("shardscope-target-*-cache"))

    first = sweep("1")
    files = kept()
    assert len(files) == 2  # one compile per candidate, each its module's text and analyses
    texts = [json.loads(gzip.decompress(f.read_bytes()))["hlo_text"] for f in files]
    assert all("HloModule" in text for text in texts)
    # the same candidates traced in worker processes are the same modules: read back, nothing added
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("compile")} for r in rows]  # noqa: E731
    assert strip(sweep("2")["rows"]) == strip(first["rows"]) and kept() == files
    files[0].write_bytes(b"not gzip")  # a damaged entry is a miss: compiled again and written anew
    assert strip(sweep("1")["rows"]) == strip(first["rows"]) and kept() == files
    assert json.loads(gzip.decompress(files[0].read_bytes()))["hlo_text"] in texts


CUMSUM = '''
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import shardscope


@shardscope.layouts(axes=("data", "model"))
def build(mesh):
    """A cumulative sum along each row, the rows over data (the corpus's cumsum_f32: 4096 x 8192)."""
    x = jax.ShapeDtypeStruct((4096, 8192), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    return jax.jit(lambda x: jnp.cumsum(x, axis=1)), (x,)
'''


@needs_libtpu
def test_a_candidate_holding_a_kind_measured_out_of_band_says_so(tmp_path, shardscope_cli):
    """XLA:TPU computes a cumsum along a matrix's rows as prefix-sum reduce-windows, which v5e's corpus
    measured out of band (its cumsum_f32, 4096 x 8192; a 64 x 4096 one is no longer flagged since the
    estimate times a window sliding along a tiled dimension by its taps)."""
    data, _ = sweep_json(shardscope_cli, write(tmp_path, "cumsum.py", CUMSUM), "--target", "tpu:v5e:2x4",
                         "--axis", "model=1,2")
    (said,) = [note for note in data["notes"] if "may be off" in note]
    labels, words = said.split(": the estimate may be off: ")
    # both candidates (data=8, data=4 x model=2) hold the cumsum: said of each at once, not one by one
    assert len(data["rows"]) == 2
    assert labels == "every candidate (2)" and "prefix-sum" in words
    for row in data["rows"]:
        assert [kind["kind"] for kind in row["step"]["estimate"]["outside_band"]] == ["prefix sum"]


@needs_gpu_plugin
def test_a_target_without_a_chip_corpus_says_its_estimate_is_unchecked(tmp_path, shardscope_cli):
    data, _ = sweep_json(shardscope_cli, write(tmp_path, "cumsum.py", CUMSUM), "--target", "gpu:h100:8",
                         "--axis", "model=1")
    assert "the estimate is unchecked on h100: published peaks: no chip corpus was measured there" in data["notes"]
    assert not any(note.startswith("checked on") for note in data["notes"])
    # collectives priced by NCCL's model: none here (the rows split, nothing gathered), and a step all the same
    assert data["rows"][0]["step"]["high_s"] > 0


def test_a_layouts_run_in_this_process_gives_jax_its_source_locations_back(tmp_path, shardscope_cli):
    """The command leaves shardscope's frames out of JAX's source locations while it runs; in a
    process it does not own (this one, a notebook) it gives them back: a demo plan traced after it
    still names its chunk loop by shardscope's frame, as one traced before it does."""
    from jax._src import source_info_util

    from shardscope.config.settings import Settings
    from shardscope.pipeline.run import analyze

    from _support import DEMOS

    def chunk_loop_sources() -> set[str]:
        analysis = analyze(Settings(path=DEMOS / "linear.py", devices=2, chunk_size=16, repeats=1), measure=False)
        return {c.verdict.fix for c in analysis.plans["naive"].collectives if c.verdict is not None and c.verdict.fix}

    before, excluded = chunk_loop_sources(), list(source_info_util._exclude_paths)
    assert any("the plan's chunk loop" in fix for fix in before)
    sweep_json(shardscope_cli, write(tmp_path, "mlp.py", MLP), "--target", "cpu:8", "--option", "per_device_batch=2")
    assert source_info_util._exclude_paths == excluded
    assert chunk_loop_sources() == before


@pytest.mark.parametrize("cores, workers", [(1, 1), (2, 1), (3, 1), (4, 2), (13, 6), (64, 32)])
def test_a_sweep_leaves_each_compile_two_cores_by_default(cores, workers):
    """XLA compiles one program on several threads: on 2 cores two compiles side by side took more
    CPU than one after another, and no less time (BENCHMARKS.md section 11)."""
    from shardscope.pipeline.layout_pool import default_workers

    assert default_workers(cores) == workers


def test_the_default_reads_the_cores_this_process_may_use():
    import os

    from shardscope.pipeline.layout_pool import default_workers

    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert default_workers() == max(1, allowed // 2)


def test_a_note_names_the_candidates_it_is_said_of_in_the_fewest_words():
    """Said of all 20 candidates, a note names them as every candidate, not one by one; of most,
    by the few it is not said of; of few, each."""
    estimated = [f"data={n}" for n in range(20)]
    assert layout_ranking._candidates_words(estimated, estimated) == "every candidate (20)"
    assert layout_ranking._candidates_words(estimated[2:], estimated) == "every candidate but data=0; data=1"
    assert layout_ranking._candidates_words(estimated[:2], estimated) == "data=0; data=1"
    assert layout_ranking._candidates_words(["data=0"], ["data=0"]) == "data=0"
