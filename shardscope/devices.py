"""The CPU device count is fixed when JAX's backend starts: set it before anything else.

shardscope analyses on simulated CPU devices, so the backend JAX starts is the CPU's unless the
user chose platforms (``JAX_PLATFORMS``): with libtpu installed (the ``tpu`` extra) JAX would
otherwise try a TPU first, and libtpu's start-up prints warnings on a machine without one.
Compiling for a TPU target does not need JAX's TPU backend (:mod:`shardscope.pipeline.targets`).
"""

from __future__ import annotations

from shardscope.errors import SettingsError


def ensure_devices(count: int, needed: int | None = None) -> int:
    """Make ``count`` devices available if JAX has not started yet; return how many there are.

    Before the backend starts this sets ``jax_num_cpu_devices`` (and ``jax_platforms`` to the CPU
    where the user set none); afterwards it can only check.
    Raises unless at least ``needed`` (default ``count``) are there: asking for more than
    needed (so that a count which does not divide the batch can be told what would) must not
    refuse a run that has enough.
    """
    import jax
    from jax._src import xla_bridge

    started_before = xla_bridge.backends_are_initialized()
    if not started_before:
        if not jax.config.jax_platforms:
            jax.config.update("jax_platforms", "cpu")
        current = jax.config.jax_num_cpu_devices
        if current is None or current < count:
            jax.config.update("jax_num_cpu_devices", count)
    available = len(jax.devices())
    needed = count if needed is None else needed
    if available < needed:
        raise SettingsError(
            f"{needed} devices asked for, but JAX started with {available}"
            + (" before shardscope could set the count (did the file create an array or list the "
               "devices when imported?)." if started_before else "."),
            f"use --devices {available} or fewer; make example inputs jax.ShapeDtypeStruct, not arrays, "
            "so that the demo file does not start JAX when imported",
        )
    return available
