"""What the Graph and Diff tabs show, prepared in the run's worker thread, not on the UI thread.

At 10k equations the side-by-side diff costs about 1.6 s and the graph drawing about 1 s: the
worker computes both (pure Rich and difflib, no widgets) and the tabs only display the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from rich.text import Text

from shardscope.app.base.analysis_view import PreparedViews
from shardscope.app.views.diff_lines import folded, unified_lines
from shardscope.app.views.graph import comparison_graph
from shardscope.app.views.lines import lay_out, worker_console
from shardscope.render.diff import side_by_side

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.comparison import Comparison


def prepare(analysis: Analysis, comparison: Comparison,
            is_cancelled: Callable[[], bool] = lambda: False) -> PreparedViews | None:
    """Prepare the Graph and Diff tabs of ``comparison``; None when cancelled half-way."""
    before = analysis.plans[comparison.baseline].canonical_text
    after = analysis.plans[comparison.candidate].canonical_text
    rows = folded(side_by_side(before, after))
    if is_cancelled():
        return None
    unified = unified_lines(list(comparison.diff))
    if comparison.baseline == comparison.candidate:  # a program file's lone program
        unified = [Text(f"{analysis.settings.path.name} has one program ({comparison.baseline}): "
                        "nothing to compare it with. Mark another function @shardscope.program to diff the two.", "dim")]
    graph = lay_out(worker_console(), comparison_graph(analysis, comparison)) if analysis.plans[comparison.baseline].graph is not None else None
    if is_cancelled():
        return None
    return PreparedViews(comparison, graph, unified, rows)
