"""Pytree paths as the views print them: ``params['layers']['wq']``, ``out[0]``, ``W``."""

from __future__ import annotations

import inspect as _pyinspect
from typing import Any, Callable


def tail(name: str) -> str:
    """A path without its root: ``params['layers']['wq']`` -> ``['layers']['wq']`` (``""`` for a
    bare name). A gradient returned as ``jax.grad`` made it has its argument's path under
    another root (``out['layers']['wq']``)."""
    cut = name.find("[")
    return name[cut:] if cut > 0 else ""


def pytree_names(tree: Any, prefix: str) -> list[str]:  # Any: a user's pytree
    """``prefix['W'][0]`` for every leaf of ``tree``, in flattening order."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [prefix + jax.tree_util.keystr(path) for path, _ in leaves]


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """The leaves of ``(args, kwargs)`` named after ``fn``'s parameters, as jit flattens them."""
    try:
        params = [
            p.name for p in _pyinspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    names = []
    for i, arg in enumerate(args):
        names += pytree_names(arg, params[i] if i < len(params) else f"args[{i}]")
    for key in sorted(kwargs):
        names += pytree_names(kwargs[key], key)
    return names
