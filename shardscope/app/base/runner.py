"""What a run worker does, off the UI thread: start JAX, (re)load the demo file, analyse.

Plain Python with no widgets: the app's thread worker calls :func:`run` with a ``post`` that
sends messages to the app, an ``is_cancelled`` that asks whether the run is still wanted and the
``prepare`` that lays out the views' renderings of the result (the views' own: the views stand on
this module, which imports none of them).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from textual.message import Message

from shardscope.app.base.messages import DemoLoaded, LayoutsFileFound, RunFailed, RunFinished, RunProgress
from shardscope.errors import Cancelled, LayoutsFileError, SettingsError, ShardscopeError
from shardscope.targets.host import devices_needed, ensure_devices
from shardscope.config.mesh import Mesh
from shardscope.config.settings import Settings, check_target_size
from shardscope.sources.demos import carried_over
from shardscope.sources.loading import file_fingerprint, load_file
from shardscope.sources.programs import ProgramFile

if TYPE_CHECKING:
    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.comparison import Comparison
    from shardscope.sources.programs import ProgramFile
    from shardscope.sources.demos import DemoFile
    from shardscope.targets.base import TargetDevices

BUG_HINT = "this looks like a bug; `shardscope report FILE --debug` shows the traceback"
PROGRAM_BUG_HINT = "this looks like a bug; `shardscope check FILE --debug` shows the traceback"
"""The same for a program file, which ``report`` refuses."""


def bug_hint(loaded: object) -> str:
    """The hint for an error that is not the user's: the command that shows its traceback."""
    return PROGRAM_BUG_HINT if isinstance(loaded, ProgramFile) else BUG_HINT


@dataclass(frozen=True)
class RunRequest:
    """One run: the settings to analyse and the demo file already loaded (if any)."""

    run_id: int
    settings: Settings
    max_devices: int
    demo_file: DemoFile | ProgramFile | None = None  # reused unless the file changed on disk
    analyze: bool = True  # False: only start JAX and load the demo file (for the sidebar)
    mesh_follows_target: bool = True  # a 1-D mesh spans the target's devices (False: the user typed a named mesh)


_busy = 0
_busy_lock = threading.Lock()


def busy() -> bool:
    """True while a worker thread (a run, a sweep, a comparison) is still working, even one the
    app no longer waits for: Python's exit would wait for its thread (:mod:`shardscope.app.leaving`)."""
    return _busy > 0


@contextmanager
def working() -> Iterator[None]:
    """Count the block as a worker thread's work for :func:`busy`."""
    global _busy
    with _busy_lock:
        _busy += 1
    try:
        yield
    finally:
        with _busy_lock:
            _busy -= 1


Prepare = Callable[["Analysis", "Comparison", Callable[[], bool]], "PreparedViews | None"]
"""What lays out the views' renderings of a run's comparison in the worker (None: cancelled)."""


def run(request: RunRequest, post: Callable[[Message], Any], is_cancelled: Callable[[], bool], prepare: Prepare) -> None:
    """Do ``request``, reporting everything through ``post``; never raises."""
    with working():
        _run(request, post, is_cancelled, prepare)


def _run(request: RunRequest, post: Callable[[Message], Any], is_cancelled: Callable[[], bool], prepare: Prepare) -> None:

    mesh: Mesh | None = None  # the mesh the run runs on, once it is not the one asked for

    def progress(stage: str, fraction: float) -> None:
        if is_cancelled():
            raise Cancelled
        post(RunProgress(request.run_id, stage, fraction, mesh))

    demo_file = request.demo_file
    try:
        progress("loading", 0.0)
        # libtpu describes the target's slice before JAX's CPU backend starts: the first run can
        # still start as many CPU devices as the slice has. A target that fails to load is said
        # once the file is loaded, so the sidebar still offers its functions.
        targets, target_error = load_settings_targets(request.settings)
        needed = max((t.count for t in targets), default=0)
        available = ensure_devices(max(request.max_devices, needed),  # imports JAX
                                   needed=devices_needed(request.max_devices, request.settings.mesh.devices))
        demo_file = current_demo_file(request.settings.path, request.demo_file)
        settings = request.settings
        if demo_file is not request.demo_file:
            post(DemoLoaded(request.run_id, demo_file, batch_sizes(demo_file), demo_meshes(demo_file)))
            if request.demo_file is not None:  # changed on disk: the function may have been renamed
                function = carried_over(settings.function, request.demo_file.names, demo_file.names)
                settings = settings.with_(function=function)
        if target_error is not None:
            raise target_error
        if needed > available:
            raise too_few_devices(targets[0], available)
        if not request.analyze:
            return
        from shardscope.pipeline.run import analyze  # imports JAX: here, never on the UI thread

        if targets and request.mesh_follows_target and not isinstance(demo_file, ProgramFile):
            settings = mesh_over_target(settings, targets[0].count)
            mesh = settings.mesh if settings.mesh != request.settings.mesh else None
        analysis = analyze(settings, progress, demo_file, targets=targets)
        progress("checking", 1.0)  # a last cancellation check: a stale result is not posted
        prepared = prepare(analysis, analysis.comparison, is_cancelled)
        progress("checking", 1.0)
        post(RunFinished(request.run_id, analysis, prepared))
    except Cancelled:
        return
    except LayoutsFileError as exc:  # nothing to run here: the Layouts tab is where such a file is read
        post(LayoutsFileFound(request.run_id, Path(request.settings.path).name, exc.functions))
    except ShardscopeError as exc:
        post(RunFailed(request.run_id, exc.message, exc.hint))
    except Exception as exc:  # a traceback is a bug, but the app must keep running
        post(RunFailed(request.run_id, f"{type(exc).__name__}: {exc}", bug_hint(demo_file)))


