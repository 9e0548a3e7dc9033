"""Helpers for the tests that mount one tab view alone in a tiny app (real Textual, real analyses)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app_support import drain
from rich.console import Console
from textual.app import App, ComposeResult
from textual.widget import Widget
from textual.widgets import Static

SIZE = (160, 60)
DEMOS = Path(__file__).resolve().parents[2] / "demos"


class ViewHarness(App):
    """Mounts one view, full screen."""

    def __init__(self, view: Widget) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        yield self.view


def shown(static: Static, width: int = 400) -> str:
    """The plain text a Static displays."""
    console = Console(width=width, color_system=None, legacy_windows=False)
    with console.capture() as capture:
        console.print(static.content)
    return capture.get()


def run_view(view: Widget, script, size: tuple[int, int] = SIZE) -> None:
    """Mount ``view`` in the harness and run ``await script(app, pilot)``."""

    async def main() -> None:
        app = ViewHarness(view)
        async with app.run_test(size=size) as pilot:
            await drain(pilot)
            await script(app, pilot)

    asyncio.run(main())
