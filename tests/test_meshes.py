"""2-D meshes, sharded parameters (FSDP), the reduced plan and the plan registry: exact counts,
axes, gradients against the reference, memory per device (real JAX on 8 CPU devices)."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from _support import DEMOS
from shardscope.errors import SettingsError
from shardscope.config.mesh import Mesh, parse_axes
from shardscope.config.settings import Settings
from shardscope.config.shapes import resolve_shapes


@functools.lru_cache(maxsize=None)
def analysis(demo: str, mesh: str, batch_axes: str | None = None, measure: bool = True):
    from shardscope.pipeline.run import analyze

    axes = None if batch_axes is None else tuple(batch_axes.split(","))
    settings = Settings(DEMOS / demo, mesh=Mesh.parse(mesh), batch_axes=axes, repeats=2)
    return analyze(settings, measure=measure, graphs=False)


def runs_by_primitive(plan) -> dict[str, int]:
    totals: dict[str, int] = {}
    for c in plan.collectives:
        totals[c.primitive] = totals.get(c.primitive, 0) + c.executions
    return totals


# -- the mesh value and the pure shape arithmetic -------------------------------------------


def test_a_mesh_parses_and_prints_its_axes():
    mesh = Mesh.parse("data=4,model=2")
    assert mesh.axes == (("data", 4), ("model", 2)) and mesh.devices == 8
    assert mesh.text() == "data=4,model=2" and Mesh.parse(" data=4 model=2 ") == mesh
    assert mesh.size_of(("model",)) == 2 and mesh.size_of(()) == 1
    assert parse_axes("data, model") == ("data", "model")


@pytest.mark.parametrize("text, words", [
    ("data=4,data=2", "twice"), ("data", "name=size"), ("data=0", ">= 1"), ("4=data", "name=size"), ("", "empty"),
])
def test_a_bad_mesh_says_what_is_wrong(text, words):
    with pytest.raises(SettingsError, match=words):
        Mesh.parse(text)


def test_the_one_axis_shorthand_is_a_mesh():
    s = Settings(DEMOS / "linear.py", devices=4, axis="s")
    assert s.mesh == Mesh.one_axis("s", 4) and s.split_axes == ("s",)
    assert s.with_(devices=2).mesh.text() == "s=2"
    two = s.with_(mesh=Mesh.parse("data=4,model=2"), batch_axes=("data",))
    assert (two.devices, two.axis, two.split_axes) == (8, "data,model", ("data",))


def test_shapes_split_the_batch_over_the_batch_axes_only():
    mesh = Mesh.parse("data=4,model=2")
    over_data = resolve_shapes(128, Settings(DEMOS / "mlp.py", mesh=mesh, batch_axes=("data",)), 8)
    assert (over_data.devices, over_data.batch_shards, over_data.per_device_batch) == (8, 4, 32)
    assert (over_data.chunk_size, over_data.chunks_per_device) == (16, 2)
    over_both = resolve_shapes(128, Settings(DEMOS / "mlp.py", mesh=mesh), 8)
    assert (over_both.batch_shards, over_both.per_device_batch, over_both.batch_axes) == (8, 16, ("data", "model"))
    with pytest.raises(SettingsError, match="does not have"):
        resolve_shapes(128, Settings(DEMOS / "mlp.py", mesh=mesh, batch_axes=("rows",)), 8)
    with pytest.raises(SettingsError, match="does not split over 8"):
        resolve_shapes(12, Settings(DEMOS / "mlp.py", mesh=mesh), 8)


def test_a_device_count_that_does_not_divide_the_batch_is_told_every_count_that_does():
    """``check linear -d 3`` started 3 devices; 4 divides the batch too, with ``--devices 4``."""
    with pytest.raises(SettingsError) as raised:
        resolve_shapes(64, Settings(DEMOS / "linear.py", mesh=Mesh.parse("s=3")), 3)
    assert raised.value.hint == ("use a device count that divides 64: 1, 2, "
                                 "or with more devices started (--devices; the app's --max-devices) 4, 8, 16, 32, 64")
    with pytest.raises(SettingsError) as raised:
        resolve_shapes(12, Settings(DEMOS / "linear.py", mesh=Mesh.parse("s=8")), 16)
    assert raised.value.hint == "use a device count that divides 12: 1, 2, 3, 4, 6, 12"


# -- 2-D meshes -----------------------------------------------------------------------------


@pytest.mark.parametrize("batch_axes, axes", [("data", ("data",)), (None, ("data", "model"))])
def test_mlp_on_a_4x2_mesh_reduces_over_the_batch_axes(batch_axes, axes):
    a = analysis("mlp.py", "data=4,model=2", batch_axes)
    assert a.shapes.chunks_per_device == 2 and a.shapes.batch_axes == axes
    assert list(a.plans) == ["naive", "deferred", "reduced"] and a.unavailable == {}
    naive, deferred, reduced = a.plans.values()
    assert runs_by_primitive(naive) == {"psum_invariant": 8}  # 4 leaves x 2 chunks
    assert runs_by_primitive(deferred) == {"psum_invariant": 4}  # 1 per leaf per call
    assert runs_by_primitive(reduced) == {"unreduced_psum": 4}
    assert naive.collectives_in_loops == 4 and deferred.collectives_in_loops == reduced.collectives_in_loops == 0
    for plan in a.plans.values():
        assert {c.axes for c in plan.collectives} == {axes}, plan.name
        assert plan.max_abs_err < 1e-4, plan.name
    assert ("{V:" + ",".join(axes) + "}") in a.plans["deferred"].canonical_text


def test_the_json_has_the_mesh_the_batch_axes_and_each_collectives_axes(shardscope_cli):
    result = shardscope_cli("report", DEMOS / "mlp.py", "--mesh", "data=4,model=2", "--batch-axes", "data", "-r", "2", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["mesh"] == {"data": 4, "model": 2} and data["batch_axes"] == ["data"] and data["devices"] == 8
    assert set(data["variants"]) == {"naive", "deferred", "reduced"} and data["unavailable"] == {}
    assert data["comparison"]["baseline"] == "naive" and data["comparison"]["candidate"] == "deferred"
    for plan in data["variants"].values():
        assert all(c["axes"] == ["data"] for c in plan["collectives"])


def test_a_mesh_the_batch_does_not_fit_is_one_message(shardscope_cli):
    result = shardscope_cli("report", DEMOS / "mlp.py", "--mesh", "data=3,model=2")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "does not split over 6" in result.stderr
    bad = shardscope_cli("report", DEMOS / "mlp.py", "--mesh", "data=4,data=2")
    assert bad.returncode == 2 and "twice" in bad.stderr and "Traceback" not in bad.stderr


# -- sharded parameters (FSDP) --------------------------------------------------------------


def test_fsdp_naive_gathers_and_scatters_every_chunk_deferred_once_per_call():
    a = analysis("fsdp.py", "data=4")
    assert a.shapes.chunks_per_device == 2
    naive, deferred = a.plans["naive"], a.plans["deferred"]
    # two sharded leaves (w1, w2): all_gather + reduce_scatter per leaf per chunk; two replicated biases
    assert runs_by_primitive(naive) == {"all_gather": 4, "reduce_scatter": 4, "psum_invariant": 4}
    assert runs_by_primitive(deferred) == {"all_gather": 2, "reduce_scatter": 2, "psum_invariant": 2}
    assert naive.collectives_in_loops == 6 and deferred.collectives_in_loops == 0
    gathered = {c.value for c in naive.collectives if c.primitive == "all_gather"}
    scattered = {c.value for c in naive.collectives if c.primitive == "reduce_scatter"}
    assert gathered == {"params['w1']", "params['w2']"}  # the weights gathered for the chunk's forward pass
    assert scattered == {"grad(params['w1'])", "grad(params['w2'])"}  # their gradients summed and scattered back
    for plan in (naive, deferred):
        assert plan.max_abs_err < 1e-4, plan.name
    assert a.unavailable == {"reduced": "sharded parameters: the reduced plan covers replicated parameters only"}


def test_fsdp_deferring_trades_memory_per_device_for_fewer_collectives():
    a = analysis("fsdp.py", "data=4")
    naive, deferred = a.plans["naive"], a.plans["deferred"]
    # the deferred plan holds the whole w1 and w2 and their whole gradients on every device
    assert deferred.memory["temp_size_in_bytes"] > naive.memory["temp_size_in_bytes"]
    assert naive.memory["argument_size_in_bytes"] == deferred.memory["argument_size_in_bytes"]


def test_fsdp_on_a_2d_mesh_gathers_over_data_and_reduces_the_batch_over_both():
    a = analysis("fsdp.py", "data=4,model=2")
    naive, deferred = a.plans["naive"], a.plans["deferred"]
    for plan in (naive, deferred):
        assert plan.max_abs_err < 1e-4, plan.name
    assert {c.axes for c in deferred.collectives if c.primitive in ("all_gather", "reduce_scatter")} == {("data",)}
    assert runs_by_primitive(deferred)["all_gather"] == 2 and runs_by_primitive(deferred)["reduce_scatter"] == 2
    assert naive.collectives_in_loops > 0 and deferred.collectives_in_loops == 0


def test_param_specs_that_do_not_fit_the_mesh_are_one_message():
    with pytest.raises(SettingsError, match="does not have"):
        analysis("fsdp.py", "s=4", measure=False)
    with pytest.raises(SettingsError, match="does not split over 3"):
        analysis("fsdp.py", "data=3", measure=False)


# -- the reduced plan -----------------------------------------------------------------------


def test_the_reduced_plan_runs_one_unreduced_psum_per_leaf_per_call():
    a = analysis("linear.py", "s=4")
    reduced = a.plans["reduced"]
    (c,) = reduced.collectives
    assert (c.primitive, c.axes, c.executions, c.in_loop) == ("unreduced_psum", ("s",), 1, False)
    assert reduced.max_abs_err < 1e-5
    assert "{R:s}" in reduced.canonical_text and "{U:s}" in reduced.canonical_text
    casts = {s.equation.primitive for s in reduced.program.sites() if s.equation.kind == "cast"}
    assert casts and casts <= {"preduced", "vary_unreduced_cast_p", "vary_unreduced_cast", "reduced_vary_cast",
                               "reduced_vary_cast_p", "pvary", "pcast"}


def test_a_plan_jax_cannot_trace_is_unavailable_with_the_reason():
    a = analysis("rnn.py", "s=2", measure=False)
    assert {"naive", "deferred"} <= set(a.plans)
    if "reduced" not in a.plans:  # jax 0.10.2: a reduced weight inside the model's own scan
        assert a.unavailable["reduced"].startswith("JAX cannot trace it here")


# -- the registry ---------------------------------------------------------------------------


def test_the_compute_only_floor_is_one_more_plan():
    from shardscope.pipeline.run import analyze
    from shardscope.plans.registry import FLOOR, PLANS

    a = analyze(Settings(DEMOS / "mlp.py", devices=4, repeats=2), plan_set=(*PLANS, FLOOR), graphs=False)
    floor = a.plans["floor"]
    assert floor.collectives == () and floor.role == "floor"
    assert floor.max_abs_err < 1e-4  # its stacked partials sum to the gradient
    assert a.comparison.candidate != "floor"


def test_the_default_comparison_is_naive_against_the_cheapest_deferral():
    a = analysis("linear.py", "s=4")
    assert (a.comparison.baseline, a.comparison.candidate) == ("naive", "deferred")  # ties go by registry order
    assert a.comparison.diff[:2] == ("--- naive", "+++ deferred")
    other = a.compare("naive", "reduced")
    assert other.diff[:2] == ("--- naive", "+++ reduced") and any("unreduced_psum" in line for line in other.diff)
    assert other.speedup is not None and other.speedup.rounds == 2
    assert np.isfinite(other.speedup.median)
