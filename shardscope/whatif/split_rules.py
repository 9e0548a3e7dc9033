"""How each first-order primitive runs on values split over devices: the rules of
:mod:`shardscope.whatif.per_device`, one per primitive (a registry, as jax's own rules are).

A rule takes the equation and the layouts its operands come in and gives a :class:`Step`: the
results' layouts, the operands to cut to the device's block (or gather whole) first, the axes a
result is each device's part of a sum (or max) over, and the parameters that hold shapes at the
device's sizes. What a rule cannot split raises :class:`NotSplit`, with the user's line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from shardscope.engine.jaxpr.model import equation_source, short_source
from shardscope.whatif.deferral import Unsupported

if TYPE_CHECKING:
    from jax.extend.core import JaxprEqn, Literal, Var
    from jax.sharding import PartitionSpec

Axes = frozenset[str]
Layout = tuple[Axes, ...]
"""Per dimension of a value, the mesh axes it is split over (empty: the device holds it whole)."""

WHOLE: Axes = frozenset()

ELEMENTWISE = frozenset({
    "neg", "sign", "floor", "ceil", "round", "is_finite", "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt",
    "abs", "not", "imag", "real", "conj", "erf", "erfc", "erf_inv", "lgamma", "digamma", "integer_pow", "square",
    "convert_element_type", "reduce_precision", "copy", "copy_p", "population_count", "clz", "bessel_i0e",
    "bessel_i1e", "add", "add_any", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "nextafter", "and",
    "or", "xor", "eq", "ne", "lt", "le", "gt", "ge", "shift_left", "shift_right_logical", "shift_right_arithmetic",
    "complex", "select_n", "clamp", "stop_gradient", "pvary", "igamma", "igammac", "random_gamma_grad", "polygamma",
    "zeta", "regularized_incomplete_beta", "one_minus_square", "log2", "mulhi",
})
"""Primitives that work element by element on operands of one shape (scalars broadcast)."""

CUMULATIVE = frozenset({"cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"})
RESHARDS = frozenset({"sharding_constraint", "reshard"})
_PER_DEVICE_REDUCTIONS = {"reduce_sum": "add", "reduce_max": "max", "reduce_min": "min"}
"""Reductions over a split dimension, and how the devices' parts combine (``add``: a sum over
devices, ``psum``; ``max``: ``pmax``)."""


@dataclass(frozen=True)
class Step:
    """How one equation runs on each device's blocks.

    ``operands``: per operand, ``(layout it comes in, layout the equation takes)`` where they
    differ (a whole value cut to the block, a split one gathered); ``results``: the results'
    layouts; ``summed``: the axes its results are each device's part over, which combine by
    ``combiner`` (``add``: a sum over devices; ``max``, ``min``); ``local``: parameters that
    hold shapes, at the device's sizes.
    """

    results: tuple[Layout, ...]
    operands: Mapping[int, tuple[Layout, Layout]] = field(default_factory=dict)
    summed: Axes = WHOLE
    combiner: str = ""
    local: Mapping[str, Any] = field(default_factory=dict)



class Splitting(Protocol):
    """What a rule reads of the walk: the mesh axes' sizes and the values known to be zeros."""

    sizes: Mapping[str, int]
    zeros: set["Var"]


def layout_of_spec(spec: "PartitionSpec | None", ndim: int) -> Layout:
    """The layout a ``PartitionSpec`` gives a value of ``ndim`` dimensions."""
    entries = tuple(getattr(spec, "partitions", spec or ()))
    return tuple(_names(entries[d]) if d < len(entries) else WHOLE for d in range(ndim))


