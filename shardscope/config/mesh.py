"""A mesh as a value: named axes with sizes (``data=4,model=2``), and the axes the batch splits over.

Pure Python (no JAX): the CLI parses it, the sidebar edits it, the core builds a ``jax.sharding.Mesh``
from it. ``--devices N --axis s`` is the shorthand for the 1-D mesh ``s=N``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from shardscope.errors import SettingsError


@dataclass(frozen=True)
class Mesh:
    """Named mesh axes with their sizes, in order (the last axis varies fastest over devices)."""

    axes: tuple[tuple[str, int], ...]

    @classmethod
    def one_axis(cls, name: str, size: int) -> "Mesh":
        """The 1-D mesh ``name=size``."""
        return cls(((name, size),))

    @classmethod
    def parse(cls, text: str) -> "Mesh":
        """``data=4,model=2`` (or ``data=4 model=2``); raises :class:`SettingsError` with a hint."""
        hint = "write the mesh as name=size pairs, e.g. data=4,model=2"
        parts = [p for p in text.replace(" ", ",").split(",") if p]
        if not parts:
            raise SettingsError("The mesh is empty.", hint)
        axes = []
        for part in parts:
            name, sep, size = part.partition("=")
            name, size = name.strip(), size.strip()
            if not sep or not is_axis_name(name):
                raise SettingsError(f"{part!r} is not an axis: expected name=size.", hint)
            if not size.isdigit() or int(size) < 1:
                raise SettingsError(f"The size of mesh axis {name!r} must be a whole number >= 1, not {size!r}.", hint)
            axes.append((name, int(size)))
        names = [n for n, _ in axes]
        if len(set(names)) != len(names):
            raise SettingsError(f"The mesh names an axis twice: {text!r}.", "give every axis its own name")
        return cls(tuple(axes))

    @property
    def names(self) -> tuple[str, ...]:
        """The axis names, in order."""
        return tuple(n for n, _ in self.axes)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The axis sizes, in order."""
        return tuple(s for _, s in self.axes)

    @property
    def devices(self) -> int:
        """How many devices the mesh has: the product of its axis sizes."""
        return prod(self.sizes)

    def size_of(self, names: tuple[str, ...]) -> int:
        """The product of the sizes of the axes ``names`` (1 for none)."""
        sizes = dict(self.axes)
        return prod(sizes[n] for n in names)

    def check_axes(self, names: tuple[str, ...], what: str) -> tuple[str, ...]:
        """``names`` in mesh order, or :class:`SettingsError` when one is not an axis of the mesh."""
        unknown = [n for n in names if n not in self.names]
        if unknown:
            raise SettingsError(
                f"{what} names {', '.join(map(repr, unknown))}, which the mesh {self.text()} does not have.",
                f"pick from the mesh's axes: {', '.join(self.names)}",
            )
        return tuple(n for n in self.names if n in names)

    def text(self) -> str:
        """``data=4,model=2``: the form :meth:`parse` reads."""
        return ",".join(f"{n}={s}" for n, s in self.axes)

    def __str__(self) -> str:
        return self.text()


def parse_axes(text: str) -> tuple[str, ...]:
    """``data,model`` -> ``("data", "model")``; raises :class:`SettingsError` for a bad name."""
    names = tuple(p.strip() for p in text.replace(" ", ",").split(",") if p.strip())
    bad = [n for n in names if not is_axis_name(n)]
    if bad or not names:
        raise SettingsError(f"{text!r} is not a list of axis names.", "write axis names separated by commas, e.g. data")
    return names


def is_axis_name(name: str) -> bool:
    """An ASCII Python identifier: XLA aborts the whole process on a non-ASCII axis name (``ñ``)."""
    return name.isascii() and name.isidentifier()
