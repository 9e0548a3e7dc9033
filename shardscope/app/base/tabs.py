"""The explorer's tabs: id, title and view class of each, and which of them show wall-clock numbers.

Only the Plans view is built before the first paint: the others import numpy and networkx (a
third of a second), so a thread worker imports them after it (by the names here:
``tab_routing.view_class``), and each is mounted when its tab is first shown.
"""

from __future__ import annotations

TABS = (
    ("plans", "Plans", "shardscope.app.views.plans.plans_view:PlansView"),
    ("graph", "Graph", "shardscope.app.views.graph:GraphView"),
    ("diff", "Diff", "shardscope.app.views.diff:DiffView"),
    ("timings", "Timings", "shardscope.app.views.timings:TimingsView"),
    ("hlo", "Compiled", "shardscope.app.views.hlo:HloView"),
    ("sweep", "Sweep", "shardscope.app.views.sweep:SweepView"),
    ("layouts", "Layouts", "shardscope.app.views.layouts:LayoutsView"),
)
"""Tab id, title and view class; the key of each tab is its position (1-7)."""
MEASURING_TABS = ("timings", "sweep")
"""The tabs that show wall-clock numbers: built with ``measurements_hidden`` when the app hides them."""

