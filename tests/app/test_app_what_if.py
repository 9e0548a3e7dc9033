"""``w`` in the explorer: each program of a program file beside shardscope's verified rewrite of
it, named ``NAME-what-if``, compared with it in every tab; ``w`` again leaves them out. (``w`` on
a demo file, greyed out, is test_app_visible_outcomes.py's: it shares an app there.)

Real JAX on 8 simulated CPU devices and real Textual (``App.run_test`` + Pilot). Expected counts
come from recounting the compiled text of demos/train_step.py's ``step`` and ``step_fixed``.
"""

from __future__ import annotations

import jax
from app_support import DEMOS, SIZE, make_app, press, run, settle

import _what_if_programs as wp
from shardscope.app.views.plans.plans_view import PlansView
from shardscope.cli import parse
from shardscope.cli.explorer import ExplorerOptions
from shardscope.sources.loading import import_file
from shardscope.sources.examples import materialize


def _recounts() -> tuple[dict, dict]:
    """The compiled runs per call of ``step`` and ``step_fixed``, recounted from their texts."""
    module, _ = import_file(DEMOS / "train_step.py")
    compiled = module.step.trace(module.params, module.xs, module.ys).lower().compile()
    args = jax.device_put(materialize(((module.params, module.xs, module.ys), {}), 0), compiled.input_shardings)[0]
    fixed = module.step_fixed.trace(*args).lower().compile()
    return wp.recount(compiled.as_text())["runs"], wp.recount(fixed.as_text())["runs"]


def test_w_puts_each_program_beside_its_rewrite_and_compares_them():
    naive_runs, fixed_runs = _recounts()

    async def scenario():
        app = make_app(DEMOS / "train_step.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert tuple(app.analysis.plans) == ("step", "step_fixed")
            await press(pilot, "w")
            await settle(pilot)
            plans = app.analysis.plans
            # step has one verified rewrite, step_fixed none (nothing flagged)
            assert tuple(plans) == ("step", "step-what-if", "step_fixed")
            assert app.query_one(PlansView).names == tuple(plans)
            assert (app.comparison.baseline, app.comparison.candidate) == ("step", "step-what-if")
            assert plans["step"].compiled.counts() == naive_runs
            assert plans["step-what-if"].compiled.counts() == fixed_runs  # what step_fixed runs
            assert "shardscope's rewrite of step" in plans["step-what-if"].description
            # the Timings tab's check: the rewrite's outputs agree with step's on the same arguments
            check = next(c for c in app.analysis.checks if "step-what-if" in (c.baseline, c.candidate))
            assert check.agree and check.subject == "outputs"
            # the jaxpr diff adds the cast to varying before the loop
            assert any(line.startswith("+") and " pvary" in line for line in app.comparison.diff)
            await press(pilot, "w")
            await settle(pilot)
            assert tuple(app.analysis.plans) == ("step", "step_fixed")

    run(scenario())


def test_open_what_if_starts_with_the_rewrites_and_w_leaves_them_out():
    """``shardscope demos/train_step.py --what-if``: the first results already hold step-what-if."""
    args, _ = parse(["open", str(DEMOS / "train_step.py"), "--what-if"])
    settings, _ = ExplorerOptions.from_args(args).app_options()
    assert settings.what_if

    async def scenario():
        app = make_app(DEMOS / "train_step.py", what_if=True)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert tuple(app.analysis.plans) == ("step", "step-what-if", "step_fixed")
            await press(pilot, "w")
            await settle(pilot)
            assert tuple(app.analysis.plans) == ("step", "step_fixed") and not app.settings.what_if

    run(scenario())
