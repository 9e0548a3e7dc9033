"""Sums the partitioner writes, seen in the jaxpr of a program with Explicit axes; and an Auto
program traced again as one with Explicit axes.

With Explicit axes every value's type says how it is sharded (``f32[32@data,16]``), so the
sums the partitioner will write are visible: a ``dot_general`` that contracts a dimension
sharded over ``data`` into a result that is not sharded (nor unreduced) over it is an
all-reduce over ``data`` (:func:`implicit_sums`); the deferral leaves its result unreduced.

With Auto axes the types say nothing, and there is nothing to leave unreduced: jit with Auto
axes cannot be told "accumulate unreduced". :func:`as_explicit` traces the program again on
the same devices with every mesh axis Explicit, the arguments sharded as the compiled program
takes them: what a user who switches to Explicit axes (``jax.make_mesh(...,
axis_types=(AxisType.Explicit, ...))``, ``jax.set_mesh``) writes. Where a contraction over a
sharded dimension is ambiguous there, it is given the result Auto's partitioner gives it (the
free dimensions' shardings, summed over the contracted axes). Where JAX refuses the program
with Explicit axes (a scan over a sharded leading axis, an ambiguous sharding), the reason is
JAX's own, said in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, cast

from shardscope.whatif.deferral import EquationIndex, Unsupported
from shardscope.whatif.retrace import Edits, Retracer, bind, exception_text

if TYPE_CHECKING:
    import jax
    from jax.core import ShapedArray
    from jax.extend.core import ClosedJaxpr, JaxprEqn
    from jax.sharding import Mesh, NamedSharding

Axes = frozenset[str]
SpecEntry = str | tuple[str, ...] | None  # one dimension's entry of a PartitionSpec


# --------------------------------------------------------------------------- the sums in the jaxpr


def contracted_axes(eqn: "JaxprEqn", avals: list | None = None) -> Axes:
    """The mesh axes a ``dot_general`` (or ``reduce_sum``) sums over: those sharding a
    contracted (reduced) dimension of an operand and missing from its result's sharding."""
    avals = avals if avals is not None else [v.aval for v in eqn.invars]
    name = eqn.primitive.name
    if name == "dot_general":
        (lhs_c, rhs_c), _ = eqn.params["dimension_numbers"]
        summed = _axes_at(avals[0], lhs_c) | _axes_at(avals[1], rhs_c)
    elif name == "reduce_sum":
        summed = _axes_at(avals[0], eqn.params["axes"])
    else:
        return frozenset()
    out = cast("ShapedArray", eqn.outvars[0].aval)  # jax types an aval as AbstractValue; an output's is a ShapedArray
    kept = _axes_at(out, range(len(out.shape))) | frozenset(_spec(out).unreduced)
    return summed - kept


def implicit_sums(index: EquationIndex, inside: str) -> dict[str, Axes]:
    """The equations inside the loop ``inside`` (at any depth) whose results the partitioner
    sums over mesh axes: ``{equation id: axes}``."""
    found = {}
    for eqn_id in index.ids():
        if not (eqn_id.startswith(inside + "/") or eqn_id.startswith(inside + ".")):
            continue
        axes = contracted_axes(index.equation(eqn_id))
        if axes:
            found[eqn_id] = axes
    return found


def _spec(aval: object) -> "jax.sharding.PartitionSpec":
    from jax.sharding import PartitionSpec

    sharding = getattr(aval, "sharding", None)
    return getattr(sharding, "spec", None) or PartitionSpec()


def _axes_at(aval: object, dims: Iterable[int]) -> Axes:
    """The mesh axes sharding ``aval``'s dimensions ``dims``."""
    spec = tuple(_spec(aval).partitions)
    found: set[str] = set()
    for d in dims:
        entry = spec[d] if d < len(spec) else None
        if entry is None:
            continue
        found |= set(entry) if isinstance(entry, (tuple, list)) else {entry}
    return frozenset(found)


# --------------------------------------------------------------------------- Auto -> Explicit


@dataclass(frozen=True)
class ExplicitProgram:
    """An Auto program traced again with Explicit axes: ``function`` takes the original's flat
    arguments placed by ``place`` (on ``mesh``), ``traced`` is its trace."""

    function: Callable[..., Any]
    mesh: "Mesh"
    shardings: tuple["NamedSharding", ...]
    traced: "jax.stages.Traced"

    def place(self, leaves: list) -> list:
        """The original's flat arguments on the Explicit mesh (the same devices and layout)."""
        import jax

        return [jax.device_put(x, s) for x, s in zip(leaves, self.shardings)]

    def arguments(self, leaves: list) -> list:
        """``leaves`` as ``ShapeDtypeStruct``s sharded on the Explicit mesh (what to trace with)."""
        import jax

        return [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s) for x, s in zip(leaves, self.shardings)]


def explicit_mesh(mesh: "Mesh") -> "Mesh":
    """``mesh`` with every axis Explicit: the same devices in the same places."""
    from jax.sharding import AxisType, Mesh

    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Explicit,) * len(mesh.axis_names))


