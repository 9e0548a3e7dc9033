"""One statement of the comparison, from one computation, wherever the app prints it, for the pair picked."""

from __future__ import annotations

from app_support import DEMOS, eventually, make_app, press, run, settle
from textual.widgets import Static
from view_support import shown

from shardscope.app.widgets.status import StatusLine
from shardscope.app.views.projection import ProjectionPanel


def test_the_timings_tab_and_its_projection_follow_the_candidate_picked_with_c():
    async def scenario():
        app = make_app(DEMOS / "linear.py", repeats=5)
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(pilot)
            assert (app.comparison.baseline, app.comparison.candidate) == ("naive", "deferred")
            await press(pilot, "c")
            await eventually(pilot, lambda: app.comparison.candidate == "reduced", "c picks the reduced plan")
            await settle(pilot)
            await press(pilot, "4")
            await eventually(pilot, lambda: bool(app.query(ProjectionPanel)), "the Timings view is mounted")
            await settle(pilot)
            sentence = app.comparison.speedup_text()
            assert sentence is not None and "reduced" in sentence and "deferred" not in sentence
            body = " ".join(shown(app.query_one("#timings-body", Static)).split())
            projection = " ".join(app.query_one(ProjectionPanel).plain.split())
            assert sentence in body  # the ratio line
            assert f"projected naive/reduced communication time: 2.00x; measured run time here: {sentence}" in projection
            assert sentence in app.query_one(StatusLine).plain
            await press(pilot, "b")  # the baseline steps to deferred (skipping the candidate)
            await eventually(pilot, lambda: app.comparison.baseline == "deferred", "b picks the deferred plan")
            await settle(pilot)
            projection = " ".join(app.query_one(ProjectionPanel).plain.split())
            assert f"projected deferred/reduced communication time: 1.00x; measured run time here: {app.comparison.speedup_text()}" in projection

    run(scenario())
