"""Pytree paths as the views print them: ``params['layers']['wq']``, ``out[0]``, ``W``."""

from __future__ import annotations


def tail(name: str) -> str:
    """A path without its root: ``params['layers']['wq']`` -> ``['layers']['wq']`` (``""`` for a
    bare name). A gradient returned as ``jax.grad`` made it has its argument's path under
    another root (``out['layers']['wq']``)."""
    cut = name.find("[")
    return name[cut:] if cut > 0 else ""
