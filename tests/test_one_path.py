"""The explorer's and report's path from a program to its plan (``pipeline.run``) gives what
``check``'s gives (issue 47, "from a function to an inspection"): a rematerialization's fix,
compiled and checked, and the flagged count of a step of dispatches with its findings across
calls. Expected values come from the programs themselves (the compiled module of the fix has
no all-gather; the step calls its gradient function 4 times, 3 of whose all-reduces are avoidable)."""

from __future__ import annotations

import jax
from _support import ROOT
from jax.sharding import PartitionSpec as P
from test_partitioner_warnings import CLASH, _compiled_add

from shardscope.pipeline.run import analyze
from shardscope.config.settings import Settings
from shardscope.render.report import _plan_json

DEMOS = ROOT / "demos"


def test_the_explorers_path_compiles_a_rematerializations_fix_as_check_does(tmp_path):
    # the fix check compiles: a given b's layout, after which the add gathers nothing
    assert "all-gather" not in jax.jit(lambda a, b: a + b).lower(*_compiled_add(
        P(None, ("x", "y"), None), P(None, ("x", "y"), None))[1:]).compile().as_text()
    path = tmp_path / "clash.py"
    path.write_text(CLASH)
    analysis = analyze(Settings(path=path, devices=8), measure=False, compile=True, graphs=False)
    (plan,) = analysis.plans.values()
    assert plan.compiled is not None
    (warning,) = plan.compiled.rematerializations
    assert warning.fix is not None and warning.fix.verified and warning.fix.bytes_after == 0


def test_report_json_counts_a_dispatch_steps_findings_across_calls_as_check_does():
    analysis = analyze(Settings(path=DEMOS / "dispatch_step.py", devices=8), measure=False, compile=True, graphs=False)
    step, fixed = analysis.plans["step"], analysis.plans["step_fixed"]
    assert step.dispatches is not None and len(step.dispatches.flagged) == 1  # 4 calls, one all-reduce each
    assert _plan_json(step)["flagged"] == len(step.flagged) + 1
    assert _plan_json(fixed)["flagged"] == 0
