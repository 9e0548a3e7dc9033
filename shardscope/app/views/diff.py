"""The Diff tab: the compared plans' canonical jaxprs, as a coloured unified diff or side by side.

The diff itself comes from :mod:`shardscope.render.diff` (difflib over the stable canonical texts),
its coloured and folded lines from :mod:`~shardscope.app.views.diff_lines`; this view displays
them. ``s`` switches between the two layouts; the state is a class on the view, so the
stylesheet decides which pane shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widget import Widget
from textual.widgets import Static

from shardscope.app.base.bindings import DIFF_BINDINGS
from shardscope.app.views.diff_lines import SideBySide, folded, unified_lines
from shardscope.app.views.lines import LinesView, offer_focus
from shardscope.render.diff import side_by_side

if TYPE_CHECKING:
    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis


class DiffView(Widget):
    """The Diff tab: unified diff by default, side by side after ``s``."""

    BINDINGS: ClassVar[list[BindingType]] = [*DIFF_BINDINGS]
    """The tab's keys, for the view on its own; in the app they are app bindings too (:func:`~shardscope.app.base.bindings.tab_key_bindings`)."""

    DEFAULT_CLASSES = "-empty"
    DEFAULT_CSS = """
    DiffView {
        height: 1fr;
    }
    DiffView #diff-placeholder {
        display: none;
        padding: 1 2;
        color: $text-muted;
    }
    DiffView.-empty #diff-placeholder {
        display: block;
    }
    DiffView.-empty LinesView {
        display: none;
    }
    DiffView LinesView {
        padding: 0 1;
    }
    DiffView #diff-side-by-side, DiffView.-side-by-side #diff-unified {
        display: none;
    }
    DiffView.-side-by-side #diff-side-by-side {
        display: block;
    }
    """

    def compose(self) -> ComposeResult:
        """A placeholder until the first analysis; a pane for each layout."""
        yield Static("No analysis yet: press r to run.", id="diff-placeholder")
        yield LinesView(id="diff-unified")
        yield LinesView(id="diff-side-by-side")

    @property
    def side_by_side(self) -> bool:
        """True while the side-by-side layout shows."""
        return self.has_class("-side-by-side")

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Show the diff of the comparison ``prepared`` holds (prepared in the worker), or of the
        analysis's default comparison, computed here."""
        if prepared is None:
            comparison = analysis.comparison
            before = analysis.plans[comparison.baseline].canonical_text
            after = analysis.plans[comparison.candidate].canonical_text
            lines, rows = unified_lines(list(comparison.diff)), folded(side_by_side(before, after))
        else:
            comparison, lines, rows = prepared.comparison, prepared.diff_unified, prepared.diff_rows
        self.query_one("#diff-unified", LinesView).show_lines(lines)
        self.query_one("#diff-side-by-side", LinesView).show_renderable(
            SideBySide(rows, comparison.baseline, comparison.candidate), fit_width=True
        )
        self.remove_class("-empty")
        self.refresh_bindings()
        offer_focus(self.active_pane, unless_focused=True)

    @property
    def active_pane(self) -> LinesView:
        """The pane of the layout that shows: unified or side by side."""
        return self.query_one("#diff-side-by-side" if self.side_by_side else "#diff-unified", LinesView)

    def on_show(self) -> None:
        """The tab was opened: let the diff take the focus, so ``s`` and the arrow keys work at once."""
        offer_focus(self.active_pane)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The layout switch is greyed out until there is a diff to show."""
        if action == "toggle_layout":
            return None if self.has_class("-empty") else True
        return True

    def action_toggle_layout(self) -> None:
        """Switch between the unified and the side-by-side layout, keeping the focus in the diff."""
        had_focus = self.has_focus_within
        self.toggle_class("-side-by-side")
        if had_focus:
            self.active_pane.focus()
