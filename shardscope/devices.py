"""The CPU device count is fixed when JAX's backend starts: set it before anything else."""

from __future__ import annotations

from shardscope.errors import SettingsError


def ensure_devices(count: int, needed: int | None = None) -> int:
    """Make ``count`` devices available if JAX has not started yet; return how many there are.

    Before the backend starts this sets ``jax_num_cpu_devices``; afterwards it can only check.
    Raises unless at least ``needed`` (default ``count``) are there: asking for more than
    needed (so that a count which does not divide the batch can be told what would) must not
    refuse a run that has enough.
    """
    import jax
    from jax._src import xla_bridge

    started_before = xla_bridge.backends_are_initialized()
    if not started_before:
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
