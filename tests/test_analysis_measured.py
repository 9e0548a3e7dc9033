"""``Analysis.measured`` is well defined for any analysis: an analysis with no plans (every program
unavailable) was not measured, and one whose plans were timed was."""

from __future__ import annotations

import dataclasses


def test_an_analysis_with_no_plans_was_not_measured(analysis_of):
    analysis = analysis_of("linear.py", devices=2, chunk_size=16)
    assert analysis.plans and any(plan.run_s is not None for plan in analysis.plans.values())
    assert analysis.measured
    assert dataclasses.replace(analysis, plans={}).measured is False
