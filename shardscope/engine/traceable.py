"""Any callable as a program JAX traces: what ``inspect``, ``check`` and the pipeline call ``.trace`` on.

A ``jax.jit`` object and flax's ``nnx.jit`` function trace as they are. Anything else (a plain
function, a ``functools.partial``, a bound method, equinox's ``eqx.filter_jit`` wrapper) is
wrapped in ``jax.jit``: when every leaf of its arguments is one ``jax.jit`` takes (arrays,
``jax.ShapeDtypeStruct``s, Python numbers) as it is; otherwise the leaves that are not arrays
(an equinox model's activation function, a flag) are held static, as ``eqx.filter_jit`` holds
them, and the jitted program takes the array leaves alone, in flattening order. The same goes
for what it returns: the leaves of the result that are not arrays or numbers (a returned equinox
model's activation function, a string) are not values of the program and become ``None`` (an
empty subtree), so the outputs are the arrays, named by their paths in the result.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeGuard

from shardscope.engine.pytree_paths import argument_names

if TYPE_CHECKING:
    from jax.stages import Traced


class Jitted(Protocol):
    """A program JAX traces: a ``jax.jit`` object, flax's ``nnx.jit`` function, anything with ``.trace``."""

    def trace(self, *args: object, **kwargs: object) -> "Traced": ...


def is_jitted(fn: object) -> TypeGuard[Jitted]:
    """True for a function that traces itself (``jax.jit``, ``nnx.jit``): it has ``.trace``."""
    return hasattr(fn, "trace")


@dataclass(frozen=True)
class Traceable:
    """``function.trace(*args, **kwargs)`` traces the program; ``input_names`` name the leaves
    of ``(args, kwargs)`` after the program's own parameters (``params['W']``, ``model.layers[0]``).
    ``eager`` is the same program not jitted (what a step of dispatches runs as written; None
    for a program that is jitted itself)."""

    function: Jitted  # the user's function, jitted by jax.jit or flax's nnx.jit
    args: tuple
    kwargs: dict
    input_names: tuple[str, ...]
    eager: Callable | None = None


def traceable(fn: Callable, args: tuple, kwargs: dict) -> Traceable:
    """``fn`` on ``(args, kwargs)`` as something with ``.trace`` (see the module docstring)."""
    import jax

    names = tuple(argument_names(fn, args, kwargs))
    if is_jitted(fn):
        return Traceable(fn, args, kwargs, names)
    leaves, treedef = jax.tree.flatten((args, kwargs))
    if all(_jit_takes(leaf) for leaf in leaves):
        eager = _returning_values(fn)
        return Traceable(jax.jit(eager), args, kwargs, names, eager)
    dynamic = [k for k, leaf in enumerate(leaves) if _is_array(leaf)]

    def program(*values: object) -> Any:  # the user's result's pytree: any structure
        full = list(leaves)
        for k, value in zip(dynamic, values):
            full[k] = value
        call_args, call_kwargs = jax.tree.unflatten(treedef, full)
        return _values_of(fn(*call_args, **call_kwargs))

    program.__name__ = getattr(fn, "__name__", type(fn).__name__)
    program.__qualname__ = program.__name__
    kept = tuple(names[k] for k in dynamic) if len(names) == len(leaves) else ()
    return Traceable(jax.jit(program), tuple(leaves[k] for k in dynamic), {}, kept, program)


def _returning_values(fn: Callable) -> Callable:
    """``fn`` returning its result's values alone (:func:`_values_of`), with ``fn``'s name and
    signature (``jax.jit`` reads both)."""

    @functools.wraps(fn)
    def program(*args: object, **kwargs: object) -> Any:  # the user's result's pytree: any structure
        return _values_of(fn(*args, **kwargs))

    program.__name__ = getattr(fn, "__name__", type(fn).__name__)
    program.__qualname__ = getattr(fn, "__qualname__", program.__name__)
    return program


def _values_of(result: Any) -> Any:  # the user's result's pytree: any structure
    """``result`` with each leaf ``jax.jit`` cannot return (a function, a string, any static
    field of a returned module) replaced by ``None``: the tree keeps the arrays' paths."""
    import jax

    return jax.tree.map(lambda leaf: leaf if _jit_takes(leaf) else None, result)


def _is_array(leaf: object) -> bool:
    """An array or a shape standing for one: a dynamic argument of the traced program."""
    import jax
    import numpy as np

    return isinstance(leaf, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


def _jit_takes(leaf: object) -> bool:
    """True for a leaf ``jax.jit`` takes as an argument: an array, a shape, a Python number."""
    return _is_array(leaf) or (isinstance(leaf, numbers.Number) and not isinstance(leaf, type))
