"""With measurements hidden (``make screenshots``), the Sweep tab shows no wall-clock number and
no pick (the fastest point is a measured result), keeps the memory figures, and so shows the same
screen for every sweep of the same settings."""

from __future__ import annotations

import asyncio
import re

from app_support import SIZE, drain, eventually, press
from textual.widgets import Input, Static
from textual_plotext import PlotextPlot

from shardscope.app import make_app
from shardscope.app.views.sweep import SweepView
from shardscope.config.settings import Settings
from shardscope.render.sweep import mib
from view_support import DEMOS, run_view, shown

SETTINGS = Settings(path=DEMOS / "linear.py", devices=2, repeats=1)
BRAILLE = re.compile("[\u2801-\u28ff]")  # the dots the charts draw their curves with
MEASURED_TIME = re.compile(r"\d\s*(ms|µs|s)\b")


async def sweep_once(pilot, view: SweepView) -> None:
    """Start a sweep with a 1 KiB budget and wait (on the worker, not a clock) until it is shown."""
    before = view.sweep
    view.query_one("#sweep-budget", Input).value = "1KiB"
    view.action_sweep()
    await eventually(pilot, lambda: view.sweep is not before and not view.running, "the sweep finished", 300)
    await drain(pilot)


def chart(view: SweepView, name: str) -> str:
    """A chart as drawn (colours stripped), at the size the widget last rendered it."""
    plt = view.query_one(f"#sweep-{name}", PlotextPlot).plt
    return plt.uncolorize(plt.build())


def screen(view: SweepView) -> tuple[str, str, str, str]:
    """Everything the tab shows of a sweep: the status line, the table and both charts (in colour)."""
    builds = tuple(view.query_one(f"#sweep-{name}", PlotextPlot).plt.build() for name in ("time", "memory"))
    return (shown(view.query_one("#sweep-status", Static)), shown(view.query_one("#sweep-table", Static)), *builds)


def table_rows(table: str) -> list[tuple[str, ...]]:
    """The body rows of the table: chunk, plan, run time, memory per device."""
    cells = [tuple(cell.strip() for cell in line.split("│")[1:-1]) for line in table.splitlines()]
    return [row[:4] for row in cells if row and row[0].isdigit()]


def test_the_sweep_tab_of_an_app_that_hides_measurements_shows_memory_but_no_time():
    app = make_app(SETTINGS, autorun=False, hide_measurements=True)

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await press(pilot, "6")
            await eventually(pilot, lambda: bool(app.query(SweepView)), "the Sweep tab's view is mounted")
            view = app.query_one(SweepView)
            await sweep_once(pilot, view)
            sweep = view.sweep
            assert sweep.pick is not None and all(p.run_s.median > 0 for p in sweep.points)  # times were measured

            status, table = shown(view.query_one("#sweep-status", Static)), shown(view.query_one("#sweep-table", Static))
            assert status.strip() == "pick: ··· (the fastest within the budget of 1 KiB)."
            assert "measured times hidden" in table and not MEASURED_TIME.search(status + table)
            assert table_rows(table) == [(str(p.chunk_size), p.plan, "···", mib(p.footprint_bytes)) for p in sweep.points]

            time_chart, memory_chart = chart(view, "time"), chart(view, "memory")
            assert "··· (measured times hidden)" in time_chart and not BRAILLE.search(time_chart)
            numbered = [line.split() for line in time_chart.splitlines() if re.search(r"\d", line)]
            assert numbered == [[str(c) for c in sweep.chunk_sizes]], "the only numbers: the chunk-size axis"
            assert BRAILLE.search(memory_chart) and "naive" in memory_chart and "pick" not in memory_chart

    asyncio.run(main())


def test_two_sweeps_of_the_same_settings_show_the_same_screen_with_measurements_hidden():
    view = SweepView(measurements_hidden=True)

    async def script(app, pilot):
        view.settings = SETTINGS
        await sweep_once(pilot, view)
        first, first_screen = view.sweep, screen(view)
        await sweep_once(pilot, view)
        second = view.sweep
        assert [p.run_s.samples for p in first.points] != [p.run_s.samples for p in second.points]
        assert screen(view) == first_screen

        view.measurements_hidden = False  # the times were there all along: shown, they differ
        await drain(pilot)
        status = shown(view.query_one("#sweep-status", Static))
        pick = second.pick
        named = (f"pick: {pick.plan} at chunk size {pick.chunk_size}" if len(second.same_program) == 1
                 else f"pick: chunk size {pick.chunk_size}, the fastest")  # plans that are one program: no winner
        assert named in status and " ms, " in status
        assert screen(view) != first_screen and BRAILLE.search(chart(view, "time"))

    run_view(view, script)
