"""The tab views of the explorer: each renders one :class:`shardscope.pipeline.analysis.Analysis`.

Every view shows a "press r to run" placeholder until ``show_analysis(analysis)`` is called,
and only renders what the core computed.
"""

from shardscope.app.views.diff import DiffView
from shardscope.app.views.graph import GraphView
from shardscope.app.views.hlo import HloView
from shardscope.app.views.timings import TimingsView

__all__ = ["DiffView", "GraphView", "HloView", "TimingsView"]
