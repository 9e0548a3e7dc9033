"""Messages a run worker posts to the app. Workers never touch widgets; the app's handlers do.

Every message carries the ``run_id`` of the run that sent it, so the app can drop messages from
a stale run that was cancelled but had not yet noticed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from shardscope.sources.programs import ProgramFile
    from shardscope.sources.demos import DemoFile
    from shardscope.config.mesh import Mesh
    from shardscope.pipeline.analysis import Analysis
    from shardscope.app.base.analysis_view import PreparedViews


class RunMessage(Message):
    """Base class: something happened in the run ``run_id``."""

    def __init__(self, run_id: int) -> None:
        super().__init__()
        self.run_id = run_id


class RunProgress(RunMessage):
    """The run reached ``stage`` (one of :data:`shardscope.pipeline.analysis.STAGES`), ``fraction``
    done; ``mesh``: the mesh it runs on, once that is not the one asked for (a 1-D mesh stretched
    over a target's chips), else None."""

    def __init__(self, run_id: int, stage: str, fraction: float, mesh: Mesh | None = None) -> None:
        super().__init__(run_id)
        self.stage = stage
        self.fraction = fraction
        self.mesh = mesh  # shardscope.config.mesh.Mesh | None

    def can_replace(self, message: Message) -> bool:
        """A newer progress report of the same run supersedes an unhandled older one."""
        return isinstance(message, RunProgress) and message.run_id == self.run_id


class DemoLoaded(RunMessage):
    """The demo file was (re)loaded: its functions, each one's batch size and own mesh (None: the
    default), for the sidebar."""

    def __init__(self, run_id: int, demo_file: DemoFile | ProgramFile, batches: dict[str, int],
                 meshes: dict[str, Mesh | None] | None = None) -> None:
        super().__init__(run_id)
        self.demo_file = demo_file
        self.batches = batches
        self.meshes = meshes or {}  # name -> shardscope.config.mesh.Mesh | None


class LayoutsFileFound(RunMessage):
    """The file marks only ``@shardscope.layouts`` functions (``functions``): it has no demo or
    program to run, and its Layouts tab ranks it (the run's failure follows)."""

    def __init__(self, run_id: int, path_name: str, functions: tuple[str, ...]) -> None:
        super().__init__(run_id)
        self.path_name = path_name
        self.functions = functions


class RunFinished(RunMessage):
    """The run produced an :class:`~shardscope.pipeline.analysis.Analysis`, and the Graph and Diff tabs of
    its comparison prepared in the worker (``shardscope.app.base.analysis_view.PreparedViews``)."""

    def __init__(self, run_id: int, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        super().__init__(run_id)
        self.analysis = analysis
        self.prepared = prepared


class ComparisonReady(RunMessage):
    """Another pair of plans was picked and its Graph and Diff tabs are prepared."""

    def __init__(self, run_id: int, prepared: PreparedViews) -> None:
        super().__init__(run_id)
        self.prepared = prepared


class RunFailed(RunMessage):
    """The run stopped with an error: ``message`` and ``hint`` are what the user reads."""

    def __init__(self, run_id: int, message: str, hint: str | None) -> None:
        super().__init__(run_id)
        self.message = message
        self.hint = hint
