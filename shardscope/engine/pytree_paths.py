"""Pytree paths as the views print them: ``params['layers']['wq']``, ``out[0]``, ``W``."""

from __future__ import annotations

import functools
import inspect as _pyinspect
import re
from typing import Any, Callable, Iterable


def tail(name: str) -> str:
    """A path without its root: ``params['layers']['wq']`` -> ``['layers']['wq']`` (``""`` for a
    bare name). A gradient returned as ``jax.grad`` made it has its argument's path under
    another root (``out['layers']['wq']``)."""
    cut = name.find("[")
    return name[cut:] if cut > 0 else ""


def path_root(name: str) -> str:
    """The argument a path starts at: ``params`` of ``params['W1']``, ``model`` of
    ``model.hidden.kernel``, ``W`` of ``W``."""
    return re.split(r"[\[.]", name.strip(), maxsplit=1)[0]


def listed(labels: Iterable[str]) -> str:
    """``a``, ``a, b, c``, or ``a, b and 3 more``: each label once, empty ones left out (how every
    view names the several values one collective carries)."""
    unique = list(dict.fromkeys(label for label in labels if label))
    return ", ".join(unique) if len(unique) <= 3 else f"{unique[0]}, {unique[1]} and {len(unique) - 2} more"


_GRADIENT = ("grad(", ")")


def gradient_label(argument: str) -> str:
    """How every view names the gradient of the argument leaf ``argument``: ``grad(params['W1'])``,
    ``grad(W)`` for a bare argument. A value that is no gradient is named by its own path."""
    return f"{_GRADIENT[0]}{argument}{_GRADIENT[1]}"


def is_gradient_label(label: str) -> bool:
    """True for a label :func:`gradient_label` made (``grad(params['W1'])``)."""
    start, end = _GRADIENT
    return label.startswith(start) and label.endswith(end)


def labelled_argument(label: str) -> str:
    """The argument a value's label names: ``params['W1']`` of ``grad(params['W1'])`` (what a fix
    casts, what a user's ``allow`` names); any other label as it is."""
    start, end = _GRADIENT
    return label[len(start):-len(end)] if label.startswith(start) and label.endswith(end) else label


def is_source_line(label: str) -> bool:
    """True for the label of a value no program path names: the user's line that made it
    (``train.py:37 (loss)``), where a path (``params['W1']``, ``grad(W)``) names one."""
    return _SOURCE_LINE.fullmatch(label) is not None


_SOURCE_LINE = re.compile(r"[^\s\[(]+:\d+( \(.*\))?")


def told_apart_by_outputs(candidates: Iterable[str], reached: Iterable[str]) -> set[str]:
    """The candidate labels a value's outputs point at: one line made several values (the layers of
    a Python loop, ``q, k, v``), and the program outputs the value reaches (the updated parameter,
    an optimizer's moments: ``out[0][2]['b']``, ``out[1][0].mu[2]['b']``) end with the path of the
    one it is, under another root. Only candidates with a path below their root are told apart.

    Each output is looked up by its path's tails (a candidate's tail starts at a ``[``, so an
    output ends with it only from one of its own ``[``): a Python loop of 3,000 layers asks this
    for each of its 3,000 gradients, of the same 3,000 candidates, which are indexed once."""
    by_tail = _labels_by_tail(candidates if isinstance(candidates, frozenset) else frozenset(candidates))
    found: set[str] = set()
    for output in reached:
        path = labelled_argument(output)
        start = path.find("[")
        while start >= 0:
            found.update(by_tail.get(path[start:], ()))
            start = path.find("[", start + 1)
    return found


@functools.lru_cache(maxsize=64)
def _labels_by_tail(candidates: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """The candidates by the tail of the argument each names (those with a path below their root)."""
    found: dict[str, list[str]] = {}
    for label in candidates:
        end = tail(labelled_argument(label))
        if end:
            found.setdefault(end, []).append(label)
    return {end: tuple(labels) for end, labels in found.items()}


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
