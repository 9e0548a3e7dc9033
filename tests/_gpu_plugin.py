"""Whether the GPU-target tests can run here: JAX's CUDA plugin in shardscope's own folder or on
the path. Kept apart from :mod:`_hidden_compilers`, which a child process loads at its start (it
must import neither JAX nor pytest there)."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

import pytest


def gpu_plugin_installed() -> bool:
    """JAX's CUDA plugin of this jax's version, in shardscope's own folder (``make``'s quiet route)
    or on the path (the ``gpu`` extra), on Linux x86-64 where it ships: what the GPU-target tests
    need, skipped otherwise."""
    import jax

    from shardscope.targets.compilers import private_versions

    if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
        return False
    try:
        return (private_versions().get("jax-cuda12-plugin") or importlib.metadata.version("jax-cuda12-plugin")
                ) == jax.__version__
    except importlib.metadata.PackageNotFoundError:
        return False


needs_gpu_plugin = pytest.mark.skipif(not gpu_plugin_installed(),
                                      reason="JAX's CUDA plugin (the gpu extra) ships for Linux x86-64: not installed here")
"""The skip of a test that compiles for a GPU target."""

