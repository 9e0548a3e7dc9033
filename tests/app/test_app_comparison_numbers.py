"""One statement of the comparison, from one computation, wherever the app prints it, for the pair picked.

The statement expected is worked out here from the plans' own per-round run times (numpy's
quartiles of the per-round ratios, in the wording the docs give), and the projected ratios by
hand from the linear demo's collectives; never from shardscope's own comparison.
"""

from __future__ import annotations

import numpy as np
from app_support import DEMOS, eventually, make_app, press, run, settle
from textual.widgets import Static
from view_support import shown

from shardscope.app.widgets.status import StatusLine
from shardscope.app.views.projection import ProjectionPanel


def expected_statement(analysis, baseline: str, candidate: str) -> str:
    """The comparison of two plans from their aligned per-round run times: the median ratio
    baseline/candidate and its interquartile range (numpy's linear quartiles); no measurable
    difference when that range holds 1."""
    ratios = np.array(analysis.plans[baseline].run_s.samples) / np.array(analysis.plans[candidate].run_s.samples)
    assert len(ratios) == 5  # the repeats asked for: enough rounds for a verdict
    median = float(np.median(ratios))
    low, high = (float(q) for q in np.percentile(ratios, [25, 75]))
    spread = f"per-round ratios {low:.2f}-{high:.2f}x"
    if low <= 1.0 <= high:
        return f"no measurable difference between {baseline} and {candidate} ({spread}, median {median:.2f}x)"
    if median > 1:
        return f"{candidate} is {median:.2f}x faster than {baseline} ({spread})"
    return f"{candidate} is {1 / median:.2f}x slower than {baseline} ({spread})"


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
            sentence = expected_statement(app.analysis, "naive", "reduced")
            body = " ".join(shown(app.query_one("#timings-body", Static)).split())
            projection = " ".join(app.query_one(ProjectionPanel).plain.split())
            assert sentence in body  # the ratio line
            # naive: W's 20 B all-reduce in each of the 2 chunks; reduced: one after the loop
            assert f"projected naive/reduced communication time: 2.00x; measured run time here: {sentence}" in projection
            assert sentence in app.query_one(StatusLine).plain
            await press(pilot, "b")  # the baseline steps to deferred (skipping the candidate)
            await eventually(pilot, lambda: app.comparison.baseline == "deferred", "b picks the deferred plan")
            await settle(pilot)
            projection = " ".join(app.query_one(ProjectionPanel).plain.split())
            sentence = expected_statement(app.analysis, "deferred", "reduced")
            # deferred and reduced: one all-reduce of W after the loop each
            assert f"projected deferred/reduced communication time: 1.00x; measured run time here: {sentence}" in projection

    run(scenario())
