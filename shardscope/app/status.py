"""The status line: the current function, mesh and chunk size, and where the run is."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from shardscope.analysis import STAGES
from shardscope.settings import Settings


class StatusLine(Static):
    """``linear.py::linear | mesh s=2 | chunk 16 | loading ✓ tracing 33% compiling ...``."""

    DEFAULT_CSS = """
    StatusLine { height: 1; padding: 0 1; background: $panel; color: $text; }
    StatusLine.-failed { background: $error 30%; }
    StatusLine.-running { background: $primary 30%; }
    """

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._settings_text = describe_settings(settings)
        self._stage_text = Text("starting", "dim")

    def on_mount(self) -> None:
        """Paint the settings at once."""
        self._redraw()

    def show_settings(self, settings: Settings, shapes: Any = None) -> None:
        """Say which function, mesh and chunk size are current (``shapes`` once resolved)."""
        self._settings_text = describe_settings(settings, shapes)
        self._redraw()

    def show_stage(self, stage: str, fraction: float) -> None:
        """Show the stages with ``stage`` current, ``fraction`` of it done."""
        self.set_classes("-running")
        self._stage_text = stage_chips(stage, fraction)
        self._redraw()

    def show_done(self, message: str, *, failed: bool = False) -> None:
        """The run is over: say how it ended."""
        self.set_classes("-failed" if failed else "")
        self._stage_text = Text(message, "bold red" if failed else "")
        self._redraw()

    @property
    def plain(self) -> str:
        """The line as plain text (what a test or a screen reader sees)."""
        return self._line().plain

    def _line(self) -> Text:
        return Text.assemble(self._settings_text, ("  |  ", "dim"), self._stage_text)

    def _redraw(self) -> None:
        self.update(self._line())


def describe_settings(settings: Settings, shapes: Any = None) -> Text:
    """``linear.py::linear  mesh s=2  chunk 16 (2/device)``."""
    function = settings.function or "(first demo)"
    text = Text.assemble((f"{settings.path.name}::{function}", "bold"), "  mesh ", (settings.mesh.text(), "bold"))
    if len(settings.mesh.axes) > 1:
        text.append(f" batch over {','.join(settings.split_axes)}", "dim")
    if shapes is not None:
        text.append("  chunk ")
        text.append(str(shapes.chunk_size), "bold")
        text.append(f" ({shapes.chunks_per_device} chunks/device)", "dim")
    else:
        text.append("  chunk ")
        text.append("auto" if settings.chunk_size is None else str(settings.chunk_size), "bold")
    return text


def stage_chips(current: str, fraction: float) -> Text:
    """Every stage in order: done ones ticked, the current one with its percentage."""
    text = Text()
    position = STAGES.index(current) if current in STAGES else -1
    for i, stage in enumerate(STAGES):
        if i:
            text.append(" > ", "dim")
        if i < position:
            text.append(f"{stage} ✓", "dim")
        elif i == position:
            text.append(f"{stage} {fraction:.0%}", "bold reverse")
        else:
            text.append(stage, "dim")
    return text
