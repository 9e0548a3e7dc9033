"""What ``report``, ``diff`` and ``sweep`` share: the demo file loaded once, after JAX's device count
is set; the spawn of ``--processes`` workers on the demo's own mesh; the analysis, with what the
demo prints kept off stdout."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from shardscope.cli.options import DemoOptions
from shardscope.cli.launch import ProcessOptions, spawn_workers, start_jax
from shardscope.cli.processes import with_options
from shardscope.errors import ShardscopeError
from shardscope.pipeline.analysis import Analysis
from shardscope.targets.host import ensure_devices, request_devices
from shardscope.config.settings import Settings, check_device_count
from shardscope.sources.demos import DemoFile
from shardscope.sources.loading import load_demo_file

if TYPE_CHECKING:
    from shardscope.targets.base import TargetDevices


@dataclass(frozen=True)
class LoadedDemo:
    """The demo file, imported once (what it prints at import, once), and the settings on the
    demo's own mesh when the user gave none."""

    demo_file: DemoFile
    settings: Settings


def load_demo(settings: Settings, processes: ProcessOptions, targets: "Sequence[TargetDevices]" = ()) -> LoadedDemo:
    """Start JAX as ``processes`` says, then import the demo file and check the device count.

    With ``targets`` (loaded TPU slices) the mesh is laid over their devices
    (:func:`~shardscope.targets.plans.settings_on_targets`).

    ``settings.path`` is FILE as the command's start-up found it (:mod:`shardscope.cli.startup`:
    a typo fails before JAX starts). JAX's device count is set before the import
    (:func:`~shardscope.cli.launch.start_jax`): a file that builds arrays when imported
    gets the devices asked for. The backend has not started unless the file started it, so a
    count that does not divide the batch is refused before anything else is allocated.
    """
    start_jax(processes, settings)
    from shardscope.sources.examples import batch_size  # imports JAX (about 1 s): not before a typo fails

    with contextlib.redirect_stdout(sys.stderr):
        demo_file = load_demo_file(settings.path)
    demo_fn = demo_file.get(settings.function)
    settings = settings.for_demo(demo_fn.default_mesh)
    if targets:
        from shardscope.targets.plans import settings_on_targets

        settings = settings_on_targets(settings, targets)
    if len(settings.mesh.names) == 1:  # a 1-D mesh splits the batch over every device
        # the hint lists every count that works
        check_device_count(settings.mesh.devices, batch_size(demo_fn.spec.x))
    else:
        check_device_count(settings.mesh.devices)
    request_devices(settings.mesh.devices)  # a demo's own mesh may need more than were asked for
    return LoadedDemo(demo_file, settings)


def spawn_on_demo_mesh(loaded: LoadedDemo, demo: DemoOptions, processes: ProcessOptions) -> int:
    """``--processes P``: the command in P workers, on the mesh this process settled on.

    A worker sets its device count before it imports the file, so it cannot read the demo's own
    mesh first: when the user gave no ``--mesh``, the workers are given this one.
    """
    argv = list(processes.worker_argv)
    if demo.mesh is None:
        argv = with_options(argv, "--mesh", loaded.settings.mesh.text())
    return spawn_workers(replace(processes, worker_argv=tuple(argv)), loaded.settings,
                         _batch(loaded.demo_file, loaded.settings))


def analyse(loaded: LoadedDemo, measure: bool, targets: "Sequence[TargetDevices]" = ()) -> Analysis:
    """The analysis of the loaded demo (timed when ``measure``; compiled for each of ``targets``
    too); what the demo prints while it is traced goes to stderr, off the report and the diff."""
    from shardscope.pipeline.run import analyze  # imports JAX (about 1 s): not for --help

    ensure_devices(loaded.settings.mesh.devices)
    with contextlib.redirect_stdout(sys.stderr):
        return analyze(loaded.settings, loaded=loaded.demo_file, measure=measure, graphs=False, targets=targets)


def _batch(demo_file: DemoFile, settings: Settings) -> int | None:
    """The demo's batch N, which the device counts a refusal suggests must split (None: not known)."""
    from shardscope.sources.examples import batch_size  # imports JAX (about 1 s)

    try:
        return batch_size(demo_file.get(settings.function).spec.x)
    except ShardscopeError:
        return None
