"""The CPU device count is fixed when JAX's backend starts: set it before anything else.

A demo or program file may start the backend when it is imported (every flax and equinox model
builds its parameters at import, and so does a ``jnp`` array of example inputs), so the count is
set before the file is imported: :func:`request_devices` sets it without starting the backend,
and :func:`ensure_devices` also checks how many there are.

shardscope analyses on simulated CPU devices, so the backend JAX starts is the CPU's unless the
user chose platforms (:mod:`shardscope.targets.platforms`: ``--on``, ``JAX_PLATFORMS``): with
libtpu installed (the ``tpu`` extra) JAX would otherwise try a TPU first, and libtpu's start-up
prints warnings on a machine without one; on a TPU VM it would open the chip. Compiling for a
TPU target does not need JAX's TPU backend (:mod:`shardscope.targets.compile`).

A platform the user chose other than the CPU has no device count to set: its backend starts at
once, so that a platform this machine lacks is one message before the user's file is imported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from typing import Iterator

from shardscope.errors import SettingsError
from shardscope.native_stderr import stderr_caught
from shardscope.targets.platforms import (jax_platforms, platform_choice, refuse_absent_platform,
                                         refuse_other_started_backend, runs_on_chips, start_chosen_backend)

_PLUGIN_NOISE = ("cudart_stub.cc", "All log messages before absl::InitializeLog() is called")
"""What JAX's CUDA plugin (the gpu extra) prints on a machine without CUDA while its libraries
load: once per library at ``import jax``, once more when JAX registers the plugin."""


def request_devices(count: int) -> bool:
    """Ask JAX for at least ``count`` CPU devices (on the CPU backend, unless the user chose
    platforms), without starting its backend.

    Returns False when the backend has already started (the count can no longer change).
    """
    if not start_jax_quietly():
        return False
    import jax

    current = jax.config.jax_num_cpu_devices  # type: ignore[attr-defined]  # jax.config's options are dynamic attributes
    if current is None or current < count:
        jax.config.update("jax_num_cpu_devices", count)
    return True


def ensure_devices(count: int, needed: int | None = None) -> int:
    """Make ``count`` devices available if JAX has not started yet; return how many there are.

    Before the backend starts this sets ``jax_num_cpu_devices``; afterwards it can only check.
    Raises unless at least ``needed`` (default ``count``) are there: asking for more than
    needed (so that a count which does not divide the batch can be told what would) must not
    refuse a run that has enough.
    """
    set_here = request_devices(count)  # JAX imported quietly first (the app's worker reaches here before any import)
    import jax

    from shardscope.engine.compile_log import note_host_threads, threads_now  # not at import: the CLI's parser stays light

    choice = platform_choice()
    if not set_here and choice is not None:
        refuse_other_started_backend(choice)
    before = threads_now() if set_here and (choice is None or choice.cpu_only) else None
    available = len(jax.devices())
    if before is not None:  # the CPU's backend started here: its threads are the host compiler's
        note_host_threads(before)
    needed = count if needed is None else needed
    if available < needed and choice is not None and not choice.cpu_only:
        kind, plural = jax.devices()[0].device_kind, "s" if available != 1 else ""
        raise SettingsError(
            f"{needed} devices asked for, but {choice.said} runs on this machine's {available} x {kind}.",
            f"use --devices {available} or fewer (a --mesh of at most {available} device{plural}), or {choice.way_out}")
    if available < needed:
        raise SettingsError(
            f"{needed} devices asked for, but JAX started with {available}"
            + (" before shardscope could set the count (something set jax_num_cpu_devices, or started "
               "JAX's backend, before shardscope did)." if not set_here else "."),
            f"use --devices {available} or fewer; leave the CPU device count to shardscope "
            "(do not set jax_num_cpu_devices in the file)",
        )
    return available


def devices_needed(max_devices: int, mesh_devices: int) -> int:
    """The devices a run cannot do without: the explorer starts ``max_devices`` simulated CPU
    devices for the meshes its sidebar offers, but on chips (``--on tpu``) only the mesh's own
    ``mesh_devices`` must be there."""
    return mesh_devices if runs_on_chips() else max_devices


def start_jax_quietly() -> bool:
    """``import jax`` with its platforms set to the CPU's (unless the user chose some) and its
    plugins registered, with the CUDA plugin's start-up lines dropped. The CPU's backend is not
    started; a platform the user chose is (:class:`SettingsError` when it cannot start here).
    Returns False when the backend has started (the CPU device count can no longer change)."""
    with plugin_lines_dropped():
        import jax
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            return False
        choice = platform_choice()  # read before the update below: JAX's own TPU-VM default is no choice
        platforms = jax_platforms()
        if choice is not None and not choice.cpu_only:
            refuse_absent_platform(choice)
        if jax.config.jax_platforms != platforms:  # type: ignore[attr-defined]  # jax.config's options are dynamic attributes
            jax.config.update("jax_platforms", platforms)  # before the plugins register: CUDA's skips its CUDA check then
        if hasattr(xla_bridge, "_discover_and_register_pjrt_plugins"):
            xla_bridge._discover_and_register_pjrt_plugins()  # their libraries load here, not at the backend's start
    if choice is not None and not choice.cpu_only:
        start_chosen_backend(choice)
        return False
    return True


@contextlib.contextmanager
def plugin_lines_dropped(loading: bool = False) -> Iterator[None]:
    """File descriptor 2 through a file while JAX loads its plugins (at ``import jax``, or,
    ``loading``, while shardscope loads the CUDA plugin from its own folder); every line written
    there is written back but the CUDA plugin's own "no CUDA here" lines (C++ logging, which no
    Python setting silences). Nothing is caught when the plugin is not installed."""
    try:
        cuda = loading or importlib.util.find_spec("jax_cuda12_plugin") is not None
    except (ImportError, ValueError):
        cuda = False
    if not cuda or ("jax" in sys.modules and not loading):
        yield
        return
    lines: list[str] = []
    try:
        with stderr_caught() as lines:
            yield
    finally:
        kept = "".join(line for line in lines if not any(noise in line for noise in _PLUGIN_NOISE))
        if kept:
            os.write(2, kept.encode())
