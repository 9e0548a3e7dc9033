"""A bf16 sum XLA:CPU carries in f32 pairs with the psums it comes from, and says it was promoted.

XLA:CPU's ``AllReducePromotion`` pass (its type list in ``xla/service/cpu/cpu_compiler.cc`` is
``{BF16, F32}``) converts each operand of a bf16 all-reduce to f32, sums in f32 and converts
back; the reduction it clones is named ``*_promoted``. The compiled operands are then twice the
bytes of the jaxpr's bf16 operands: pairing by bytes failed, and a program's own gradient sums
were called dead (removed by the compiler) though they ran, combined, every micro-batch.

The programs are what users write: bf16 parameters in a pytree (a Megatron MLP, its hidden
layer split over ``model``), gradient accumulation over micro-batches in a ``lax.scan``,
data parallel over ``data``: the naive step sums each micro-batch's gradients, the fixed one
casts the parameters to varying and sums once after the loop (with the loss's ``pmean``, an f32
sum the combiner merges beside the bf16 ones); and a jit version with shardings, whose sums
the partitioner writes. Expected runs, bytes and pairings come from the compiled text (the
all-reduce instructions, their operand types, the loop's trip count) and from the parameters'
shapes by hand. XLA:CPU does not promote f16: an f16 sum stays f16 and is said to be nothing.
"""

from __future__ import annotations

import io
import json
import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from rich.console import Console

import shardscope
from shardscope.app.views.hlo import hlo_renderable
from shardscope.config.settings import Settings
from shardscope.costmodel.interconnects import preset
from shardscope.costmodel.projection import compiled_collectives
from shardscope.pipeline.projections import project
from shardscope.pipeline.run import analyze
from shardscope.render.findings import inspection_json, to_text
from shardscope.render.projection import lines as projection_lines
from shardscope.testing import jaxpr_collective_counts

M, B, D, F = 4, 32, 64, 256  # micro-batches, batch, width, hidden (split over model: 128 per device)
DATA, MODEL = 4, 2
BF16, F32 = 2, 4  # bytes per element

mesh = Mesh(np.array(jax.devices()[:DATA * MODEL]).reshape(DATA, MODEL), ("data", "model"))
pspecs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None)}


def _arguments(dtype=jnp.bfloat16):
    params = {"w1": jax.ShapeDtypeStruct((D, F), dtype, sharding=NamedSharding(mesh, pspecs["w1"])),
              "b1": jax.ShapeDtypeStruct((F,), dtype, sharding=NamedSharding(mesh, pspecs["b1"])),
              "w2": jax.ShapeDtypeStruct((F, D), dtype, sharding=NamedSharding(mesh, pspecs["w2"]))}
    batch = jax.ShapeDtypeStruct((M, B, D), dtype, sharding=NamedSharding(mesh, P(None, "data")))
    return params, batch, batch


def local_loss(p, x, y):
    h = jax.nn.gelu(x @ p["w1"] + p["b1"])
    out = lax.psum(h @ p["w2"], "model")  # row-parallel matmul: sum the partial products
    return jnp.mean((out - y).astype(jnp.float32) ** 2)


smap = partial(jax.shard_map, mesh=mesh, in_specs=(pspecs, P(None, "data"), P(None, "data")),
               out_specs=(pspecs, P()))


@jax.jit
@smap
def step_naive(p, xs, ys):
    def micro(carry, batch):
        loss_acc, g_acc = carry
        loss, g = jax.value_and_grad(local_loss)(p, *batch)
        return (loss_acc + loss, jax.tree.map(jnp.add, g_acc, g)), None
    init = (lax.pcast(jnp.zeros((), jnp.float32), "data", to="varying"), jax.tree.map(jnp.zeros_like, p))
    (loss, g), _ = lax.scan(micro, init, (xs, ys))
    loss = lax.pmean(loss, "data") / M
    return jax.tree.map(lambda w, gw: w - 1e-2 * gw, p, g), loss