def as_explicit(closed: "ClosedJaxpr", mesh: "Mesh", input_shardings: list, leaves: list) -> ExplicitProgram:
    """The Auto program ``closed`` traced again on ``explicit_mesh(mesh)`` with its flat
    arguments ``leaves`` sharded as ``input_shardings`` say; raises :class:`Unsupported` with JAX's
    reason when it does not trace there."""
    import jax
    from jax.sharding import NamedSharding

    target = explicit_mesh(mesh)
    shardings = tuple(NamedSharding(target, s.spec) if hasattr(s, "spec") else NamedSharding(target, _replicated())
                      for s in input_shardings)
    retracer = Retracer(Edits(), target.abstract_mesh, rules={"dot_general": _summed_dot, "sharding_constraint": _reshard})

    def function(*flat: object) -> list:
        return retracer.run(closed, flat)

    jitted = jax.jit(function)
    program = ExplicitProgram(jitted, target, shardings, None)  # type: ignore[arg-type]
    try:
        with jax.set_mesh(target):
            traced = jitted.trace(*program.arguments(leaves))
    except Exception as exc:  # JAX refuses the program with Explicit axes: its reason is the answer
        raise Unsupported(f"with Explicit axes JAX does not trace this program: {exception_text(exc)}") from exc
    return ExplicitProgram(jitted, target, shardings, traced)


def _replicated() -> "jax.sharding.PartitionSpec":
    from jax.sharding import PartitionSpec

    return PartitionSpec()


def _summed_dot(eqn: "JaxprEqn", eqn_id: str, invals: list, params: Mapping[str, Any]) -> list:
    """A ``dot_general`` with Explicit axes, sharded as Auto's partitioner shards it: a
    contracted dimension sharded alike on both sides is summed over its axes (the result
    replicated over them); one sharded on one side only is gathered first (FSDP's weights);
    the result is sharded as its free dimensions are, each axis on the first that has it."""
    from jax._src import core
    from jax.sharding import NamedSharding, PartitionSpec

    (lhs_c, rhs_c), (lhs_b, rhs_b) = params["dimension_numbers"]
    specs = [_padded(core.typeof(v)) for v in invals]
    gathered: list[dict[int, SpecEntry]] = [{}, {}]
    summed: set[str] = set()
    for l, r in zip(lhs_c, rhs_c):
        left, right = _names(specs[0][l]), _names(specs[1][r])
        summed |= left & right
        if left != right:
            gathered[0][l], gathered[1][r] = _keep(specs[0][l], left & right), _keep(specs[1][r], left & right)
    operands = [_gather(v, spec, cut) if cut else v for v, spec, cut in zip(invals, specs, gathered)]
    specs = [_padded(core.typeof(v)) for v in operands]
    lhs, rhs = specs
    lhs_free = [d for d in range(len(lhs)) if d not in lhs_c and d not in lhs_b]
    rhs_free = [d for d in range(len(rhs)) if d not in rhs_c and d not in rhs_b]
    entries = [lhs[d] for d in lhs_b] + [lhs[d] for d in lhs_free] + [rhs[d] for d in rhs_free]
    used: set[str] = set(summed)
    kept = []
    for entry in entries:  # an axis shards one result dimension at most: the first one keeps it
        kept.append(_without(entry, frozenset(used)))
        used |= _names(kept[-1])
    if not summed and not any(gathered) and kept == [_without(e, frozenset()) for e in entries]:
        return bind(eqn, operands, params)
    mesh = core.typeof(operands[0]).sharding.mesh
    return bind(eqn, operands, {**params, "out_sharding": NamedSharding(mesh, PartitionSpec(*kept))})


def _padded(aval: ShapedArray) -> tuple:
    spec = tuple(_spec(aval).partitions)
    return spec + (None,) * (len(aval.shape) - len(spec))


def _keep(entry: SpecEntry, names: set[str]) -> SpecEntry:
    """A spec entry with only ``names`` left."""
    return _without(entry, frozenset(_names(entry) - names))


def _gather(value: jax.Array, spec: tuple, cut: dict[int, SpecEntry]) -> jax.Array:
    """``value`` resharded with the dimensions in ``cut`` sharded only as ``cut`` says."""
    import jax
    from jax._src import core
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = core.typeof(value).sharding
    entries = [cut.get(d, entry) for d, entry in enumerate(spec)]
    return jax.sharding.reshard(value, NamedSharding(sharding.mesh, PartitionSpec(*entries)))


def _reshard(eqn: "JaxprEqn", eqn_id: str, invals: list, params: Mapping[str, Any]) -> list:
    """``with_sharding_constraint`` with Explicit axes: a ``jax.reshard`` to the same spec."""
    import jax

    return [jax.sharding.reshard(invals[0], params["sharding"].spec)]


def _names(entry: SpecEntry) -> set[str]:
    if entry is None:
        return set()
    return set(entry) if isinstance(entry, (tuple, list)) else {entry}


def _without(entry: SpecEntry, axes: Axes) -> SpecEntry:
    """A spec entry without ``axes`` (None when nothing is left)."""
    if entry is None:
        return None
    names = tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)
    kept = tuple(n for n in names if n not in axes)
    return None if not kept else (kept[0] if len(kept) == 1 else kept)

