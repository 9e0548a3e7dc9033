"""What every tab's view implements (:class:`AnalysisView`: show one analysis) and what the run's
worker prepares for the views (:class:`PreparedViews`).

The app holds the latest :class:`~shardscope.pipeline.analysis.Analysis` and hands it to a tab's
view when the tab shows (:mod:`shardscope.app.tab_routing`); this is the one contract between the
two, so a new tab only has to implement it. Nothing here imports another view, so every view can
name these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rich.segment import Segment
from rich.text import Text
from textual.widget import Widget

from shardscope.render.diff import Row

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.comparison import Comparison


@dataclass(frozen=True)
class PreparedViews:
    """The Graph and Diff tabs of one comparison, ready to display.

    ``graph_lines`` are laid-out lines of segments (None: the plans have no dataflow graph);
    ``diff_unified`` the coloured unified diff lines; ``diff_rows`` the folded side-by-side rows
    (an int: that many equal rows folded away), laid out at the view's width on show.
    """

    comparison: Comparison
    graph_lines: list[list[Segment]] | None
    diff_unified: list[Text]
    diff_rows: list[Row | int]


@runtime_checkable
class AnalysisView(Protocol):
    """A tab's view: renders the analysis it is handed, and only what the core computed."""

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Show ``analysis``; ``prepared`` holds the Graph and Diff renderings of the comparison
        shown, laid out in the worker (None: the view lays out what it needs itself)."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Textual's: whether the view's ``action`` applies now (None greys its key out)."""


def as_analysis_view(widget: Widget) -> AnalysisView:
    """``widget``, checked to be a tab's view (a view without ``show_analysis`` is a bug to name)."""
    if not isinstance(widget, AnalysisView):
        raise TypeError(f"{type(widget).__name__} (#{widget.id}) is not a tab view: it has no show_analysis")
    return widget