def load_settings_targets(settings: Settings) -> "tuple[tuple[TargetDevices, ...], ShardscopeError | None]":
    """The devices of the settings' targets (libtpu started once per process), or why not
    (the run and the Sweep tab's worker both call it: never on the UI thread)."""
    if not settings.targets:
        return (), None
    from shardscope.targets.plans import load_targets, parse_targets  # the engine: not on the UI thread

    try:
        targets = load_targets(parse_targets(settings.targets))
    except ShardscopeError as exc:
        return (), exc
    try:  # each plan is traced over as many CPU devices as the slice has (two a chip on some generations)
        check_target_size(str(targets[0].target), targets[0].count, "devices", "tpu:v5e:16x16")
    except SettingsError as exc:
        return (), exc
    return targets, None


def too_few_devices(target: "TargetDevices", available: int) -> SettingsError:
    """The slice has more devices than the CPU devices JAX started with, and that count is fixed."""
    return SettingsError(
        f"{target.target} has {target.count} devices; the app started JAX with {available} CPU devices, "
        "and that count cannot change while it runs.",
        f"open the app with --target {target.target} (it starts {target.count} CPU devices), "
        f"or type a slice of at most {available} chips, e.g. tpu:v5e:2x2")


def mesh_over_target(settings: Settings, count: int) -> Settings:
    """A 1-D mesh the sidebar's Devices picker gave, stretched over the target's ``count`` devices.

    While a target is set the picker does not apply (the slice sets the device count). A named
    mesh the user typed is kept (the request says so; the analysis refuses one of another size,
    with a hint), and a demo's own mesh is laid over the target by the analysis.
    """
    mesh = settings.mesh
    if settings.demo_mesh or len(mesh.names) != 1 or mesh.devices == count:
        return settings
    return settings.with_(mesh=Mesh.one_axis(mesh.names[0], count))


def current_demo_file(path: Path, loaded: DemoFile | ProgramFile | None) -> DemoFile | ProgramFile:
    """``loaded`` if ``path`` still has the same bytes, else the file loaded afresh: a
    :class:`~shardscope.sources.demos.DemoFile` or a :class:`~shardscope.sources.programs.ProgramFile`."""
    if loaded is not None and Path(loaded.path) == Path(path):
        try:
            if file_fingerprint(Path(path)) == loaded.fingerprint:
                return loaded
        except OSError:
            pass  # gone or unreadable: load_file says so in words
    return load_file(path)


def batch_sizes(demo_file: DemoFile | ProgramFile) -> dict[str, int]:
    """The batch N of each demo function (left out when its ``x`` has no common batch axis)."""
    from shardscope.sources.examples import batch_size  # imports JAX: only ever called in the worker

    sizes: dict[str, int] = {}
    if isinstance(demo_file, ProgramFile):
        return sizes  # programs have no batch the sidebar could split
    for name, demo_fn in demo_file.functions.items():
        try:
            sizes[name] = batch_size(demo_fn.spec.x)
        except ShardscopeError:
            continue
    return sizes


def demo_meshes(demo_file: DemoFile | ProgramFile) -> dict[str, Mesh | None]:
    """Each demo function's own mesh (None: the default), read in the worker (it walks pytrees with JAX)."""
    if isinstance(demo_file, ProgramFile):
        return {}
    return {name: demo_fn.default_mesh for name, demo_fn in demo_file.functions.items()}
