"""The sidebar's mesh editor and the plan picker: a 2-D mesh typed in, plans picked with b and c."""

from __future__ import annotations

from app_support import DEMOS, SIZE, drain, make_app, press, run, settle
from rich.console import Console
from textual.widgets import Input

from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.app.widgets.status import StatusLine


def test_b_and_c_pick_the_compared_plans_and_the_diff_follows():
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert (app.comparison.baseline, app.comparison.candidate) == ("naive", "deferred")
            await press(pilot, "3")
            await press(pilot, "c")
            await settle(pilot)
            assert (app.comparison.baseline, app.comparison.candidate) == ("naive", "reduced")
            diff = app.query_one("#diff-unified").plain
            assert "+++ reduced" in diff and "unreduced_psum" in diff
            await press(pilot, "b")
            await settle(pilot)
            assert (app.comparison.baseline, app.comparison.candidate) == ("deferred", "reduced")
            assert "--- deferred" in app.query_one("#diff-unified").plain
            await press(pilot, "2")
            await drain(pilot)
            graph = app.query_one("#graph-body").plain
            assert "deferred plan" in graph and "reduced plan" in graph and "naive plan" not in graph

    run(scenario())


def test_a_plan_that_cannot_be_built_is_listed_with_its_reason_in_the_timings_tab():
    async def scenario():
        app = make_app(DEMOS / "fsdp.py", devices=4, axis="data")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert "reduced" not in app.analysis.plans
            await press(pilot, "4")
            await drain(pilot)
            console = Console(width=200, color_system=None)
            with console.capture() as capture:
                console.print(app.query_one("#timings-body").content)
            assert "reduced: unavailable (sharded parameters" in " ".join(capture.get().split())

    run(scenario())


def label_of(widget) -> str | None:
    """The text of the Label just before ``widget`` among its siblings (notes between them allowed)."""
    from textual.widgets import Label, Select

    siblings = list(widget.parent.children)
    for sibling in reversed(siblings[: siblings.index(widget)]):
        if isinstance(sibling, Label):
            return str(sibling.content)
        if isinstance(sibling, (Input, Select)):
            return None
    return None


def test_the_mesh_editor_disables_fields_refuses_a_mesh_the_batch_does_not_fit_and_runs_a_2d_mesh():
    """One app on mlp.py, opened without running; steps of one user's path in the sidebar (four
    tests, each on its own app, before):

    - a 2-D mesh disables the device count and axis fields and says why; cleared, they come back;
    - every input and picker has a label that stays when typed into (every tab's view mounted);
    - a mesh the batch does not fit is an error panel and no run;
    - a 2-D mesh typed in the sidebar runs with the batch over its axes.
    """
    from textual.widgets import Select

    async def scenario():
        app = make_app(DEMOS / "mlp.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            # a 2-D mesh disables the device count and axis fields and says why
            devices, axis = app.query_one("#devices", Select), app.query_one("#axis", Input)
            note = app.query_one("#mesh-note")
            assert not devices.disabled and not axis.disabled and not note.display
            app.query_one("#mesh", Input).value = "data=4,model=2"
            await drain(pilot)
            assert devices.disabled and axis.disabled and note.display
            assert "8 devices, axes data, model" in str(note.content)
            app.query_one("#mesh", Input).value = ""
            await drain(pilot)
            assert not devices.disabled and not axis.disabled and not note.display

            # every input and picker has a label that stays when typed into
            await press(pilot, "2", "3", "4", "5", "6", "7")  # each tab's view is mounted when the tab is first shown
            await settle(pilot)
            assert all(app.query(f"#{tab}-view") for tab in ("graph", "diff", "timings", "hlo", "sweep", "layouts"))
            fields = [w for w in app.screen.query("*") if isinstance(w, (Input, Select))]
            assert {"batch-axes", "sweep-budget", "projection-preset", "projection-devices"} <= {f.id for f in fields}
            unlabelled = [f.id for f in fields if not label_of(f)]
            assert not unlabelled, f"fields with no label (only a placeholder, gone once typed into): {unlabelled}"
            assert label_of(app.query_one("#batch-axes", Input)) == "Batch axes (optional)"
            await press(pilot, "1")  # back to the Plans tab

            # a mesh the batch does not fit is an error panel and no run
            app.query_one("#mesh", Input).value = "data=3,model=2"
            app.set_focus(None)
            await press(pilot, "r")
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and app.analysis is None and app.run_id == 1
            assert app.is_running  # the app keeps running

            # a 2-D mesh typed in the sidebar runs with the batch over its axes
            app.query_one("#mesh", Input).value = "data=4,model=2"
            app.query_one("#batch-axes", Input).value = "data"
            await drain(pilot)
            assert "32/device" in str(app.query_one("#chunk-help").content)  # 128 over the 4 data rows
            app.set_focus(None)
            await press(pilot, "r")
            await settle(pilot)
            analysis = app.analysis
            assert analysis.settings.mesh.text() == "data=4,model=2" and analysis.shapes.batch_axes == ("data",)
            assert {c.axes for p in analysis.plans.values() for c in p.collectives} == {("data",)}
            assert "mesh data=4,model=2" in app.query_one(StatusLine).plain
            assert app.query_one(PlansView).names == ("naive", "deferred", "reduced")

    run(scenario())
