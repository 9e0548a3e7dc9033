"""The Timings tab warns when the plans' gradients disagree (real JAX, real Textual)."""

from __future__ import annotations

import asyncio
from app_support import drain
from rich.console import Console

from _support import GATED_COND_DEMO as GATED
from _support import write_demo


async def shown_timings(analysis, width: int = 400) -> str:
    """The plain text the Timings tab displays for ``analysis``."""
    from textual.app import App
    from textual.widgets import Static

    from shardscope.app.views import TimingsView

    view = TimingsView()

    class Harness(App):
        def compose(self):
            yield view

    async with Harness().run_test(size=(160, 60)) as pilot:
        await drain(pilot)
        view.show_analysis(analysis)
        await drain(pilot)
        console = Console(width=width, color_system=None)
        with console.capture() as capture:
            console.print(view.query_one("#timings-body", Static).content)
        return capture.get()


def test_the_timings_view_shows_the_warning(tmp_path):
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    analysis = analyze(Settings(path=write_demo(tmp_path, "gated.py", GATED), chunk_size=4, repeats=1))
    assert analysis.warnings
    text = asyncio.run(shown_timings(analysis))
    assert "warning: the naive and deferred plans' gradients differ" in text
