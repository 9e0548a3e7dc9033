"""How a command that reads a file starts, once for ``check``, ``report``, ``sweep``, ``diff`` and
``layouts``: what is refused before JAX starts, in this order (``--on`` or ``--target`` with
``--processes``, FILE and its one message, ``--profile`` with ``--profile-dir``, each
``--target``'s form, size and compiler), then, once the command has checked its own options,
JAX imported quietly and the targets loaded (libtpu's own refusals, before the file loads).

The rest of a command's start is shared as well: the platform of ``--on`` and the compilation
cache (``--no-cache``) are started by :func:`shardscope.cli.main` before any command's JAX;
Ctrl+C and SIGTERM end each command's thread (:func:`~shardscope.distributed.interrupts.run_interruptible`);
a demo's file is loaded after its device count is set (:func:`shardscope.cli.headless.load_demo`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shardscope.cli.options import (CommonOptions, check_profile_options, refuse_on_across_processes,
                                    refuse_targets_across_processes)
from shardscope.sources.bundled import find_file
from shardscope.sources.loading import require_file
from shardscope.targets.host import start_jax_quietly
from shardscope.targets.registry import installed_targets

if TYPE_CHECKING:
    from shardscope.targets.base import Target, TargetDevices
    from shardscope.targets.registry import UnavailableTarget


@dataclass(frozen=True)
class StartUp:
    """What a command knows before its JAX starts: FILE, found (a shipped demo's name resolved)
    and checked to be a file, once; the ``--target`` slices whose compiler is installed and those
    it is not (reported after the others' results)."""

    path: Path
    slices: tuple[Target, ...] = ()
    unavailable: tuple[UnavailableTarget, ...] = ()

    def loaded_targets(self) -> tuple[tuple[TargetDevices, ...], tuple[UnavailableTarget, ...]]:
        """Each slice's devices (libtpu started once) and the targets that could not be compiled
        for: JAX is imported quietly first (the CUDA plugin's start-up lines dropped). Raises the
        refusal when no target is left (:func:`~shardscope.targets.plans.load_available_targets`)."""
        if not self.slices:
            return (), self.unavailable
        start_jax_quietly()
        from shardscope.targets.plans import load_available_targets  # the engine (0.4 s): not for --help

        return load_available_targets(self.slices, self.unavailable)


def start_up(file: Path, common: CommonOptions) -> StartUp:
    """FILE and the shared options checked before JAX starts, each mistake one message (exit 2)."""
    refuse_on_across_processes(common.on, common.processes)
    path = require_file(find_file(file))  # FILE may name a shipped demo
    check_profile_options(common.profile, common.profile_dir)
    slices, unavailable = installed_targets(common.targets)  # a slice too large, libtpu missing
    refuse_targets_across_processes(slices, common.processes)
    return StartUp(path, slices, unavailable)