def local_shape(shape: Sequence[int], layout: Layout, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A value's shape on one device."""
    return tuple(n // _count(axes, sizes) for n, axes in zip(shape, layout))


def is_split(layout: Layout) -> bool:
    return any(layout)


# --------------------------------------------------------------------------- the rules


Rule = Callable[[Splitting, "JaxprEqn", list[Layout]], Step]


def elementwise(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Operands of one shape (scalars aside, and dimensions of size 1 that broadcast) split
    alike: a whole one is cut to the block."""
    shape = _shape(eqn.outvars[0])
    shaped = [k for k, v in enumerate(eqn.invars) if _shape(v)]
    out = join(eqn, [ins[k] for k in shaped])
    wanted = [tuple(WHOLE if n == 1 and shape[d] != 1 else out[d] for d, n in enumerate(_shape(eqn.invars[k])))
              for k in shaped]
    return Step(tuple(out for _ in eqn.outvars), converted([ins[k] for k in shaped], wanted, 0, shaped))


def _broadcast_in_dim(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    shape, dims = eqn.params["shape"], eqn.params["broadcast_dimensions"]
    operand = _shape(eqn.invars[0])
    out = [WHOLE] * len(shape)
    for k, d in enumerate(dims):
        if ins[0][k] and operand[k] == shape[d]:
            out[d] = ins[0][k]
    layout = tuple(out)
    return Step((layout,), local={"shape": local_shape(shape, layout, walker.sizes), "sharding": None})


def _reshape(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Dimensions kept, split into parts or merged; a split dimension's devices go to the part
    that holds them (see the module: the innermost part they divide when it is split)."""
    if eqn.params.get("dimensions") is not None:
        raise not_split(eqn, "a reshape that transposes a split value")
    before, after = _shape(eqn.invars[0]), tuple(eqn.params["new_sizes"])
    out = [WHOLE] * len(after)
    for ins_group, outs_group in _reshape_groups(before, after):
        split = [d for d in ins_group if ins[0][d]]
        if not split:
            continue
        axes = ins[0][split[0]]
        count = _count(axes, walker.sizes)
        if len(split) > 1 or (len(ins_group) > 1 and len(outs_group) > 1):
            raise not_split(eqn, f"a reshape of {before} to {after} regroups dimensions split over {axes_text(ins)}")
        if len(ins_group) > 1:  # parts merged: the split part's devices split the merged dimension
            out[outs_group[0]] = axes
            continue
        parts = [d for d in outs_group if after[d] % count == 0 and after[d] > 1]
        if not parts:
            raise not_split(eqn, f"a reshape of {before} to {after}: no part of the dimension split over "
                                    f"{axes_text(ins)} is divided by its {count} devices")
        out[parts[-1]] = axes
    layout = tuple(out)
    return Step((layout,), local={"new_sizes": local_shape(after, layout, walker.sizes), "sharding": None})


def _reduce(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """A reduction over split dimensions leaves each device its part: a sum's part is summed over
    the devices, a max's maxed. The other dimensions stay split."""
    reduced = set(eqn.params["axes"])
    name = eqn.primitive.name
    over = frozenset().union(*(ins[0][d] for d in reduced))
    if over and name not in _PER_DEVICE_REDUCTIONS:
        raise not_split(eqn, f"a {name} over a dimension split over {axes_text(ins)}")
    layout = tuple(a for d, a in enumerate(ins[0]) if d not in reduced)
    return Step(tuple(layout for _ in eqn.outvars), summed=over, combiner=_PER_DEVICE_REDUCTIONS.get(name, "")
                if over else "")


def _dot_general(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Contracted dimensions split alike on both sides are summed over their axes (a whole side
    is cut to the blocks the other holds, unless it is split over those axes elsewhere: then
    the split side is gathered whole, as FSDP gathers a weight for a batch split over the same
    axis); batch dimensions are split alike; the free ones keep their split."""
    (lhs_c, rhs_c), (lhs_b, rhs_b) = eqn.params["dimension_numbers"]
    lhs, rhs = list(ins[0]), list(ins[1])
    for l, r in zip(lhs_c, rhs_c):
        if lhs[l] and not rhs[r] and lhs[l] & frozenset().union(*rhs):
            lhs[l] = WHOLE
        elif rhs[r] and not lhs[l] and rhs[r] & frozenset().union(*lhs):
            rhs[r] = WHOLE
    summed: set[str] = set()
    for pairs, is_sum in (((lhs_c, rhs_c), True), ((lhs_b, rhs_b), False)):
        for l, r in zip(*pairs):
            axes = join(eqn, [(lhs[l],), (rhs[r],)])[0]
            lhs[l] = rhs[r] = axes
            if is_sum:
                summed |= axes
    lhs_free = [d for d in range(len(lhs)) if d not in lhs_c and d not in lhs_b]
    rhs_free = [d for d in range(len(rhs)) if d not in rhs_c and d not in rhs_b]
    taken = frozenset().union(*lhs, summed)
    for d in rhs_free:  # a weight's output features split over the batch's axis: gathered
        if rhs[d] & taken:
            rhs[d] = WHOLE
    layout = tuple([lhs[d] for d in lhs_b] + [lhs[d] for d in lhs_free] + [rhs[d] for d in rhs_free])
    used = [a for axes in layout for a in axes] + sorted(summed)
    if len(used) != len(set(used)):
        raise not_split(eqn, "a dot_general whose result would be split twice over one mesh axis")
    wanted = [tuple(lhs), tuple(rhs)]
    return Step((layout,), converted(ins[:2], wanted), summed=frozenset(summed), combiner="add" if summed else "")


def _transpose(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    return Step((tuple(ins[0][d] for d in eqn.params["permutation"]),))


def _squeeze(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    dropped = {d % len(ins[0]) for d in eqn.params["dimensions"]}
    return Step((tuple(a for d, a in enumerate(ins[0]) if d not in dropped),))


def _expand_dims(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    out = list(ins[0])
    for d in sorted(eqn.params["dimensions"]):
        out.insert(d, WHOLE)
    return Step((tuple(out),))


def _along(param: str) -> Rule:
    """A primitive that works along one dimension (``param``): elementwise elsewhere, and that
    dimension must be whole."""

    def rule(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
        value = eqn.params[param]
        dims = set(value) if isinstance(value, (tuple, list)) else {value}
        step = elementwise(walker, eqn, ins)
        if any(step.results[0][d % len(step.results[0])] for d in dims):
            raise not_split(eqn, f"a {eqn.primitive.name} along a dimension split over {axes_text(ins)}")
        return step

    return rule


def _slice(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    shape = _shape(eqn.invars[0])
    starts, limits = eqn.params["start_indices"], eqn.params["limit_indices"]
    strides = eqn.params.get("strides") or (1,) * len(shape)
    for d, axes in enumerate(ins[0]):
        if axes and (starts[d], limits[d], strides[d]) != (0, shape[d], 1):
            raise not_split(eqn, f"a slice of a dimension split over {axes_text(ins)}")
    return Step((ins[0],), local={"limit_indices": local_shape(limits, ins[0], walker.sizes)})


def _dynamic_slice(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    shape, sizes = _shape(eqn.invars[0]), eqn.params["slice_sizes"]
    if any(is_split(layout) for layout in ins[1:]):
        raise not_split(eqn, "a dynamic_slice at offsets split over devices")
    for d, axes in enumerate(ins[0]):
        if axes and sizes[d] != shape[d]:
            raise not_split(eqn, f"a dynamic_slice of a dimension split over {axes_text(ins)}")
    return Step((ins[0],), local={"slice_sizes": local_shape(sizes, ins[0], walker.sizes)})


def _dynamic_update_slice(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    shape, update = _shape(eqn.invars[0]), _shape(eqn.invars[1])
    if any(is_split(layout) for layout in ins[2:]):
        raise not_split(eqn, "a dynamic_update_slice at offsets split over devices")
    out = join(eqn, ins[:2])
    if any(axes and update[d] != shape[d] for d, axes in enumerate(out)):
        raise not_split(eqn, f"a dynamic_update_slice into a dimension split over {axes_text(ins)}")
    return Step((out,), converted(ins[:2], [out, out]))


def _concatenate(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    out = join(eqn, ins)
    if out[eqn.params["dimension"]]:
        raise not_split(eqn, f"a concatenate along a dimension split over {axes_text(ins)}")
    return Step((out,), converted(ins, [out] * len(ins)))


def _pad(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    for axes, (low, high, interior) in zip(ins[0], eqn.params["padding_config"]):
        if axes and (low, high, interior) != (0, 0, 0):
            raise not_split(eqn, f"a pad of a dimension split over {axes_text(ins)}")
    if is_split(ins[1]):
        raise not_split(eqn, "a pad whose padding value is split over devices")
    return Step((ins[0],))


def _reshard(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """``with_sharding_constraint``/``reshard``: the value split as its spec says from here on."""
    sharding = eqn.params.get("sharding") or eqn.params.get("dst_sharding")
    spec = getattr(sharding, "spec", sharding)
    out = layout_of_spec(spec, len(ins[0])) if spec is not None else ins[0]
    return Step((out,), converted(ins[:1], [out]))


def _gather(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Rows of a whole table looked up at indices split over devices (an embedding): the result's
    batch dimensions are split as the indices' are."""
    numbers = eqn.params["dimension_numbers"]
    operand, indices = ins[0], ins[1]
    if is_split(operand) or indices[-1] or len(getattr(numbers, "operand_batching_dims", ())):
        raise not_split(eqn, f"a gather from a value split over {axes_text(ins)}")
    shape = _shape(eqn.outvars[0])
    batch = iter(indices[:-1])
    layout = tuple(WHOLE if d in numbers.offset_dims else next(batch) for d in range(len(shape)))
    return Step((layout,))


def _scatter_add(walker: Splitting, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Rows added into a whole zero table at indices split over devices (an embedding's
    gradient): each device adds its own rows, the table is its part of a sum over devices."""
    numbers = eqn.params["dimension_numbers"]
    operand, indices, updates = ins[0], ins[1], ins[2]
    if is_split(operand) or indices[-1] or len(getattr(numbers, "operand_batching_dims", ())):
        raise not_split(eqn, f"a scatter-add into a value split over {axes_text(ins)}")
    if eqn.invars[0] not in walker.zeros:
        raise not_split(eqn, "a scatter-add of rows split over devices into a value that is not zeros")
    scattered = [updates[d] for d in range(len(updates)) if d not in numbers.update_window_dims]
    if any(updates[d] for d in numbers.update_window_dims) or join(eqn, [indices[:-1], tuple(scattered)]) != indices[:-1]:
        raise not_split(eqn, f"a scatter-add whose updates are split otherwise than its indices over {axes_text(ins)}")
    return Step((operand,), summed=frozenset().union(*indices), combiner="add")


RULES: dict[str, Rule] = {
    "broadcast_in_dim": _broadcast_in_dim, "reshape": _reshape, "dot_general": _dot_general,
    "reduce_sum": _reduce, "reduce_max": _reduce, "reduce_min": _reduce, "reduce_prod": _reduce,
    "reduce_and": _reduce, "reduce_or": _reduce, "reduce_xor": _reduce, "argmax": _reduce, "argmin": _reduce,
    "transpose": _transpose, "squeeze": _squeeze, "expand_dims": _expand_dims, "slice": _slice,
    "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice, "concatenate": _concatenate,
    "pad": _pad, "gather": _gather, "scatter-add": _scatter_add, "scatter_add": _scatter_add,
    "rev": _along("dimensions"), "sort": _along("dimension"), "split": _along("axis"),
    **{name: _along("axis") for name in CUMULATIVE}, **{name: _reshard for name in RESHARDS},
}
"""The rule of each primitive that is not elementwise (:data:`ELEMENTWISE`, :func:`elementwise`)."""


# --------------------------------------------------------------------------- helpers


def join(eqn: "JaxprEqn", layouts: Sequence[Layout]) -> Layout:
    """The layout operands of one shape take together: each dimension split as any of them
    splits it (two splits over other axes, or one axis on two dimensions, cannot be joined)."""
    if not layouts:
        return ()
    out = []
    for dims in zip(*layouts):
        found = {axes for axes in dims if axes}
        if len(found) > 1:
            raise not_split(eqn, f"operands of a {eqn.primitive.name} are split over different mesh axes")
        out.append(found.pop() if found else WHOLE)
    used = [a for axes in out for a in axes]
    if len(used) != len(set(used)):
        raise not_split(eqn, f"operands of a {eqn.primitive.name} are split over one mesh axis on different dimensions")
    return tuple(out)


def converted(has: Sequence[Layout], wants: Sequence[Layout], offset: int = 0,
               positions: Sequence[int] | None = None) -> dict[int, tuple[Layout, Layout]]:
    """The operands whose layout changes before the equation: ``{operand position: (has, wants)}``."""
    where = list(positions) if positions is not None else [offset + k for k in range(len(has))]
    return {p: (h, w) for p, h, w in zip(where, has, wants) if h != w}


def _reshape_groups(before: Sequence[int], after: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """The dimensions of a reshape (those of size 1 left out: they hold no split) grouped so that
    each group's sizes multiply alike on both sides."""
    ins = [d for d, n in enumerate(before) if n != 1]
    outs = [d for d, n in enumerate(after) if n != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(ins) and j < len(outs):
        group = ([ins[i]], [outs[j]])
        left, right = before[ins[i]], after[outs[j]]
        i, j = i + 1, j + 1
        while left != right:
            if left < right:
                group[0].append(ins[i])
                left *= before[ins[i]]
                i += 1
            else:
                group[1].append(outs[j])
                right *= after[outs[j]]
                j += 1
        groups.append(group)
    return groups


def is_zeros(eqn: "JaxprEqn") -> bool:
    """True for ``jnp.zeros``/``zeros_like``: a broadcast of a literal zero."""
    from jax.extend.core import Literal

    if eqn.primitive.name != "broadcast_in_dim" or not isinstance(eqn.invars[0], Literal):
        return False
    try:
        return bool(np.all(np.asarray(eqn.invars[0].val) == 0))
    except (TypeError, ValueError):
        return False


def _count(axes: Axes, sizes: Mapping[str, int]) -> int:
    return prod(sizes[a] for a in axes)


def _shape(atom: "Var | Literal") -> tuple[int, ...]:
    return tuple(getattr(atom.aval, "shape", ()))  # jax types an aval as AbstractValue; an array's has a shape


def whole(aval: object) -> Layout:
    return (WHOLE,) * len(getattr(aval, "shape", ()))


def _names(entry: object) -> Axes:
    if entry is None:
        return WHOLE
    return frozenset(map(str, entry)) if isinstance(entry, (tuple, list)) else frozenset({str(entry)})


def axes_text(layouts: Sequence[Layout]) -> str:
    axes = sorted({a for layout in layouts for dims in layout for a in dims})
    return ", ".join(repr(a) for a in axes) or "no axis"


class NotSplit(Unsupported):
    """What the per-device reading cannot split (``what``), at the user's line (``where``)."""

    def __init__(self, what: str, where: str) -> None:
        super().__init__(f"{what} (at {where})" if where else what)
        self.what = what
        self.where = where


def not_split(eqn: "JaxprEqn", what: str) -> NotSplit:
    return NotSplit(what, short_source(equation_source(eqn, own=True)))
