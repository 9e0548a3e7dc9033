"""The app on a dropout model (typed keys in x, a fixed key inside f): results, not an error panel."""

from __future__ import annotations

from _support import DROPOUT, write_demo
from app_support import SIZE, make_app, press, run, settle

from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.views.plans.plans_view import PlansView


def test_the_app_analyses_a_model_with_prng_keys(tmp_path):
    path = write_demo(tmp_path, "dropout.py", DROPOUT)

    async def scenario():
        app = make_app(path, chunk_size=8)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert not app.query_one(ErrorPanel).shown, app.query_one(ErrorPanel).message
            analysis = app.analysis
            assert analysis is not None and analysis.function == "dropout"
            assert (analysis.plans["naive"].jaxpr_runs_per_call, analysis.plans["deferred"].jaxpr_runs_per_call) == (2, 1)
            assert analysis.plans["naive"].max_abs_err < 1e-5
            await press(pilot, "n")
            naive = app.query_one(PlansView).tree("naive")
            assert "x2/call" in naive.cursor_node.label.plain
            shown = [node.label.plain for node in _loaded(naive.root)]
            assert any("key<fry>[2,8]{V:s}" in label for label in shown)  # the keys, chunked, per device
            assert any(label.startswith("random_seed") for label in shown)  # the fixed key made inside f

    run(scenario())


def _loaded(node):
    yield node
    for child in node.children:
        yield from _loaded(child)
