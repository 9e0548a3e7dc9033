"""The functions a file marks, each once: one function object bound to several names in the file
(``train_step = step``, or ``step = shardscope.program(args=...)(_step)`` beside its ``def``) is
one program or demo, checked and shown once.

It is listed under its first name in the file that does not start with ``_`` (a private name
is the implementation's), else its first; its other names are its ``aliases``, which
``--function`` accepts for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Protocol, TypeVar

if TYPE_CHECKING:
    from types import ModuleType

Mark = TypeVar("Mark")


def marked_once(module: ModuleType, mark_of: Callable[[object], Mark | None]
                ) -> list[tuple[str, Callable, Mark, tuple[str, ...]]]:
    """``(name, function, mark, aliases)`` for each function of ``module`` that ``mark_of``
    finds a mark on (None: unmarked), once per function object, in the order the file first
    binds them."""
    names: dict[int, list[str]] = {}
    found: dict[int, tuple[Callable, Mark]] = {}
    for name, value in vars(module).items():
        mark = mark_of(value) if callable(value) and not isinstance(value, type) else None
        if mark is None:
            continue
        names.setdefault(id(value), []).append(name)
        found[id(value)] = (value, mark)
    listed = []
    for key, bound in names.items():
        name = next((n for n in bound if not n.startswith("_")), bound[0])
        listed.append((name, *found[key], tuple(n for n in bound if n != name)))
    return listed


class Named(Protocol):
    """A marked function with its listed name and aliases."""

    @property
    def name(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...


def listed_name(functions: Mapping[str, Named], name: str) -> str | None:
    """The name ``name`` is listed under: itself, or the function's it is an alias of (None for neither)."""
    if name in functions:
        return name
    return next((f.name for f in functions.values() if name in f.aliases), None)
