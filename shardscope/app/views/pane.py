"""A tab that renders one renderable of the analysis, with a placeholder before the first run."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.console import RenderableType
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Static

from shardscope.app.views.lines import LinesView, offer_focus

if TYPE_CHECKING:
    from rich.segment import Segment

    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis


class RenderedPane(Widget):
    """Shows ``render(analysis)`` in a scrollable :class:`LinesView` named ``#<NAME>-body``.

    Subclasses set ``NAME``, implement :meth:`render_analysis` and may set ``FIT_WIDTH`` (lay
    the renderable out at the view's width) and ``RESERVE_SCROLLBAR`` (that width leaves the
    scrollbar's columns before it shows: :attr:`LinesView.reserve_scrollbar`).
    """

    NAME: ClassVar[str] = "pane"
    FIT_WIDTH: ClassVar[bool] = False
    RESERVE_SCROLLBAR: ClassVar[bool] = False
    DEFAULT_CLASSES = "-empty"
    DEFAULT_CSS = """
    RenderedPane {
        height: 1fr;
    }
    RenderedPane .pane-placeholder {
        display: none;
        padding: 1 2;
        color: $text-muted;
    }
    RenderedPane.-empty .pane-placeholder {
        display: block;
    }
    RenderedPane.-empty .pane-body {
        display: none;
    }
    RenderedPane .pane-body {
        padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        """A placeholder until the first analysis, then its rendering."""
        yield Static("No analysis yet: press r to run.", id=f"{self.NAME}-placeholder", classes="pane-placeholder")
        yield LinesView(id=f"{self.NAME}-body", classes="pane-body", reserve_scrollbar=self.RESERVE_SCROLLBAR)

    @property
    def body(self) -> LinesView:
        """The scrollable body."""
        return self.query_one(f"#{self.NAME}-body", LinesView)

    @property
    def plain(self) -> str:
        """What the tab shows, as plain text."""
        return self.body.plain

    def render_analysis(self, analysis: Analysis) -> RenderableType:
        """What this tab shows for ``analysis``."""
        raise NotImplementedError

    def prepared_lines(self, prepared: PreparedViews) -> list[list[Segment]] | None:
        """This tab's rendering as laid out in the worker (``PreparedViews``), or None."""
        return None

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Render ``analysis`` into the body and take the focus unless an input has it.

        ``prepared`` is what the worker laid out already (:mod:`shardscope.app.views.prepare`);
        without it the rendering is laid out here.
        """
        lines = None if prepared is None else self.prepared_lines(prepared)
        if lines is not None:
            self.body.show_segments(lines)
        else:
            self.body.show_renderable(self.render_analysis(analysis), fit_width=self.FIT_WIDTH)
        self.remove_class("-empty")
        offer_focus(self.body, unless_focused=True)

    def on_show(self) -> None:
        """The tab was opened: the body takes the focus, so the arrow keys scroll it."""
        offer_focus(self.body)
