"""One statement of the comparison, from one computation, wherever the app prints it, for the pair picked.

The statement expected is worked out here from the plans' own per-round run times (the median
of the per-round ratios and, for 6 rounds, its 95% interval: the smallest and the largest ratio,
since all six fall on one side of the median with chance 2/64 < 5% and five of them with
14/64 > 5%), in the wording the docs give, and the projected ratios by hand from the linear
demo's collectives; never from shardscope's own comparison.
"""

from __future__ import annotations

import numpy as np
from app_support import DEMOS, eventually, make_app, press, run, settle
from textual.widgets import Static
from view_support import shown

from shardscope.app.widgets.status import StatusLine
from shardscope.app.views.projection import ProjectionPanel


def expected_statement(analysis, baseline: str, candidate: str, same_work: bool = False) -> str:
    """The comparison of two plans from their aligned per-round run times: the median ratio
    baseline/candidate and its 95% interval (6 rounds: their extremes); no measurable difference
    when that interval holds 1, noise only when the two compile to the same work."""
    ratios = np.array(analysis.plans[baseline].run_s.samples) / np.array(analysis.plans[candidate].run_s.samples)
    assert len(ratios) == 6  # the repeats asked for, no budget for more: the fewest rounds with an interval
    median = float(np.median(ratios))
    low, high = float(ratios.min()), float(ratios.max())
    interval = f"95% confidence interval {low:.2f}-{high:.2f}x"
    if same_work:
        return (f"{baseline} and {candidate} compile to the same collectives and memory: their times differ by "
                f"noise only (median of 6 per-round ratios {median:.2f}x; {interval})")
    if low <= 1.0 <= high:
        return f"no measurable difference between {baseline} and {candidate} (median of 6 per-round ratios {median:.2f}x; {interval})"
    if median > 1:
        return f"{candidate} is {median:.2f}x faster than {baseline} (median of 6 per-round ratios; {interval})"
    return f"{candidate} is {1 / median:.2f}x slower than {baseline} (median of 6 per-round ratios; {interval})"


def test_the_timings_tab_and_its_projection_follow_the_candidate_picked_with_c():
    async def scenario():
        app = make_app(DEMOS / "linear.py", repeats=6)
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
            # deferred and reduced: one all-reduce of W's 20 B gradient after the loop each, and the
            # same memory by XLA's own analysis: what they run is the same, their times differ by noise
            deferred, reduced = app.analysis.plans["deferred"], app.analysis.plans["reduced"]
            assert deferred.memory == reduced.memory
            sentence = expected_statement(app.analysis, "deferred", "reduced", same_work=True)
            assert f"projected deferred/reduced communication time: 1.00x; measured run time here: {sentence}" in projection

    run(scenario())
