"""Colour says what a count means: red inside a loop, green once per call (status, trees, Graph)."""

from __future__ import annotations

from app_support import DEMOS, SIZE, make_app, run, settle
from rich.style import Style

from shardscope.app.views.plans.plan_labels import LabelStyles
from shardscope.app.widgets.status import StatusLine
from shardscope.app.views.graph import collective_line


def _style_of(text, fragment: str) -> Style:
    """The style of the span that covers ``fragment`` in a rich Text."""
    start = text.plain.index(fragment)
    style = Style.parse(text.style) if isinstance(text.style, str) else text.style
    for span in text.spans:
        if span.start <= start and start + len(fragment) <= span.end:
            style += Style.parse(span.style) if isinstance(span.style, str) else span.style
    return style


def test_in_loop_counts_are_red_and_once_per_call_counts_green():
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            done = app.query_one(StatusLine).state_text
            plans = app.analysis.plans
            assert plans["naive"].collectives_in_loops and not plans["deferred"].collectives_in_loops
            assert _style_of(done, "naive 2").color.name == "red"
            assert _style_of(done, "deferred 1").color.name == "green"
            styles = LabelStyles()
            for name, colour in (("naive", "red"), ("deferred", "green")):
                plan = plans[name]
                collective = plan.collectives[0]
                line = collective_line(plan, collective)
                assert _style_of(line, collective.runs.badge()).bgcolor.name == colour
            assert styles.badge(True).bgcolor.name == "red" and styles.badge(False).bgcolor.name == "green"

    run(scenario())
