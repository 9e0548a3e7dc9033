"""Every tab's view implements one contract (:class:`AnalysisView`), typed the same in each, and the
app refuses, by name, a widget that does not."""

from __future__ import annotations

import inspect

import pytest
from textual.widgets import Static

from shardscope.app.base.tabs import TABS
from shardscope.app.base.analysis_view import AnalysisView, as_analysis_view
from shardscope.app.tab_routing import view_class
from shardscope.app.views.projection import ProjectionPanel


@pytest.mark.parametrize("spec", [spec for _, _, spec in TABS], ids=[tab for tab, _, _ in TABS])
def test_every_tab_view_shows_an_analysis_with_what_the_worker_prepared(spec):
    view = view_class(spec)
    assert issubclass(view, AnalysisView)
    parameters = inspect.signature(view.show_analysis).parameters
    assert list(parameters) == ["self", "analysis", "prepared"]
    assert parameters["prepared"].default is None
    # the annotations as written (postponed): the same types in every view, not Any
    assert (parameters["analysis"].annotation, parameters["prepared"].annotation) == ("Analysis", "PreparedViews | None")
    assert inspect.signature(view.show_analysis).return_annotation == "None"


def test_a_widget_that_is_no_tab_view_is_named():
    assert not issubclass(ProjectionPanel, AnalysisView)  # a part of the Timings tab, shown by it
    with pytest.raises(TypeError, match=r"Static \(#not-a-view\) is not a tab view"):
        as_analysis_view(Static(id="not-a-view"))
