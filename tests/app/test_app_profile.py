"""The Compiled and Timings tabs with a profile's times (``--profile``, issue 46): real JAX on the
simulated CPU devices, real Textual. Expected runs by hand: the seed case on 2 devices, 32
examples each in chunks of 16, sums its gradient once per chunk naive (2 runs a call) and once
after the loop deferred (1)."""

from __future__ import annotations

import asyncio
import re

import pytest
from app_support import DEMOS, drain
from test_crosscheck_view import shown_timings
from view_support import run_view

from shardscope.app.views import HloView



@pytest.fixture(scope="module")
def profiled():
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    return analyze(Settings(path=DEMOS / "linear.py", devices=2, chunk_size=16, repeats=1, profile=True))


def test_every_plan_carries_its_measured_collectives(profiled):
    runs = {name: plan.inspection.measured.collectives[0].runs_per_call
            for name, plan in profiled.plans.items() if name in ("naive", "deferred")}
    assert runs == {"naive": 2, "deferred": 1}
    assert all(plan.inspection.measured.calls == 5 and plan.inspection.measured.devices == 2
               for plan in profiled.plans.values())


def test_the_compiled_tab_shows_each_collectives_measured_time(profiled):
    async def script(app, pilot):
        app.view.show_analysis(profiled)
        await drain(pilot)
        naive = app.view.plain.split("\ndeferred:", 1)[0]
        assert "measured/call" in naive and "per run" in naive
        measured = profiled.plans["naive"].inspection.measured.collectives[0]
        assert re.search(r"all-reduce\[s\]\s+grad\(params\)\s+2\s+2\s+40\s+\S+ \S+\s+\S+ \S+\s+program", naive)
        assert measured.per_step_s == pytest.approx(measured.per_run_s * 2)

    run_view(HloView(), script)


def test_the_timings_tab_shows_the_profiles_step_and_collectives(profiled):
    text = asyncio.run(shown_timings(profiled))
    assert "profile: step (slowest device)" in text and "profile: collectives per call" in text
