"""The Timings tab's projection picker and the Sweep tab, on real analyses and a real sweep."""

from __future__ import annotations

from app_support import drain
from textual.widgets import Input, Select, Static
from textual_plotext import PlotextPlot

from shardscope.app.views import TimingsView
from shardscope.app.views.projection import ProjectionPanel
from shardscope.app.views.sweep import SweepView, same_series
from shardscope.costmodel.interconnects import format_seconds, preset
from shardscope.pipeline.projections import project
from shardscope.config.settings import Settings
from view_support import DEMOS, run_view as run, shown

def test_timings_tab_projects_onto_the_picked_preset_and_device_count(analysis_of):
    analysis = analysis_of("linear.py")
    view = TimingsView()

    async def script(app, pilot):
        view.show_analysis(analysis)
        await drain(pilot)
        panel = view.query_one(ProjectionPanel)
        text = shown(panel.query_one("#projection-body", Static))
        # by default each collective on its own group: W's 20 B all-reduce on a ring of the 2 devices, in each of
        # the 2 chunks: 2 x (2 x 2 us + 2 x 1/2 x 20 B / 450 GB/s) = 8.0001 us
        assert "projected onto nvlink-h100" in text
        assert "with each collective over its own group of the 2-device mesh" in text
        assert "naive: 8 us per call (2 collective runs)" in text
        assert "projected naive/deferred communication time: 2.00x" in text
        assert "source: bandwidth:" in text

        panel.query_one("#projection-preset", Select).value = "dcn-100g"
        panel.query_one("#projection-devices", Select).value = 4
        await drain(pilot)
        text = shown(panel.query_one("#projection-body", Static))
        expected = project(analysis, preset("dcn-100g"), 4)
        assert "projected onto dcn-100g" in text and "with 4 devices" in text
        assert f"deferred: {format_seconds(expected.plans['deferred'].comm_s_per_call)} per call" in text

        view.measurements_hidden = True
        await drain(pilot)
        hidden = shown(panel.query_one("#projection-body", Static))
        assert "measured" not in hidden and "projected naive/deferred communication time: 2.00x" in hidden

    run(view, script)


def test_sweep_tab_runs_the_sweep_in_a_worker_and_charts_it():
    view = SweepView()

    async def script(app, pilot):
        view.settings = Settings(path=DEMOS / "linear.py", devices=2, repeats=1)
        view.query_one("#sweep-budget", Input).value = "1KiB"
        view.action_sweep()
        await app.workers.wait_for_complete()
        await drain(pilot)
        await drain(pilot)
        sweep = view.sweep
        assert sweep is not None and sweep.chunk_sizes == [1, 2, 4, 8, 16, 32]
        assert len(sweep.points) == 6 * len(sweep.plan_names) and sweep.memory_budget_bytes == 1024
        assert {"naive", "deferred"} <= set(sweep.plan_names)
        status = shown(view.query_one("#sweep-status", Static))
        pick = sweep.pick
        assert pick is not None
        if len(sweep.same_program) == 1:
            assert f"pick: {pick.plan} at chunk size {pick.chunk_size}" in status
        else:  # at one chunk per device every plan is one program: no winner named
            assert f"pick: chunk size {pick.chunk_size}, the fastest within the budget of 1 KiB, where " in status
        table = shown(view.query_one("#sweep-table", Static))
        assert "deferred" in table and "naive" in table
        chart = view.query_one("#sweep-memory", PlotextPlot).plt.build()
        assert "memory per device (KiB) vs chunk size" in chart
        # plans that need the same memory at every chunk size share one line, named for both
        # (a second line drew over the first and hid it), and the budget is in the legend
        footprints = {name: [p.footprint_bytes for p in sweep.points if p.plan == name] for name in sweep.plan_names}
        assert footprints["deferred"] == footprints["reduced"] != footprints["naive"]
        assert "deferred = reduced" in chart and "budget 1 KiB" in chart
        assert [names for names, _ in same_series(sweep, lambda p: p.footprint_bytes)] == [["naive"], ["deferred", "reduced"]]

        # a tighter budget re-picks without sweeping again
        view.query_one("#sweep-budget", Input).value = "10B"
        await view.query_one("#sweep-budget", Input).action_submit()
        await drain(pilot)
        assert view.sweep is not sweep and view.sweep.points == sweep.points and view.sweep.pick is None
        assert "nothing fits within the budget of 10 B" in shown(view.query_one("#sweep-status", Static))

    run(view, script)


def test_sweep_tab_says_what_is_wrong_with_a_budget():
    view = SweepView()

    async def script(app, pilot):
        view.settings = Settings(path=DEMOS / "linear.py", devices=2, repeats=1)
        view.query_one("#sweep-budget", Input).value = "plenty"
        view.action_sweep()
        await drain(pilot)
        assert "is not a memory size" in shown(view.query_one("#sweep-status", Static))
        assert not view.running

    run(view, script)


def test_sweep_tab_sweeps_the_plans_that_exist_and_names_the_one_that_does_not():
    """On rnn the reduced plan cannot be traced by this JAX: the tab says so and charts the others
    (on 8 devices: 8 examples each, 4 chunk sizes to sweep; on 2, 6)."""
    view = SweepView()

    async def script(app, pilot):
        view.settings = Settings(path=DEMOS / "rnn.py", devices=8, repeats=1)
        view.action_sweep()
        await app.workers.wait_for_complete()
        await drain(pilot)
        await drain(pilot)
        assert view.sweep is not None, shown(view.query_one("#sweep-status", Static))
        assert view.sweep.plan_names == ["naive", "deferred"] and "reduced" in view.sweep.unavailable
        status = " ".join(shown(view.query_one("#sweep-status", Static)).split())
        assert "pick:" in status and "reduced: unavailable (JAX cannot trace it here:" in status
        assert "fails to trace" not in status

    run(view, script)


def test_timings_tab_projects_the_mlps_one_combined_all_reduce_per_chunk(analysis_of):
    """The Timings tab projects what XLA runs: demos/mlp.py's four psums per chunk are one
    combined all-reduce of 2,704 B, 2 chunks in the naive plan (tests/test_projection.py counts
    it in the compiled text): 2 x (14 x 2 us + 14/8 x 2,704 B / 450 GB/s) = 56.02 us, not the
    jaxpr's 8 runs (224 us), with 8 devices picked; by default each run is on its own group, the
    2 devices analysed: 2 x (2 x 2 us + 1/2 x 2 x 2,704 B / 450 GB/s) = 8.012 us."""
    analysis = analysis_of("mlp.py")
    view = TimingsView()

    async def script(app, pilot):
        view.show_analysis(analysis)
        await drain(pilot)
        text = " ".join(shown(view.query_one(ProjectionPanel).query_one("#projection-body", Static)).split())
        assert "naive: 8.012 us per call (2 collective runs)" in text
        assert "deferred: 4.006 us per call (1 collective run)" in text
        view.query_one(ProjectionPanel).query_one("#projection-devices", Select).value = 8
        await drain(pilot)
        text = " ".join(shown(view.query_one(ProjectionPanel).query_one("#projection-body", Static)).split())
        assert "naive: 56.02 us per call (2 collective runs)" in text
        assert "deferred: 28.01 us per call (1 collective run)" in text

    run(view, script)
