"""The app opens program files: a pane per ``@shardscope.program``, b/c pick the two compared.

Real JAX on 8 simulated CPU devices and real Textual (``App.run_test`` + Pilot); the numbers
are those of demos/train_step.py (4 micro-batches, W1 16x32 and W2 32x1 floats).
"""

from __future__ import annotations

import textwrap

import pytest
from app_support import DEMOS, SIZE, make_app, press, run, settle
from rich.console import Console
from textual.widgets import OptionList

from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.app.views.timings import timings_renderable
from shardscope.render.text import diff_text

GOOD_AND_BAD = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
x = jax.ShapeDtypeStruct((8, 4), jnp.float32)


@shardscope.program(args=(x,))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=P("d"), out_specs=P())
def good(x):
    """Sums every example once."""
    return lax.psum(x.sum(), "d")


@shardscope.program(args=(x,))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=P("d"), out_specs=P())
def bad(x):
    """Multiplies by a matrix of the wrong shape."""
    return lax.psum(x @ jnp.ones((5, 5)), "d")
'''


def plain(renderable) -> str:
    """A Rich renderable as one line of plain text."""
    console = Console(record=True, width=240)
    console.print(renderable)
    return " ".join(console.export_text().split())


def sidebar_marks(app) -> list[str]:
    """The program list as the user reads it: ``B step``, ``C step_fixed``."""
    options = app.query_one("#functions", OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


def test_a_program_file_opens_with_a_pane_per_program_and_n_pairs_their_collectives_by_value(tmp_path):
    """One app run on train_step.py: what it opens with, then the first n, then b and c switch
    the comparison and e exports its diff (that was a test of its own, on its own app)."""
    async def scenario():
        app = make_app(DEMOS / "train_step.py", export_dir=tmp_path, repeats=5)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis.origin.noun == "program" and not app.query_one(ErrorPanel).shown
            view = app.query_one(PlansView)
            assert view.names == ("step", "step_fixed")
            step_header = str(view.query_one("#step-header").render())
            assert step_header.startswith("B step program  mesh batch=8  Naive:")  # B: the baseline compared
            assert "8 runs/call, 2 of 2 collective equations in loops, 8,704 B/call" in step_header
            fixed_header = str(view.query_one("#step_fixed-header").render())
            assert fixed_header.startswith("C step_fixed program")  # C: the candidate
            assert "2 runs/call, all 2 collective equations once per call, 2,176 B/call" in fixed_header
            # step: two psum_invariant in the scan over 4 micro-batches, 4 runs per call each
            step = app.analysis.plans["step"]
            assert [(c.primitive, c.executions) for c in step.collectives] == [("psum_invariant", 4)] * 2
            assert view.tree("step").collective_ids == (
                "shard_map_0/scan_0/psum_invariant_0", "shard_map_0/scan_0/psum_invariant_1")
            status = app.query_one("#status").plain
            assert status.startswith("train_step.py  2 programs  mesh batch=8 (8 devices)  |  ")
            # compiled: XLA combines the two gradient sums into one all-reduce: 4 micro-batches x 1 in step,
            # 1 after the loop in step_fixed (the headers above count the jaxpr's two equations)
            assert "done: compiled runs/call: step 4, step_fixed 1; " in status and "chunk" not in status
            # the sidebar: the programs, which are compared, and no mesh or chunk controls
            assert sidebar_marks(app) == ["B step", "C step_fixed"]
            assert not app.query_one("#devices").display and not app.query_one("#chunk").display
            assert not app.query_one("#mesh").display and app.query_one("#programs-note").display
            assert "8 CPU devices" in str(app.query_one("#programs-note").render())

            # n pairs the programs' collectives by value
            await press(pilot, "n")
            step, fixed = (str(view.query_one(f"#{n}-header").render()).splitlines()[-1] for n in view.names)
            value = app.analysis.plans["step"].collectives[0].value
            assert value == "grad(params['W2'])"  # the gradient the all-reduce in the loop sums
            assert step.endswith(f"{value} x4/call collective 1 of 2, psum_invariant_0 in 1 loop(s)")  # the value leads
            assert "out['W2'] x1/call collective" in fixed and fixed.endswith("outside loops")  # step_fixed returns the sum

            # b and c switch the comparison and e exports its diff
            first = app.comparison.speedup
            await press(pilot, "3")
            await settle(pilot)
            diff = app.query_one("#diff-unified").plain.splitlines()
            assert diff[:2] == ["--- step", "+++ step_fixed"]
            assert any(line.startswith("+") and "pvary" in line for line in diff)
            await press(pilot, "b")
            await settle(pilot)
            assert (app.comparison.baseline, app.comparison.candidate) == ("step_fixed", "step")
            assert app.query_one("#diff-unified").plain.splitlines()[:2] == ["--- step_fixed", "+++ step"]
            assert sidebar_marks(app) == ["C step", "B step_fixed"]
            # the same aligned rounds, the other way round: with 5 rounds the median ratio inverts exactly
            assert app.comparison.speedup.median == pytest.approx(1 / first.median)
            await press(pilot, "e")
            exported = tmp_path / "train_step-step_fixed-vs-step-8dev.diff"
            assert app.last_export == exported
            assert exported.read_text() == diff_text(app.analysis, app.comparison)
            assert "\n--- step_fixed\n+++ step\n" in exported.read_text()
            await press(pilot, "c")
            await settle(pilot)
            assert (app.comparison.baseline, app.comparison.candidate) == ("step", "step_fixed")
            await press(pilot, "2")
            await settle(pilot)
            graph = app.query_one("#graph-view").plain
            assert graph.index("step program") < graph.index("step_fixed program")
            assert "body of scan_0 [4 trips]  (runs 4x per call)" in graph
            await press(pilot, "4")
            await settle(pilot)
            view = app.query_one("#timings-view")
            timings = plain(timings_renderable(app.analysis, False, app.comparison))
            assert view.analysis is app.analysis  # the tab shows this analysis, rendered as here
            assert "reference" not in timings.split("outputs")[0] and "max |grad" not in timings
            assert "outputs on the same example arguments: step_fixed agrees with step" in timings

    run(scenario())


def test_a_program_that_fails_to_trace_shows_in_the_error_panel(tmp_path):
    async def scenario():
        path = tmp_path / "programs.py"
        path.write_text(textwrap.dedent(GOOD_AND_BAD))
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "bad: it fails to trace" in panel.message
            assert app.query_one(PlansView).names == ("good",)  # the program that traces shows
            assert app.analysis.plans["good"].jaxpr_runs_per_call == 1
            # fixed on disk: r reloads the file and both programs show, the panel goes
            path.write_text(path.read_text().replace("jnp.ones((5, 5))", "jnp.ones((4, 5))"))
            await press(pilot, "r")
            await settle(pilot)
            assert not panel.shown and app.query_one(PlansView).names == ("good", "bad")
            assert app.is_running

    run(scenario())


def test_a_program_file_with_a_syntax_error_keeps_the_app_running(tmp_path):
    async def scenario():
        path = tmp_path / "programs.py"
        path.write_text(textwrap.dedent(GOOD_AND_BAD).replace("def bad(x):", "def bad(x)"))
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and panel.message.startswith(f"Syntax error in {path}")
            assert app.analysis is None and app.is_running
            path.write_text(textwrap.dedent(GOOD_AND_BAD).replace("jnp.ones((5, 5))", "jnp.ones((4, 5))"))
            await press(pilot, "r")
            await settle(pilot)
            assert not panel.shown and app.query_one(PlansView).names == ("good", "bad")
            assert sidebar_marks(app) == ["B good", "C bad"]

    run(scenario())


def test_a_file_with_one_program_has_nothing_to_compare(tmp_path):
    async def scenario():
        app = make_app(DEMOS / "pipeline.py", export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.query_one(PlansView).names == ("pipeline",)
            header = str(app.query_one("#pipeline-header").render())
            assert header.startswith("pipeline program  mesh stage=4")
            assert "4 runs/call, 1 of 1 collective equations in loops, 2,048 B/call" in header
            # no second program: no speedup, no diff to export, nothing for b/c to pick
            status = app.query_one("#status").plain
            # compiled: one collective-permute per stage step of the 4-step loop
            assert status.endswith("done: compiled runs/call: pipeline 4") and "faster" not in status
            assert sidebar_marks(app) == ["= pipeline"]
            for action in ("export", "pick_baseline", "pick_candidate"):
                assert app.check_action(action, ()) is None
            await press(pilot, "e")
            assert app.last_export is None and list(tmp_path.iterdir()) == []
            await press(pilot, "3")
            await settle(pilot)
            assert "has one program (pipeline): nothing to compare it with" in app.query_one("#diff-unified").plain
            await press(pilot, "6")
            await settle(pilot)
            assert "nothing to sweep" in str(app.query_one("#sweep-status").render())
            assert app.query_one("#sweep-run").disabled

    run(scenario())


def test_a_file_with_programs_and_demos_shows_in_the_error_panel(tmp_path):
    async def scenario():
        path = tmp_path / "both.py"
        path.write_text(textwrap.dedent(GOOD_AND_BAD).replace("jnp.ones((5, 5))", "jnp.ones((4, 5))") + textwrap.dedent('''
            @shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=x)
            def model(params, x):
                return x @ params
        '''))
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and panel.message.startswith(
                "both.py marks both @shardscope.program functions (good, bad) and @shardscope.demo functions (model)")
            assert app.analysis is None and app.is_running

    run(scenario())


def _style_at(text, needle: str) -> str:
    """The style of the span that covers the start of ``needle`` in the rich Text ``text``."""
    start = text.plain.index(needle)
    return " ".join(str(span.style) for span in text.spans if span.start <= start < span.end)


def test_a_jitted_programs_header_counts_what_the_compiler_runs_in_red():
    """A jit with shardings has no collective in its jaxpr: the header must not say "0 runs/call"
    in green. The partitioner's all-reduce of the gradient runs in each of the scan's 4
    micro-batches (the CPU combiner makes W1's and W2's one instruction): 4 runs per call, one
    instruction in a while loop. The fixed program's one pmean after the loop: 1, none in loops."""

    async def scenario():
        app = make_app(DEMOS / "gspmd_accumulate.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            view = app.query_one(PlansView)
            step = view.query_one("#step-header").render()
            assert "compiled: 4 runs/call, 1 in while loops" in step.plain
            assert "red" in _style_at(step, "compiled: 4 runs/call")
            assert "jaxpr: 0 runs/call, no collective equations" in step.plain
            fixed = view.query_one("#step_fixed-header").render()
            assert "compiled: 1 run/call, 0 in while loops" in fixed.plain
            assert "green" in _style_at(fixed, "compiled: 1 run/call")

    run(scenario())
