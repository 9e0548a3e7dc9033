"""Layout files: a function marked with :func:`layouts` builds the user's step for any mesh.

``@shardscope.layouts(axes=("data", "fsdp", "tensor"), options={"per_device_batch": [1, 2, 4, 8]})``
on ``def build(mesh, per_device_batch): ... return step, args`` says how the program is made for a
``jax.sharding.Mesh`` of those axes (and each named option's value): ``shardscope layouts FILE
--target tpu:v5e:16x16`` hands it every assignment of the slice's devices to the axes, times the
options, and ranks what the target's compiler makes of each. Nothing else in the user's code
changes. The mark is a plain value: importing this module imports no JAX.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from shardscope.config.mesh import is_axis_name
from shardscope.errors import DemoFileError
from shardscope.sources.marks import marked_once

if TYPE_CHECKING:
    from types import ModuleType

    import jax

_MARK = "__shardscope_layouts__"
AXIS_TYPES = ("Auto", "Explicit")
"""The mesh axis types a layouts function may ask for (``jax.sharding.AxisType``'s names)."""
UNITS = ("tokens", "examples")
"""What a step's throughput counts."""

PerStep = Callable[..., float]
"""A count per step from the mesh and the options: ``lambda mesh, per_device_batch: ...``."""


@dataclass(frozen=True)
class LayoutSpec:
    """What :func:`layouts` records: the mesh ``axes`` (in the order the mesh has them), each
    option's values in order, each axis's type, and what one step processes: ``per_step`` (a
    count of ``unit``, from the mesh and the options; None: unknown) and ``model_flops`` per
    ``unit`` (a number or a function like ``per_step``; None: unknown)."""

    axes: tuple[str, ...]
    options: tuple[tuple[str, tuple[object, ...]], ...] = ()
    axis_types: tuple[str, ...] = ()
    per_step: PerStep | None = None
    unit: str = "tokens"
    model_flops: float | PerStep | None = None

    @property
    def option_names(self) -> tuple[str, ...]:
        """The options' names, in the order given."""
        return tuple(name for name, _ in self.options)

    @property
    def explicit(self) -> bool:
        """True when some axis is Explicit (the step is traced under ``jax.set_mesh``)."""
        return "Explicit" in self.axis_types


def layouts(*, axes: Sequence[str], options: Mapping[str, Sequence[object]] | None = None,
            axis_types: object = None, tokens: PerStep | None = None, examples: PerStep | None = None,
            model_flops: float | PerStep | None = None) -> Callable:
    """Mark ``build(mesh, **options) -> (step, args)`` as a program ``shardscope layouts`` ranks.

    ``axes`` names the mesh axes ``build`` shards over; ``shardscope layouts`` tries every
    assignment of the target's devices to them (sizes that multiply to the device count) times
    every combination of ``options`` (``{"per_device_batch": [1, 2, 4, 8]}``: ``build`` takes each
    as a keyword). ``step`` is what JAX traces (a ``jax.jit`` function, or one jitted here) and
    ``args`` its example arguments (``jax.ShapeDtypeStruct`` with shardings over ``mesh``, or
    arrays); a ``build`` that raises (a batch that does not split) is a row saying why.

    The mesh has Auto axes, as most jit code's do; ``axis_types="explicit"`` (or
    ``jax.sharding.AxisType.Explicit``, or one type per axis) asks for Explicit ones, and the
    step is then traced under ``jax.set_mesh(mesh)``. ``tokens`` (or ``examples``) gives how many
    one step processes, from the mesh and the options (``lambda mesh, per_device_batch:
    per_device_batch * mesh.size * 2048``), for the throughput per chip; ``model_flops`` the
    model's flops per token (or example), a number or such a function, for the model flops
    utilization. Returns ``build`` itself, unchanged.
    """
    spec = _spec(axes, options, axis_types, tokens, examples, model_flops)

    def mark(fn: Callable) -> Callable:
        _require_parameters(fn, spec)
        setattr(fn, _MARK, spec)
        return fn

    return mark


def _spec(axes: Sequence[str], options: Mapping[str, Sequence[object]] | None, axis_types: object,
          tokens: PerStep | None, examples: PerStep | None, model_flops: float | PerStep | None) -> LayoutSpec:
    """The decorator's arguments as a :class:`LayoutSpec`; a ``ValueError`` in one line when one
    is not what it should be (raised while the file is imported: the message names its line)."""
    named = tuple(axes) if not isinstance(axes, str) else (axes,)
    if not named or not all(isinstance(a, str) and is_axis_name(a) for a in named) or len(set(named)) < len(named):
        raise ValueError(f"axes={axes!r}: give the mesh axes' names, each once, e.g. axes=(\"data\", \"fsdp\", \"tensor\")")
    listed = []
    for name, values in (options or {}).items():
        if not isinstance(name, str) or not name.isidentifier() or name == "mesh":
            raise ValueError(f"option {name!r}: an option is a keyword of the build function (not 'mesh')")
        chosen = tuple(values) if isinstance(values, (list, tuple, range)) else (values,)
        if not chosen:
            raise ValueError(f"option {name!r} has no values: give at least one")
        listed.append((name, chosen))
    if tokens is not None and examples is not None:
        raise ValueError("give tokens= or examples=, not both: a step's throughput counts one of them")
    return LayoutSpec(named, tuple(listed), _axis_types(axis_types, len(named)), tokens or examples,
                      "examples" if examples is not None else "tokens", model_flops)


def _axis_types(given: object, count: int) -> tuple[str, ...]:
    """``"explicit"``, ``AxisType.Explicit`` or one per axis, as ``("Explicit", ...)`` (None: all Auto)."""
    if given is None:
        return ("Auto",) * count
    each = list(given) if isinstance(given, (list, tuple)) else [given] * count
    names = [str(getattr(t, "name", t)).capitalize() for t in each]
    if len(names) != count or any(name not in AXIS_TYPES for name in names):
        raise ValueError(f"axis_types={given!r}: give 'auto' or 'explicit' (or jax.sharding.AxisType), or one per axis")
    return tuple(names)


def _require_parameters(fn: Callable, spec: LayoutSpec) -> None:
    """A ``ValueError`` when ``fn`` cannot be called as ``fn(mesh, **options)``."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or a C callable: called as it is
        return
    try:
        signature.bind(None, **{name: values[0] for name, values in spec.options})
    except TypeError as exc:
        raise ValueError(f"{getattr(fn, '__name__', 'the function')} cannot be called as build(mesh, "
                         f"{', '.join(f'{n}=...' for n in spec.option_names)}): {exc}") from None


def spec_of(value: object) -> LayoutSpec | None:
    """The :class:`LayoutSpec` ``value`` was marked with (None: unmarked)."""
    spec = getattr(value, _MARK, None) if not isinstance(value, type) else None
    return spec if isinstance(spec, LayoutSpec) else None


@dataclass(frozen=True)
class LayoutFunction:
    """One marked function of a file, with its spec and the file's other names for it."""

    name: str
    fn: Callable
    spec: LayoutSpec
    aliases: tuple[str, ...] = ()

    def build(self, mesh: "jax.sharding.Mesh", options: Mapping[str, object]) -> object:
        """``fn(mesh, **options)``: the user's step and example arguments over ``mesh``."""
        return self.fn(mesh, **options)

    def per_step(self, mesh: "jax.sharding.Mesh", options: Mapping[str, object]) -> float | None:
        """What one step over ``mesh`` processes, in the spec's unit (None: not said)."""
        return None if self.spec.per_step is None else float(self.spec.per_step(mesh, **options))

    def model_flops(self, mesh: "jax.sharding.Mesh", options: Mapping[str, object]) -> float | None:
        """The model's flops per unit (None: not said)."""
        flops = self.spec.model_flops
        return None if flops is None else float(flops(mesh, **options) if callable(flops) else flops)


@dataclass(frozen=True)
class LayoutFile:
    """The layouts functions of one file, in the order the file defines them."""

    path: Path
    functions: dict[str, LayoutFunction]
    fingerprint: str


def layout_functions(module: ModuleType) -> dict[str, LayoutFunction]:
    """The functions of ``module`` marked with :func:`layouts`, each once, in definition order."""
    return {name: LayoutFunction(name, fn, spec, aliases) for name, fn, spec, aliases in marked_once(module, spec_of)}


def no_layouts_error(path: Path) -> DemoFileError:
    """The error for a file without a layouts function."""
    return DemoFileError(
        f"{path} has no function marked @shardscope.layouts.",
        "mark a function build(mesh, **options) -> (step, args) with @shardscope.layouts(axes=(\"data\", \"fsdp\"), "
        "options={...})")
