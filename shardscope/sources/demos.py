"""Demo files: plain Python modules whose functions are marked with :func:`demo`.

A demo function is ``f(params, x) -> y``: ``params`` is replicated over the mesh unless
``param_specs`` shards some leaves (FSDP), the leading axis of every leaf of ``x`` and ``y`` is
the batch ``N`` that is sharded and chunked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from shardscope.errors import SettingsError
from shardscope.config.mesh import Mesh, is_axis_name
from shardscope.sources.marks import listed_name, marked_once

if TYPE_CHECKING:
    from types import ModuleType

_MARK = "__shardscope_demo__"


@dataclass(frozen=True)
class DemoSpec:
    """What :func:`demo` records: example ``params`` and ``x`` (pytrees of arrays or shapes)."""

    params: Any  # a user's pytree: any leaves
    x: Any  # a user's pytree: any leaves
    seed: int = 0
    description: str = ""
    param_specs: Any = None  # a pytree of PartitionSpec like params
    mesh: Mesh | None = None


def demo(*, params: Any, x: Any, seed: int = 0, description: str = "", param_specs: Any = None,  # a user's pytrees
         mesh: str | Mesh | None = None) -> Callable:
    """Mark ``f(params, x)`` as a function shardscope can analyse.

    ``params`` and ``x`` are pytrees of ``jax.ShapeDtypeStruct`` or concrete arrays; the leading
    axis of every leaf of ``x`` is the batch. Shapes are filled with reproducible random values
    drawn from ``seed`` (complex dtypes get random real and imaginary parts). ``param_specs`` is
    a pytree of ``jax.sharding.PartitionSpec`` matching ``params`` (default: every leaf
    replicated); a leaf split over a mesh axis enters ``shard_map`` sharded (FSDP / ZeRO-3) and
    each plan gathers it where the model needs it whole. ``mesh`` (``"data=4"``,
    ``"data=4,model=2"``) is the mesh the demo runs on when the user gives none (``--mesh``,
    ``--devices``, ``--axis``); without it, a demo whose ``param_specs`` name mesh axes gets
    one derived from them (:func:`derived_mesh`), any other the default ``s=2``.
    """
    demo_mesh = _demo_mesh(mesh)

    def mark(fn: Callable) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        spec = DemoSpec(params=params, x=x, seed=seed, description=doc, param_specs=param_specs, mesh=demo_mesh)
        setattr(fn, _MARK, spec)
        return fn

    return mark


def _demo_mesh(mesh: str | Mesh | None) -> Mesh | None:
    """``@shardscope.demo(mesh=...)`` as a :class:`Mesh`; a ``ValueError`` in one line when it is not one
    (raised while the file is imported: the message names the file's line)."""
    if mesh is None or isinstance(mesh, Mesh):
        return mesh
    try:
        return Mesh.parse(str(mesh))
    except SettingsError as exc:
        raise ValueError(f"mesh={mesh!r} is not a mesh: {exc.message} Write it as name=size pairs, "
                         "e.g. mesh=\"data=4\" or mesh=\"data=4,model=2\".") from None


def derived_mesh(params: Any, param_specs: Any) -> Mesh | None:  # a user's pytrees
    """A mesh with every axis ``param_specs`` names, for a demo that gives no ``mesh``; else None.

    Each axis gets size 2 (the default device count), or 1 where 2 does not divide a dimension
    it splits: the demo then opens on a mesh its parameters fit, not on one without their axes.
    """
    import jax
    from jax.sharding import PartitionSpec

    if param_specs is None:
        return None
    is_spec = lambda s: isinstance(s, PartitionSpec)  # noqa: E731
    try:
        specs = jax.tree.map(lambda _, spec: spec, params, param_specs, is_leaf=is_spec)
    except (TypeError, ValueError):
        return None  # a structure mismatch: the plans say so in words
    sizes: dict[str, int] = {}
    for leaf, spec in zip(jax.tree.leaves(params), jax.tree.leaves(specs, is_leaf=is_spec)):
        if not is_spec(spec):
            return None  # not a PartitionSpec: the plans say so in words
        shape = tuple(getattr(leaf, "shape", ()))
        for dim, entry in enumerate(spec):
            axes = () if entry is None else tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)
            for axis in axes:
                sizes.setdefault(axis, 2)
            if dim < len(shape) and axes and shape[dim] % 2 ** len(axes):
                sizes.update({axis: 1 for axis in axes})
    if not sizes or not all(is_axis_name(axis) for axis in sizes):
        return None
    return Mesh(tuple(sizes.items()))


@dataclass(frozen=True)
class DemoFunction:
    """One function found in a demo file, with its recorded example inputs."""

    name: str
    fn: Callable
    spec: DemoSpec
    aliases: tuple[str, ...] = ()  # the file's other names for the same function (:mod:`shardscope.sources.marks`)

    @property
    def description(self) -> str:
        """What the demo computes, in one line (``@shardscope.demo(description=...)`` or its docstring)."""
        return self.spec.description

    @property
    def default_mesh(self) -> Mesh | None:
        """The mesh this demo runs on when the user gives none: its ``mesh``, or one derived from
        its ``param_specs``; None for the default ``s=2``."""
        return self.spec.mesh or derived_mesh(self.spec.params, self.spec.param_specs)


@dataclass(frozen=True)
class DemoFile:
    """The demo functions of one file, in the order they were defined."""

    path: Path
    functions: dict[str, DemoFunction]
    fingerprint: str

    @property
    def names(self) -> list[str]:
        """The function names a user can pick, in file order."""
        return list(self.functions)

    def get(self, name: str | None) -> DemoFunction:
        """The demo called ``name`` (the first one when ``name`` is None)."""
        if name is None:
            return next(iter(self.functions.values()))
        listed = listed_name(self.functions, name)
        if listed is None:
            raise SettingsError(
                f"{self.path.name} has no demo function {name!r}.",
                f"available: {', '.join(self.names)}",
            )
        return self.functions[listed]


def carried_over(name: str | None, old_names: list[str], new_names: list[str]) -> str | None:
    """The function to keep after a demo file was reloaded.

    ``name`` if the file still has it; else, when it was renamed on disk, the function now in its
    place (a rename keeps the position); else None (the first demo).
    """
    if name is None or name in new_names:
        return name
    if name in old_names and old_names.index(name) < len(new_names):
        return new_names[old_names.index(name)]
    return None


def demo_functions(module: ModuleType) -> dict[str, DemoFunction]:
    """The functions of ``module`` marked with :func:`demo`, in definition order, each once
    (:func:`~shardscope.sources.marks.marked_once`)."""
    return {name: DemoFunction(name, fn, spec, aliases) for name, fn, spec, aliases in marked_once(module, _spec_of)}


def _spec_of(value: object) -> DemoSpec | None:
    """The :class:`DemoSpec` ``value`` was marked with (None: unmarked)."""
    spec = getattr(value, _MARK, None)
    return spec if isinstance(spec, DemoSpec) else None


