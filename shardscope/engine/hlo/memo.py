"""Methods whose results are kept by the instance they were computed for.

``functools.lru_cache`` and ``functools.cache`` on a method keep one table for the whole class,
keyed by ``self``: every instance that ever called the method stays alive with everything it holds
(a module's instructions, a program's equations) for as long as the process runs. An app that
analyses again on every ``r``, or a notebook calling ``shardscope.inspect``, then holds every
earlier analysis. :func:`cached_method` keeps the table in the instance instead: it goes with it.
"""

from __future__ import annotations

import functools
from typing import Callable, Concatenate, ParamSpec, TypeVar

_Self = TypeVar("_Self")
_P = ParamSpec("_P")
_R = TypeVar("_R")
_KEYWORDS = object()
"""Parts a key's positional arguments from its keyword arguments (as ``functools.lru_cache``
does): ``f(1, step=2)`` and ``f(1, ("step", 2))`` are two entries."""


def cached_method(method: Callable[Concatenate[_Self, _P], _R]) -> Callable[Concatenate[_Self, _P], _R]:
    """Cache ``method``'s results per instance, by its arguments (positional and keyword, hashable).

    The table lives in the instance's ``__dict__`` under the method's name, so the class needs one
    (no ``__slots__``). A recursive call computes its own entry first, as with ``lru_cache``.
    """
    table_name = f"_cached_{method.__name__}"

    @functools.wraps(method)
    def cached(self: _Self, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        key = (*args, _KEYWORDS, *sorted(kwargs.items())) if kwargs else args
        try:
            return vars(self)[table_name][key]
        except KeyError:  # no table yet, or no entry
            pass
        table: dict[object, _R] = vars(self).setdefault(table_name, {})
        value = table[key] = method(self, *args, **kwargs)
        return value

    return cached