@jax.jit
@smap
def step_fixed(p, xs, ys):
    pv = jax.tree.map(lambda w: lax.pcast(w, "data", to="varying"), p)

    def micro(carry, batch):
        loss_acc, g_acc = carry
        loss, g = jax.value_and_grad(local_loss)(pv, *batch)
        return (loss_acc + loss, jax.tree.map(jnp.add, g_acc, g)), None
    init = (lax.pcast(jnp.zeros((), jnp.float32), "data", to="varying"), jax.tree.map(jnp.zeros_like, pv))
    (loss, g), _ = lax.scan(micro, init, (xs, ys))
    g = lax.psum(g, "data")
    loss = lax.pmean(loss, "data") / M
    return jax.tree.map(lambda w, gw: w - 1e-2 * gw, p, g), loss


def jit_loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y).astype(jnp.float32) ** 2)


@jax.jit
def jit_step(p, xs, ys):
    def micro(g_acc, batch):
        return jax.tree.map(jnp.add, g_acc, jax.grad(jit_loss)(p, *batch)), None
    g, _ = lax.scan(micro, jax.tree.map(jnp.zeros_like, p), (xs, ys))
    return jax.tree.map(lambda w, gw: w - 1e-2 * gw, p, g)


def _jit_arguments():
    replicated = NamedSharding(mesh, P())
    params = {"w1": jax.ShapeDtypeStruct((D, F), jnp.bfloat16, sharding=replicated),
              "b1": jax.ShapeDtypeStruct((F,), jnp.bfloat16, sharding=replicated),
              "w2": jax.ShapeDtypeStruct((F, D), jnp.bfloat16, sharding=replicated)}
    batch = jax.ShapeDtypeStruct((M, B, D), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, ("data", "model"))))
    return params, batch, batch


# --------------------------------------------------------------------------- the compiled text


