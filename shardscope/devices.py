"""The CPU device count is fixed when JAX's backend starts: set it before anything else."""

from __future__ import annotations

from shardscope.errors import SettingsError


def ensure_devices(count: int) -> int:
    """Make at least ``count`` devices available and return how many there are.

    Before the backend starts this sets ``jax_num_cpu_devices``; afterwards it can only check.
    """
    import jax
    from jax._src import xla_bridge

    started_before = xla_bridge.backends_are_initialized()
    if not started_before:
        current = jax.config.jax_num_cpu_devices
        if current is None or current < count:
            jax.config.update("jax_num_cpu_devices", count)
    available = len(jax.devices())
    if available < count:
        raise SettingsError(
            f"{count} devices asked for, but JAX started with {available}"
            + (" before shardscope could set the count (did the demo file create an array when imported?)."
               if started_before else "."),
            f"use --devices {available} or fewer; make example inputs jax.ShapeDtypeStruct, not arrays, "
            "so that the demo file does not start JAX when imported",
        )
    return available
