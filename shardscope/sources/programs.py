"""Program files: any program JAX traces, marked with :func:`program`.

A program file is a plain Python module, like a demo file; ``@shardscope.program(args=...,
kwargs=...)`` records the example arguments (pytrees of ``jax.ShapeDtypeStruct`` or arrays) that
``shardscope check`` and :func:`shardscope.inspect` trace the function with. It marks any
callable: a function, a ``jax.jit`` object, an ``nnx.jit`` function, an ``eqx.filter_jit``
wrapper (above or below it), a ``functools.partial``, a bound method. The CPU device count is
set before the file is imported, so a module-level ``jax.make_mesh`` or ``Mesh`` works.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from shardscope.errors import DemoFileError, SettingsError
from shardscope.sources.marks import listed_name, marked_once

if TYPE_CHECKING:
    from types import ModuleType

_MARK = "__shardscope_program__"
_MARKED: dict[int, tuple[Callable[[], object], "ProgramSpec"]] = {}
"""The marks of callables that take no attribute (a bound method, a frozen ``eqx.filter_jit``
wrapper), by ``id``, each with a reference to its callable: a weak one where the callable takes
one, whose end drops the mark (a file imported again, as the app's ``r`` does, marks new
callables; holding the old ones kept their objects and example arguments alive), else the
callable itself, so its id names it for as long as the mark lives."""
_WRAPPED_DEPTH = 8


@dataclass(frozen=True)
class ProgramSpec:
    """What :func:`program` records: the example positional and keyword arguments."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


def program(*, args: Any = (), kwargs: dict | None = None) -> Callable:  # a user's pytree of example arguments
    """Mark ``fn`` (any callable JAX traces) as a program ``shardscope check`` analyses with these
    arguments; ``fn`` itself is returned, unchanged."""
    spec = ProgramSpec(tuple(args) if isinstance(args, (tuple, list)) else (args,), dict(kwargs or {}))

    def mark(fn: Callable) -> Callable:
        try:
            setattr(fn, _MARK, spec)
        except (AttributeError, TypeError):  # a bound method; a frozen dataclass (FrozenInstanceError)
            _MARKED[id(fn)] = (_reference(fn), spec)
        return fn

    return mark


def _reference(fn: Callable) -> Callable[[], object]:
    """A weak reference to ``fn`` that drops its mark when ``fn`` ends; a strong one (a function
    returning ``fn``) for a callable that cannot be weakly referenced."""
    key, marked = id(fn), _MARKED  # the dict itself: the callback may run as the interpreter exits

    def drop_mark(_: object) -> None:
        marked.pop(key, None)

    try:
        return weakref.ref(fn, drop_mark)
    except TypeError:
        return lambda: fn


def spec_of(value: object) -> "ProgramSpec | None":
    """The :class:`ProgramSpec` ``value`` was marked with, itself or a function it wraps
    (``__wrapped__``: ``@eqx.filter_jit`` over ``@shardscope.program``), else None."""
    for _ in range(_WRAPPED_DEPTH):
        spec = getattr(value, _MARK, None) if not isinstance(value, type) else None
        if isinstance(spec, ProgramSpec):
            return spec
        held = _MARKED.get(id(value))
        if held is not None and held[0]() is value:
            return held[1]
        value = getattr(value, "__wrapped__", None)
        if value is None:
            return None
    return None


@dataclass(frozen=True)
class ProgramFunction:
    """One marked function of a program file with its example arguments."""

    name: str
    fn: Callable
    spec: ProgramSpec
    aliases: tuple[str, ...] = ()  # the file's other names for the same function (:mod:`shardscope.sources.marks`)

    @property
    def description(self) -> str:
        """The first line of the function's docstring (empty without one)."""
        return (getattr(self.fn, "__doc__", None) or "").strip().split("\n")[0]


CLI_DEBUG = "`shardscope check FILE --debug` shows JAX's whole error"
"""Where a program's trace error says the whole of JAX's error is (in the CLI and the app)."""


@dataclass(frozen=True)
class ProgramFile:
    """The program functions of one file, in the order they were defined (the app's panes)."""

    path: Path
    functions: dict[str, ProgramFunction]
    fingerprint: str
    description: str = ""  # the first line of the module's docstring

    @property
    def names(self) -> list[str]:
        """The program names, in file order."""
        return list(self.functions)


def program_functions(module: ModuleType) -> dict[str, ProgramFunction]:
    """The functions of ``module`` marked with :func:`program`, in definition order, each once
    (:func:`~shardscope.sources.marks.marked_once`)."""
    return {name: ProgramFunction(name, fn, spec, aliases) for name, fn, spec, aliases in marked_once(module, spec_of)}


def pick(functions: dict[str, Any], name: str | None, path: Path) -> list[Any]:
    """All of ``functions``, or the one called ``name`` (or aliased so: the same function)."""
    if name is None:
        return list(functions.values())
    listed = listed_name(functions, name)
    if listed is None:
        raise SettingsError(f"{path.name} has no program or demo function {name!r}.",
                            f"available: {', '.join(functions)}")
    return [functions[listed]]


def no_program_error(path: Path) -> DemoFileError:
    """The error for a file with neither programs nor demos."""
    return DemoFileError(
        f"{path} has no function marked @shardscope.program or @shardscope.demo.",
        "mark your step function with @shardscope.program(args=(...)) and example arguments "
        "(jax.ShapeDtypeStruct or arrays)",
    )