def _all_reduces(text: str) -> list[dict]:
    """Each all-reduce of the module: its operand types (``("f32", (64, 128))``), its reduction's
    name and whether a while body holds it."""
    bodies = set(re.findall(r"\bbody=%?([\w.\-]+)", text))
    found, computation = [], ""
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(", line)
        if header:
            computation = header.group(1)
        match = re.search(r"=\s*(\(.*?\)|\w+\[[\d,]*\](?:\{[^}]*\})?)\s+all-reduce\(.*to_apply=%?([\w.\-]+)", line)
        if match:
            types = [(dtype, tuple(int(d) for d in dims.split(",") if d))
                     for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", match.group(1))]
            found.append({"types": types, "to_apply": match.group(2), "in_loop": computation in bodies})
    return found


def _trip_count(text: str) -> int:
    (count,) = set(re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', text))
    return int(count)


def _nbytes(types: list[tuple[str, tuple[int, ...]]], size: int) -> int:
    return sum(int(np.prod(dims)) * size for _, dims in types)


def _compiled_text(fn, *args) -> str:
    return fn.trace(*args).lower().compile().as_text()


def _no_row_is_dead(inspection) -> None:
    rows = [(c.label, c.value) for c in inspection.paired if c.dead or c.unpaired]
    assert rows == [], f"collectives the tool calls dead though they run: {rows}"


def _jaxpr_runs_carried(inspection) -> dict[str, int]:
    """Each JAX primitive's runs per call as the compiled plan carries them: each paired
    instruction's runs once per jaxpr collective it carries (the CPU moves no sum out of a loop)."""
    found: dict[str, int] = {}
    for c in inspection.paired:
        for e in c.equations:
            found[e.primitive] = found.get(e.primitive, 0) + (c.executions or 0)
    return found


# --------------------------------------------------------------------------- the tests


def test_the_naive_steps_combined_bf16_gradient_sum_pairs_with_every_leafs_psum():
    args = _arguments()
    text = _compiled_text(step_naive, *args)
    trips = _trip_count(text)
    in_loop = [a for a in _all_reduces(text) if a["in_loop"]]
    # by hand: the model psum of h @ w2 (f32[8,64]: B/DATA rows) and one combined sum of the
    # three gradients (w1 and w2 are 64x128 on a device, b1 128), every one promoted to f32
    grads = next(a for a in in_loop if len(a["types"]) == 3)
    assert grads["to_apply"].endswith("_promoted") and {t for t, _ in grads["types"]} == {"f32"}
    assert sorted(int(np.prod(dims)) for _, dims in grads["types"]) == [F // MODEL, D * F // MODEL, D * F // MODEL]
    assert trips == M

    inspection = shardscope.inspect(step_naive, *args)
    _no_row_is_dead(inspection)
    (combined,) = [c for c in inspection.paired if c.compiled is not None and c.compiled.combined]
    assert len(combined.equations) == 3 and combined.executions == trips
    assert combined.bytes_per_execution == _nbytes(grads["types"], F32) == 66_048
    assert combined.compiled.written_bytes_per_execution == _nbytes(grads["types"], BF16) == 33_024
    assert combined.compiled.promotion == ("bf16", "f32")
    assert combined.bytes_per_call == 66_048 * M
    fix = combined.verdict.fix or ""
    assert combined.verdict_kind == "deferrable" and all(f"p['{leaf}']" in fix for leaf in ("w1", "b1", "w2"))
    assert "XLA:CPU sums bf16 in f32" in combined.pairing()

    forward = next(c for c in inspection.paired if c.axes == ("model",))
    assert forward.compiled is not None and forward.compiled.promotion == ("bf16", "f32")
    assert forward.compiled.written_bytes_per_execution * 2 == forward.bytes_per_execution == (B // DATA) * D * F32

    # the jaxpr's counts (4 forward sums, 4 x 3 gradient sums, the loss's pmean) are what runs
    assert jaxpr_collective_counts(step_naive, *args) == {"psum_invariant": M + 3 * M + 1}
    assert _jaxpr_runs_carried(inspection) == {"psum_invariant": M + 3 * M + 1}


def test_the_fixed_steps_own_psum_and_pmean_pair_with_the_sum_after_the_loop():
    args = _arguments()
    text = _compiled_text(step_fixed, *args)
    after = [a for a in _all_reduces(text) if not a["in_loop"]]
    # by hand: one sum after the loop of the three gradients (promoted) and the f32 loss
    (combined_text,) = after
    assert combined_text["to_apply"].endswith("_promoted") and len(combined_text["types"]) == 4
    assert ("f32", ()) in combined_text["types"]

    inspection = shardscope.inspect(step_fixed, *args)
    _no_row_is_dead(inspection)
    (combined,) = [c for c in inspection.paired if c.compiled is not None and not c.in_loop]
    assert len(combined.equations) == 4 and combined.executions == 1
    assert [op.promoted_from for op in combined.compiled.operands].count("bf16") == 3
    loss = next(op for op in combined.compiled.operands if op.shape == "f32[]")
    assert loss.promoted_from == ""  # the loss was f32 in the program: the combiner only merged it
    assert combined.bytes_per_execution == _nbytes(combined_text["types"], F32) == 66_052
    assert combined.compiled.written_bytes_per_execution == 33_024 + 4
    assert {e.primitive for e in combined.equations} == {"psum_invariant"}
    assert jaxpr_collective_counts(step_fixed, *args) == {"psum_invariant": M + 3 + 1}
    assert _jaxpr_runs_carried(inspection) == {"psum_invariant": M + 3 + 1}

    # text and JSON read the same value
    said = inspection_json(inspection)
    (promoted,) = [c["promoted"] for c in said["compiled_collectives"] if c["loop_trip_counts"] == []]
    assert promoted == {"from": "bf16", "to": "f32", "operands": [op.promoted_from or None
                                                                  for op in combined.compiled.operands],
                        "bytes": 33_028, "bytes_per_call": 33_028}
    assert not any(c["dead"] for c in said["collectives"])
    assert "promoted 3 of its 4 values from the program's bf16" in to_text(inspection)


def test_a_jit_steps_partitioner_sum_of_bf16_gradients_is_promoted_and_counted():
    args = _jit_arguments()
    text = _compiled_text(jit_step, *args)
    (sums,) = [a for a in _all_reduces(text) if a["in_loop"]]
    assert sums["to_apply"].endswith("_promoted") and {t for t, _ in sums["types"]} == {"f32"}

    inspection = shardscope.inspect(jit_step, *args)
    _no_row_is_dead(inspection)
    assert jaxpr_collective_counts(jit_step, *args) == {}  # the partitioner writes them
    (c,) = inspection.paired
    assert c.written_by == "partitioner" and c.executions == _trip_count(text) == M
    # by hand: every leaf's gradient, whole on every device
    leaves = D * F + F + F * D
    assert c.bytes_per_execution == _nbytes(sums["types"], F32) == leaves * F32
    assert c.compiled.written_bytes_per_execution == leaves * BF16

    # a projection onto a GPU's fabric costs the bytes a GPU's compiler moves: bf16's
    link = preset("ib-ndr")
    (projected,) = compiled_collectives(inspection.compiled.collectives, link, None, as_written=True)
    assert projected.bytes_per_execution == leaves * BF16
    (as_compiled,) = compiled_collectives(inspection.compiled.collectives, link, None)
    assert as_compiled.bytes_per_execution == leaves * F32


def test_an_f16_sum_is_not_promoted_on_the_cpu():
    args = _arguments(jnp.float16)
    text = _compiled_text(step_naive, *args)
    grads = next(a for a in _all_reduces(text) if len(a["types"]) == 3)
    assert not grads["to_apply"].endswith("_promoted") and {t for t, _ in grads["types"]} == {"f16"}

    inspection = shardscope.inspect(step_naive, *args)
    _no_row_is_dead(inspection)
    (combined,) = [c for c in inspection.paired if c.compiled is not None and c.compiled.combined]
    assert combined.compiled.promotion is None and len(combined.equations) == 3
    assert combined.bytes_per_execution == combined.compiled.written_bytes_per_execution == 33_024
    assert "sums" not in combined.pairing()


DEMO = '''
import jax
import jax.numpy as jnp

import shardscope


@shardscope.demo(params={"w1": jax.ShapeDtypeStruct((32, 64), jnp.bfloat16),
                         "w2": jax.ShapeDtypeStruct((64, 8), jnp.bfloat16)},
                 x=jax.ShapeDtypeStruct((64, 32), jnp.bfloat16))
def bf16mlp(p, x):
    return jnp.tanh(x @ p["w1"]) @ p["w2"]
'''


def test_a_report_says_the_cpu_promoted_its_bf16_sums_and_projects_their_bf16_bytes(shardscope_cli, tmp_path):
    (tmp_path / "bf16_demo.py").write_text(DEMO)
    argv = ("report", tmp_path / "bf16_demo.py", "-f", "bf16mlp", "--mesh", "data=4,model=2", "--batch-axes", "data",
            "--project", "ib-ndr", "-r", "2")
    result = shardscope_cli(*argv, "--json")
    assert result.returncode == 0, result.stderr
    naive = json.loads(result.stdout)["variants"]["naive"]
    # by hand: w1 (32x64) and w2 (64x8) summed over data, bf16 as written, in each of 2 chunks
    written = (32 * 64 + 64 * 8) * BF16 * 2
    assert naive["bytes_per_call"] == written  # the jaxpr's
    assert naive["compiled_bytes_per_call"] == 2 * written and naive["compiled_bytes_per_call_as_written"] == written
    (combined,) = naive["compiled_collectives"]
    assert combined["equations"] and len(combined["equations"]) == 2
    assert combined["promoted"]["from"] == "bf16" and combined["promoted"]["bytes_per_call"] == written
    projection = json.loads(result.stdout)["projection"]
    assert projection["plans"]["naive"]["bytes_per_call"] == written

    text = shardscope_cli(*argv).stdout
    assert "XLA:CPU sums bf16 in f32 (its AllReducePromotion pass)" in text
    assert f"naive {2 * written:,} B here, {written:,} B as written" in text
    assert f"naive {written:,} B per call" in text  # the projection's sentence


def test_the_explorers_compiled_tab_and_timings_lines_read_the_same_promotion(tmp_path):
    (tmp_path / "bf16_demo.py").write_text(DEMO)
    analysis = analyze(Settings(path=tmp_path / "bf16_demo.py", function="bf16mlp", devices=4, repeats=1))
    naive = analysis.plans["naive"]
    (combined,) = [c for c in naive.paired if c.compiled is not None]
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(hlo_renderable(analysis))
    shown = console.export_text()
    assert combined.compiled.promotion == ("bf16", "f32") and "XLA:CPU sums bf16 in f32" in shown
    # by hand: w1 (32x64) and w2 (64x8), bf16 as written
    per_run = (32 * 64 + 64 * 8) * BF16
    assert f"{2 * per_run:,} B here, {per_run:,} B as written" in shown
    timings = "\n".join(projection_lines(analysis, project(analysis, preset("ib-ndr"))))
    assert f"naive {per_run * combined.executions:,} B per call" in timings
