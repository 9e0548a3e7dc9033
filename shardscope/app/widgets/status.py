"""The status line: which settings the results on screen belong to, and what the run is doing.

It has two parts. The first names the results on screen (``linear.py::linear  mesh s=2  chunk
16``), or, before any, the settings asked for. The second says what happens now: a run's
stages (naming the settings it runs), how it ended (a failure names the settings that failed,
not the ones on screen), or that the sidebar asks for something the results are not. When the
line does not fit it breaks between the two parts rather than losing the second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.events import Resize
from textual.widgets import Static

from shardscope.pipeline.analysis import STAGES
from shardscope.config.settings import Settings

if TYPE_CHECKING:
    from shardscope.measure.timed_on import TimedOn
    from shardscope.config.shapes import Shapes

SEPARATOR = "  |  "
STATE_LINES = 2
"""Lines the second part may take when the line does not fit (the widget is at most three high)."""


class StatusLine(Static):
    """``linear.py::linear  mesh s=2  chunk 16 (2 chunks/device)  |  done: naive 2 runs/call, ...``."""

    DEFAULT_CSS = """
    StatusLine { height: auto; max-height: 3; padding: 0 1; background: $panel; color: $text; }
    StatusLine.-failed { background: $error 30%; }
    StatusLine.-running { background: $primary 30%; }
    StatusLine.-stale { background: $warning 25%; }
    """

    def __init__(self, settings: Settings, **kwargs: Any) -> None:  # Textual's widget keywords, passed on
        super().__init__(**kwargs)
        self._settings_text = describe_settings(settings)
        self._results_shown = False
        self._stage_text = Text("starting", "dim")
        self._state = ""
        self._height = 0
        """Lines the text last drawn took (0: drawn before the width was known)."""

    def on_mount(self) -> None:
        """Paint the settings at once."""
        self._redraw()

    def on_resize(self, event: Resize) -> None:
        """Break the line again for the new width."""
        self._redraw()

    def show_settings(self, settings: Settings, shapes: Shapes | None = None) -> None:
        """Name the settings asked for, while no results are on screen."""
        if not self._results_shown:
            self._settings_text = describe_settings(settings, shapes)
            self._redraw()

    def show_results(self, settings: Settings, shapes: Shapes | None, timed_on: "TimedOn | None" = None) -> None:
        """Name the settings of the results now on screen (and the chips they were timed on, if any)."""
        self._results_shown = True
        self._settings_text = with_chips(describe_settings(settings, shapes), timed_on)
        self._redraw()

    def show_described(self, text: Text, *, results: bool) -> None:
        """Name what is on screen (``results``) or asked for in words made elsewhere
        (:func:`describe_programs` for a program file)."""
        if results or not self._results_shown:
            self._results_shown = self._results_shown or results
            self._settings_text = text
            self._redraw()

    def show_stage(self, stage: str, fraction: float, running: Settings | None = None) -> None:
        """Show the stages with ``stage`` current, ``fraction`` of it done (of a run of ``running``)."""
        self._set_state("running")
        text = Text()
        if running is not None and self._results_shown:
            text.append("running ", "bold")
            text.append_text(describe_settings(running))
            text.append(": ")
        text.append_text(stage_chips(stage, fraction))
        self._stage_text = text
        self._redraw()

    def show_done(self, message: str | Text) -> None:
        """The run is over and went well: ``message`` says what it found."""
        self._set_state("")
        self._stage_text = message if isinstance(message, Text) else Text(message)
        self._redraw()

    def show_failed(self, failed: Settings | None, what: str = "failed: see the error panel") -> None:
        """The run of ``failed`` (None: settings refused before any run) ended in an error."""
        self._set_state("failed")
        text = Text()
        if failed is not None:
            text.append_text(describe_settings(failed))
            text.append(" ")
        text.append(what, "bold red")
        self._stage_text = text
        self._redraw()

    def show_stale(self, asked: Text, run_key: str = "r") -> None:
        """The sidebar asks for ``asked``, which the results on screen are not; ``run_key`` runs it."""
        self._set_state("stale")
        self._stage_text = Text.assemble(("stale: ", "bold"), "the sidebar asks for ", asked, (f" ({run_key}: run)", "bold"))
        self._redraw()

    @property
    def state(self) -> str:
        """``running``, ``failed``, ``stale`` or empty (done, ready)."""
        return self._state

    @property
    def state_text(self) -> Text:
        """The second part, with its styles: what the run is doing or how it ended."""
        return self._stage_text.copy()

    @property
    def plain(self) -> str:
        """The line as plain text (what a test or a screen reader sees), on one line."""
        return Text.assemble(self._settings_text, SEPARATOR, self._stage_text).plain

    def _set_state(self, state: str) -> None:
        self._state = state
        self.set_classes(f"-{state}" if state else "")

    def _redraw(self) -> None:
        width = self.content_region.width
        one_line = Text.assemble(self._settings_text, (SEPARATOR, "dim"), self._stage_text)
        if not width or one_line.cell_len <= width:
            self._draw(one_line, 1 if width else 0)
            return
        # the settings on one line, cut with an ellipsis; what happens now (the speedup's
        # sentence at the end of "done: ...") wrapped at word boundaries over the two lines left
        first = self._settings_text.copy()
        first.truncate(width, overflow="ellipsis")
        second = self._stage_text.copy().wrap(self.app.console, width, overflow="ellipsis")
        lines = list(second)
        if len(lines) > STATE_LINES:
            lines = lines[:STATE_LINES]
            lines[-1].truncate(width - 1)
            lines[-1].append("…")
        self._draw(Text("\n").join([first, *lines]), 1 + len(lines))

    def _draw(self, text: Text, height: int) -> None:
        """Show ``text``, ``height`` lines that fit the width (0: the width is not known yet).

        The screen is laid out again only when the height changes: a run's stages redraw the
        line some twenty times, each the same one line high."""
        self.update(text, layout=not height or height != self._height)
        self._height = height


def describe_settings(settings: Settings, shapes: Shapes | None = None) -> Text:
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
    if settings.targets:
        text.append("  target ")
        text.append(", ".join(settings.targets), "bold")
    return text


def with_chips(text: Text, timed_on: "TimedOn | None") -> Text:
    """``text`` and ``  on 4 x TPU v5 lite`` when the results were timed on chips (``--on tpu``);
    simulated CPU devices, the default, go unsaid here (the Timings tab says what they measure)."""
    if timed_on is not None and not timed_on.simulated:
        text.append("  on ")
        text.append(timed_on.text(), "bold")
    return text


def settings_changes(shown: Settings, draft: Settings | None) -> Text | None:
    """What the sidebar's ``draft`` asks for that the results ``shown`` are not (``chunk 8``); None
    when nothing differs (``draft`` is None when the chunk size typed is not a number)."""
    if draft is None:
        return Text("a chunk size that is not a number")
    changes = [
        f"{label} {value}" for label, value, before in (
            ("function", draft.function, shown.function),
            ("mesh", draft.mesh.text(), shown.mesh.text()),
            ("chunk", "auto" if draft.chunk_size is None else draft.chunk_size, shown.chunk_size),
            ("target", ", ".join(draft.targets) or "none", ", ".join(shown.targets) or "none"),
        ) if value != before
    ]
    return Text(", ".join(changes), "bold") if changes else None


def stale_banner(shown: Text, asked: Text, run_key: str = "r") -> Text:
    """The banner over the tabs while the sidebar asks for other settings than the results
    ``shown``; ``run_key`` is the key that runs them from where the focus is."""
    return Text.assemble(("Stale: ", "bold"), "the results below are for ", shown,
                         "; the sidebar asks for ", asked, (f". Press {run_key} to run it.", "bold"))


def describe_programs(path_name: str, programs: list[str], meshes: dict[str, str | None] | None = None,
                      devices: int | None = None, targets: tuple[str, ...] = ()) -> Text:
    """``train_step.py  2 programs  mesh batch=8 (8 devices)``: a program file has no mesh or chunk
    settings of its own; each program's mesh is shown once the analysis knows it."""
    count = len(programs)
    text = Text.assemble((path_name, "bold"), f"  {count} program{'s' if count != 1 else ''}")
    if meshes:
        distinct = sorted({mesh or "no shard_map" for mesh in meshes.values()})
        text.append("  mesh " if len(distinct) == 1 else "  meshes ")
        text.append(", ".join(distinct), "bold")
    if devices is not None:
        text.append(f" ({devices} devices)", "dim")
    if targets:
        text.append("  target ")
        text.append(", ".join(targets), "bold")
    return text


def describe_layouts(path_name: str, functions: tuple[str, ...]) -> Text:
    """``layouts_tx.py  layouts function build (7 Layouts ranks it)``: a file of
    ``@shardscope.layouts`` functions has no demo, mesh or chunk size to run."""
    plural = len(functions) > 1
    return Text.assemble((path_name, "bold"), f"  layouts function{'s' if plural else ''} ",
                         (", ".join(functions), "bold"), (f"  (7 Layouts ranks {'them' if plural else 'it'})", "dim"))


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
