"""The Compiled tab (key 5): every program's compiled plan, and n/N walking its collectives.

Real JAX on 8 simulated CPU devices, real Textual (``App.run_test`` + Pilot). The expected numbers
are derived by hand (the seed case: W is 5 floats, 2 chunks per device) or recounted from the
compiled text here (``_compiled_programs.recount``), never read from shardscope.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from app_support import DEMOS, SIZE, drain, make_app, press, run, settle
from textual.widgets import TabbedContent
from view_support import run_view

from shardscope.app.views import HloView
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.sources.loading import import_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _compiled_programs as programs  # noqa: E402  (tests/, beside this folder)


def test_the_seed_case_all_reduces_in_the_chunk_loop_naive_and_after_it_deferred(analysis_of):
    analysis = analysis_of("linear.py")  # 2 devices, 32 examples each, chunks of 16: 2 chunks

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        text = app.view.plain
        assert f"backend: {analysis.backend}" in text and analysis.backend == "cpu"
        naive, deferred = text.split("\ndeferred:", 1)
        # W is 5 floats (20 B), summed once per chunk: 2 runs, 40 B per call
        assert "naive: 1 compiled collective from 1 collective equation, 2 runs/call, 40 B/call, 1 in while loops" in naive
        assert re.search(r"while loops: while\.\d+ x2 \(the plan's chunk loop\)", naive)
        assert re.search(r"1\s+all-reduce\[s\]\s+grad\(params\)\s+2\s+2\s+40\s+program\s+deferrable\s+psum_invariant", naive)
        assert re.search(r"psum_invariant of grad\(params\) -> all-reduce \S+ in the while body, x2/call", naive)
        assert "fix: cast params to varying" in naive
        assert " 1 compiled collective from 1 collective equation, 1 run/call, 20 B/call, 0 in while loops" in deferred
        assert re.search(r"1\s+all-reduce\[s\]\s+grad\(params\)\s+-\s+1\s+20\s+program\s+-\s+psum_invariant", deferred)
        assert "These are the cpu compiler's results" in text and "hoist" in text

    run_view(HloView(), script)


def test_the_rnns_recurrent_weight_is_summed_in_both_nested_loops(analysis_of):
    analysis = analysis_of("rnn.py")  # 2 chunks per device, 8 time steps

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        naive = app.view.plain.split("\ndeferred:", 1)[0]
        assert re.search(r"all-reduce\[s\]\s+grad\(params\['Wh'\]\)\s+2 x 8\s+16\s", naive)
        assert "in 2 nested while bodies, x16/call" in naive

    run_view(HloView(), script)


def test_a_traced_only_analysis_says_it_was_not_compiled():
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    analysis = analyze(Settings(DEMOS / "linear.py", repeats=1), measure=False)

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        assert "not compiled" in app.view.plain
        assert app.view.step_collective(1) is None

    run_view(HloView(), script)


def _recounted(path: Path, name: str) -> dict[str, int]:
    """Runs per call of each kind in the program's compiled text, by the test's own count."""
    module = import_file(path)[0]
    fn = getattr(module, name)
    return programs.recount(fn.trace(module.params, module.xs, module.ys).lower().compile().as_text())["runs"]


def test_the_tab_shows_the_partitioners_all_reduce_of_a_jit_with_shardings_and_n_walks_it():
    """demos/gspmd_accumulate.py: no collective in step's jaxpr; the compiled module all-reduces
    the gradients in the scan. The tab says so; n and N go from collective to collective."""
    path = DEMOS / "gspmd_accumulate.py"
    runs = {name: _recounted(path, name) for name in ("step", "step_fixed")}
    assert runs == {"step": {"all-reduce": 4}, "step_fixed": {"all-reduce": 1}}

    async def scenario():
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "5")
            await settle(pilot)
            tabs = app.query_one(TabbedContent)
            assert tabs.active == "hlo" and str(tabs.get_tab("hlo").label) == "5 Compiled"
            view = app.query_one(HloView)
            text = " ".join(view.plain.split())
            assert (f"step: 1 compiled collective (none in the jaxpr: the partitioner wrote it), "
                    f"{runs['step']['all-reduce']} runs/call") in text
            # the value cell folds at this width (its second value on the next row)
            assert re.search(r"all-reduce\[data\] grad\(params\['W1'\]\), 4 4 8,704 partitioner deferrable - grad\(params\['W2'\]\)", text)
            assert "written by the partitioner" in text and "fix: the partitioner sums" in text
            assert "step_fixed: 1 compiled collective from 2 collective equations, 1 run/call" in text
            assert view.selected is None
            await press(pilot, "n")
            assert view.selected == ("step", 0) and "▶ step #1 all-reduce" in view.plain
            await press(pilot, "n")
            assert view.selected == ("step_fixed", 0) and "▶ step_fixed #1 2 x" not in view.plain
            assert "▶ step_fixed #1 pmean" in view.plain or "▶ step_fixed #1 psum" in view.plain
            await press(pilot, "n")
            assert view.selected == ("step", 0)  # wraps
            await press(pilot, "N")
            assert view.selected == ("step_fixed", 0) and tabs.active == "hlo"  # n/N stay in the tab
            await press(pilot, "1", "n")
            assert tabs.active == "plans" and app.query_one(PlansView).collective_index == 0  # the trees' walk
            assert "step 4" in app.screen.query_one("#status").plain  # compiled runs, not the jaxpr's 0

    run(scenario())


def test_a_step_of_dispatches_shows_each_call_then_the_one_jit_that_does_not_run(analysis_of):
    analysis = analysis_of("dispatch_step.py", repeats=2)
    step = analysis.plans["step"]
    # by hand: grad_fn's module all-reduces w's gradient once per call, 4 calls; apply has none
    assert step.dispatches is not None and step.dispatches.counts() == {"all-reduce": 4}
    assert analysis.plans["step_fixed"].dispatches.counts() == {"all-reduce": 1}

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        text = " ".join(app.view.plain.split())
        mine = text.split("step_fixed: not jitted", 1)[0]
        assert "step: not jitted, a sequence of 11 dispatches per step (grad_fn x4, apply x1;" in mine
        assert "4 compiled collective runs per step" in mine and "grad_fn: one call's collectives (x4 per step)" in mine
        assert "across calls #1: grad_fn x4" in mine and "deferrable" in mine
        assert "step compiled as one jax.jit (XLA merges the calls; not what runs as written):" in mine

    run_view(HloView(), script)


def test_a_step_of_dispatches_is_timed_as_written_and_checked_against_its_fix(analysis_of):
    analysis = analysis_of("dispatch_step.py", repeats=2)
    step, fixed = analysis.plans["step"], analysis.plans["step_fixed"]
    assert step.run_s is not None and fixed.run_s is not None
    (check,) = analysis.output_checks  # step and step_fixed take the same arguments: the same update
    assert {check.baseline, check.candidate} == {"step", "step_fixed"} and check.agree


def test_the_partitioners_rematerialization_is_shown_under_its_program():
    # demos/reshard_clash.py adds a P('y', None, 'x') array to a P(None, ('x', 'y'), None) one
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    analysis = analyze(Settings(DEMOS / "reshard_clash.py", repeats=1))
    line = (DEMOS / "reshard_clash.py").read_text().splitlines().index("    return a + b") + 1  # add's, the first

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        add, fixed = app.view.plain.split("\nadd_fixed:", 1)
        assert f"involuntary full rematerialization of a at reshard_clash.py:{line} (add)" in add
        assert "P('y', None, 'x') -> P(None, ('x', 'y'), None)" in add
        assert "rematerialization" not in fixed

    run_view(HloView(), script)


def test_the_app_shows_the_rematerialization_and_the_terminal_never_gets_the_log_line(capfd):
    async def scenario():
        app = make_app(DEMOS / "reshard_clash.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "5")
            await settle(pilot)
            text = app.query_one(HloView).plain
            assert "involuntary full rematerialization of a at reshard_clash.py:" in text

    run(scenario())
    err = capfd.readouterr().err
    assert "Involuntary" not in err and "spmd_partitioner" not in err
