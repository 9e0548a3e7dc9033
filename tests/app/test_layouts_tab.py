"""The Layouts tab: the file's ``@shardscope.layouts`` function ranked on a target, a row per
candidate as it compiles, sortable, Enter opening a candidate's compiled plan."""

from __future__ import annotations

import textwrap

from app_support import SIZE, drain, eventually, make_app, press, run, settle
from textual.widgets import DataTable, Input, OptionList, Static, TabbedContent

from shardscope.app.views.layouts import LayoutPlanScreen, LayoutsView
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.status import StatusLine
from view_support import shown

MLP = '''
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import shardscope


@shardscope.layouts(axes=("fsdp", "tensor"), options={"per_device_batch": [1, 2]},
                    tokens=lambda mesh, per_device_batch: per_device_batch * mesh.size * 16)
def build(mesh, per_device_batch):
    """One SGD step of a two-layer MLP: weights over fsdp x tensor, the batch over fsdp."""
    def leaf(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    params = {"w1": leaf((64, 128), P("fsdp", "tensor")), "w2": leaf((128, 64), P("tensor", "fsdp"))}
    x = leaf((per_device_batch * mesh.size, 16, 64), P("fsdp"))

    @jax.jit
    def step(p, x):
        grads = jax.grad(lambda p: jnp.mean(jnp.tanh(x @ p["w1"]) @ p["w2"]) ** 2)(p)
        return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads)

    return step, (params, x)
'''


def test_the_layouts_tab_fills_row_by_row_sorts_and_opens_a_candidates_plan(tmp_path):
    path = tmp_path / "mlp_layouts.py"
    path.write_text(textwrap.dedent(MLP))
    app = make_app(path, autorun=False)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "7")
            await eventually(pilot, lambda: bool(app.query(LayoutsView)), "the Layouts tab's view is mounted")
            view = app.query_one(LayoutsView)
            view.query_one("#layouts-target", Input).value = "cpu:8"
            await press(pilot, "s")
            table = view.query_one(DataTable)
            await eventually(pilot, lambda: view.ranking is not None and not view.running, "every candidate ranked", 300)
            await drain(pilot)
            # 8 = 4 assignments of 8 devices to fsdp x tensor, times 2 batches; each a row, in rank order
            assert table.row_count == 8 == len(view.ranking.rows)
            ranking = view.ranking
            assert [view.shown[k] for k in range(8)] == list(ranking.rows)
            assert str(table.get_row_at(0)[0]) == "1" and ranking.pick is ranking.rows[0]
            status = shown(view.query_one("#layouts-status", Static))
            assert status.strip().startswith(f"pick: {ranking.pick.label}")
            # the CPU has no step estimate: the order is the bytes communicated per token
            per_token = [row.communicated_bytes / row.compiled.per_step for row in ranking.rows]
            assert per_token == sorted(per_token)

            # sort by mesh, then the same column again the other way
            event = DataTable.HeaderSelected(table, table.columns["mesh"].key, 1, table.columns["mesh"].label)
            view._sort(event)
            meshes = [row.compiled.candidate.mesh_words for row in view.shown]
            assert meshes == sorted(meshes)
            view._sort(event)
            assert [row.compiled.candidate.mesh_words for row in view.shown] == sorted(meshes, reverse=True)

            # Enter on a row: its compiled plan, every collective of it named
            table.focus()
            table.move_cursor(row=0)
            first = view.shown[0]
            await press(pilot, "enter")
            await eventually(pilot, lambda: isinstance(app.screen, LayoutPlanScreen), "the plan opened")
            plan = shown(app.screen.query_one("#layouts-plan", Static))
            assert first.label in plan and all(c.name in plan for c in first.compiled.plan.collectives)
            await press(pilot, "escape")
            await eventually(pilot, lambda: not isinstance(app.screen, LayoutPlanScreen), "the plan closed")

    run(scenario())


def test_a_file_of_layouts_functions_only_is_named_as_one_not_as_a_demos_settings(tmp_path):
    """A file marking only ``@shardscope.layouts`` has no demo, mesh or chunk size, and nothing
    failed: the status line names the file and its layouts function (where it used to read
    ``mlp_layouts.py::(first demo)  mesh s=2  chunk auto``, then "failed: see the error panel"),
    the sidebar's function list names it instead of "(loading the demo file)", and the Layouts
    tab, which reads it, shows; s there ranks its layouts. A reload (r) leaves the user's tab."""
    path = tmp_path / "mlp_layouts.py"
    path.write_text(textwrap.dedent(MLP))
    app = make_app(path)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            tabs = app.query_one(TabbedContent)
            await eventually(pilot, lambda: tabs.active == "layouts" and not app.running, "the Layouts tab shows")
            await settle(pilot)
            line = " ".join(app.query_one(StatusLine).plain.split())
            assert line.startswith("mlp_layouts.py layouts function build (7 Layouts ranks it)"), line
            assert "first demo" not in line and "chunk" not in line and "mesh" not in line
            assert "failed" not in line and line.endswith("ready: s in 7 Layouts ranks the layouts"), line
            assert not app.query_one(ErrorPanel).shown
            functions = app.query_one("#functions", OptionList)
            assert [str(functions.get_option_at_index(i).prompt) for i in range(functions.option_count)] == [
                "build (layouts: tab 7)"]
            await press(pilot, "1")
            await press(pilot, "r")
            await settle(pilot)
            assert tabs.active == "plans" and not app.query_one(ErrorPanel).shown

    run(scenario())
