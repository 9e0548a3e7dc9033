"""A jit program read as each device runs it: which dimensions of every value are split over
which mesh axes, and where the program sums over devices.

Under ``jax.jit`` a program is written for the whole arrays and the partitioner decides what
each device holds and where it must sum. Inside ``jax.shard_map`` each device runs the same
program on its own block. :func:`per_device` follows a jit program's jaxpr from the shardings
its compiled program takes its arguments in (the batch split over ``data``, the parameters
whole) and says, equation by equation, how the program runs on blocks (a :class:`Step`):

- which dimensions of each result are split (a ``tanh`` of the rows of a batch is split as
  they are; a ``broadcast_in_dim`` or a ``reshape`` carries the split to the dimension that
  holds it, with the local sizes in its parameters);
- which operands must first be cut to the device's block (a whole value added to a split one)
  or gathered whole;
- which results are partial sums over devices: a ``reduce_sum`` over a split dimension, a
  ``dot_general`` that contracts one (the gradient of a replicated weight over a batch split
  over ``data``): the sums the partitioner writes, which the program as each device runs it
  must write itself (or defer: each device accumulates its own part, one ``psum`` after the
  loop); a ``reduce_max`` over a split dimension is a ``pmax``.

Sums keep their meaning: a mean is a ``reduce_sum`` divided by the whole batch's count (a
literal of the jaxpr), so each device's part of it, summed over the devices, is the mean.

A ``reshape`` that splits a dimension split over devices (``[B] -> [MICRO, B/MICRO]``) is
written as a user writes it inside ``shard_map`` (``x.reshape(MICRO, -1, ...)`` on each device's
rows): the split goes to the innermost part that the devices divide, so every device runs every
micro-batch on its own rows. The rows a micro-batch holds then differ from the original's; a
sum over all micro-batches of a loss that is a sum over rows does not change, and the rewrite's
output check says whether it did. Anything this does not know how to split raises
:class:`~shardscope.whatif.deferral.Unsupported` with the equation's line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from shardscope.engine.jaxpr.model import equation_source, open_jaxpr, scan_operand_groups, short_source
from shardscope.whatif.deferral import Unsupported
from shardscope.whatif.retrace import block_id_of, equation_ids

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
    from jax.sharding import PartitionSpec

Axes = frozenset[str]
Layout = tuple[Axes, ...]
"""Per dimension of a value, the mesh axes it is split over (empty: the device holds it whole)."""

_WHOLE: Axes = frozenset()

ELEMENTWISE = frozenset({
    "neg", "sign", "floor", "ceil", "round", "is_finite", "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt",
    "abs", "not", "imag", "real", "conj", "erf", "erfc", "erf_inv", "lgamma", "digamma", "integer_pow", "square",
    "convert_element_type", "reduce_precision", "copy", "copy_p", "population_count", "clz", "bessel_i0e",
    "bessel_i1e", "add", "add_any", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "nextafter", "and",
    "or", "xor", "eq", "ne", "lt", "le", "gt", "ge", "shift_left", "shift_right_logical", "shift_right_arithmetic",
    "complex", "select_n", "clamp", "stop_gradient", "pvary", "igamma", "igammac", "random_gamma_grad", "polygamma",
    "zeta", "regularized_incomplete_beta", "one_minus_square", "log2", "mulhi", "tan", "exp2",
})
"""Primitives that work element by element on operands of one shape (scalars broadcast)."""

CUMULATIVE = frozenset({"cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"})
RESHARDS = frozenset({"sharding_constraint", "reshard"})
CALLS = frozenset({"pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
                   "custom_vjp_call_jaxpr", "remat", "checkpoint", "remat2"})
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
    summed: Axes = _WHOLE
    combiner: str = ""
    local: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class PerDevice:
    """A program as each device runs it: every equation's :class:`Step` by id (as
    :mod:`shardscope.engine.jaxpr.model` names them), the layouts of its inputs and outputs,
    and the sizes of the mesh axes."""

    steps: dict[str, Step]
    inputs: tuple[Layout, ...]
    outputs: tuple[Layout, ...]
    sizes: Mapping[str, int]
    split_vars: dict["Var", Axes] = field(default_factory=dict)

    def split(self, var: "Var") -> Axes:
        """The mesh axes ``var`` is split over somewhere in the program (where a jaxpr is called
        from several places, over any of them): its value differs between those devices."""
        return self.split_vars.get(var, _WHOLE)

    def sums(self) -> dict[str, Axes]:
        """The equations whose results are each device's part of a sum over devices: ``{id: axes}``."""
        return {eqn_id: s.summed for eqn_id, s in self.steps.items() if s.summed and s.combiner == "add"}


def per_device(closed: "ClosedJaxpr", inputs: Sequence[Layout], sizes: Mapping[str, int]) -> PerDevice:
    """The :class:`PerDevice` reading of ``closed`` whose flat inputs come split as ``inputs``
    say, on a mesh of axes of ``sizes``; raises :class:`Unsupported` with the line of what it
    cannot split."""
    walker = _Walker(sizes)
    consts = [_whole(v.aval) for v in closed.jaxpr.constvars]
    outs = walker.block(closed.jaxpr, consts + list(inputs), "")
    return PerDevice(walker.steps, tuple(inputs), tuple(outs), dict(sizes), walker.split_vars)


def layout_of_spec(spec: "PartitionSpec | None", ndim: int) -> Layout:
    """The layout a ``PartitionSpec`` gives a value of ``ndim`` dimensions."""
    entries = tuple(getattr(spec, "partitions", spec or ()))
    return tuple(_names(entries[d]) if d < len(entries) else _WHOLE for d in range(ndim))


def spec_of_layout(layout: Layout, order: Iterable[str]) -> "PartitionSpec":
    """The ``PartitionSpec`` of a layout; the axes of one dimension in ``order`` (the mesh's)."""
    from jax.sharding import PartitionSpec

    entries: list = []
    for axes in layout:
        named = tuple(a for a in order if a in axes)
        entries.append(None if not named else (named[0] if len(named) == 1 else named))
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries)


def local_shape(shape: Sequence[int], layout: Layout, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A value's shape on one device."""
    return tuple(n // _count(axes, sizes) for n, axes in zip(shape, layout))


def is_split(layout: Layout) -> bool:
    return any(layout)


# --------------------------------------------------------------------------- the walk


class _Walker:
    def __init__(self, sizes: Mapping[str, int]) -> None:
        self.sizes = sizes
        self.steps: dict[str, Step] = {}
        self.split_vars: dict[Var, Axes] = {}
        self.zeros: set[Var] = set()  # values broadcast from a literal zero (a scatter-add's start)

    def block(self, jaxpr: "Jaxpr", layouts: list[Layout], block_id: str) -> list[Layout]:
        """The layouts of ``jaxpr``'s outputs from its inputs' (constvars first)."""
        from jax.extend.core import Literal

        env: dict[Var, Layout] = {}

        def write(var: "Var", layout: Layout) -> None:
            env[var] = layout
            self.split_vars[var] = self.split_vars.get(var, _WHOLE).union(*layout)

        def read(atom: "Var | Literal") -> Layout:
            return _whole(atom.aval) if isinstance(atom, Literal) else env[atom]

        for var, layout in zip(list(jaxpr.constvars) + list(jaxpr.invars), layouts, strict=True):
            write(var, layout)
        for eqn, eqn_id in zip(jaxpr.eqns, equation_ids(jaxpr, block_id)):
            step = self.equation(eqn, eqn_id, [read(v) for v in eqn.invars])
            self.steps[eqn_id] = step
            if _is_zeros(eqn):
                self.zeros.add(eqn.outvars[0])
            for var, layout in zip(eqn.outvars, step.results, strict=True):
                write(var, layout)
        return [read(v) for v in jaxpr.outvars]

    def equation(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Layout]) -> Step:
        name = eqn.primitive.name
        if name == "scan":
            return self._scan(eqn, eqn_id, ins)
        if name == "while":
            return self._while(eqn, eqn_id, ins)
        if name == "cond":
            return self._cond(eqn, eqn_id, ins)
        if name in CALLS:
            body = _only_jaxpr(eqn)
            if body is not None:
                return self._call(eqn, eqn_id, open_jaxpr(body), ins)
        if not any(is_split(layout) for layout in ins):
            return Step(tuple(_whole(v.aval) for v in eqn.outvars))
        rule = _RULES.get(name) or (_elementwise if name in ELEMENTWISE else None)
        if rule is None:
            raise _unsupported(eqn, f"a {name} takes a value split over {_axes_text(ins)}, which shardscope does not "
                                    "split per device")
        return rule(self, eqn, ins)

    def _call(self, eqn: "JaxprEqn", eqn_id: str, body: "Jaxpr", ins: list[Layout]) -> Step:
        """A call walked inline; what it cannot split is placed at the call's line when its own
        equations have none (``jnp.flip`` is a jitted function of JAX's)."""
        try:
            return Step(tuple(self.block(body, [_whole(v.aval) for v in body.constvars] + ins, block_id_of(eqn_id, "body"))))
        except _NotSplit as exc:
            if exc.where:
                raise
            called = eqn.params.get("name")
            raise _unsupported(eqn, f"{exc.what} (in {called})" if isinstance(called, str) else exc.what) from exc

    # ------------------------------------------------------------------ loops

    def _fixed_point(self, walk: Callable[[list[Layout]], list[Layout]], carry: list[Layout],
                     eqn: "JaxprEqn") -> tuple[list[Layout], list[Layout]]:
        """Walk a loop body until its carries' layouts settle (a whole accumulator that adds a
        split value is split from the start)."""
        for _ in range(8):
            outs = walk(carry)
            grown = [_join(eqn, [c, o]) for c, o in zip(carry, outs)]
            if grown == carry:
                return carry, outs
            carry = grown
        raise _unsupported(eqn, "the loop's carries do not settle on one split")

    def _scan(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Layout]) -> Step:
        groups = scan_operand_groups(eqn.params)
        if groups is None:
            raise _unsupported(eqn, "a scan whose operands shardscope cannot tell apart")
        n_consts, n_carry = groups
        consts, init, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
        if any(layout and layout[0] for layout in xs):
            raise _unsupported(eqn, f"the scan runs over a dimension split over {_axes_text(xs)}: each device would "
                                    "run its own number of iterations")
        body = eqn.params["jaxpr"]
        inner = [_whole(v.aval) for v in body.jaxpr.constvars]
        slices = [layout[1:] for layout in xs]
        carry, outs = self._fixed_point(
            lambda c: self.block(body.jaxpr, inner + consts + c + slices, block_id_of(eqn_id, "body")), list(init), eqn)
        ys = [(_WHOLE,) + layout for layout in outs[n_carry:]]
        return Step(tuple(carry + ys), _converted(init, carry, n_consts))

    def _while(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Layout]) -> Step:
        n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        cond, body = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]
        cond_consts, body_consts, init = ins[:n_cond], ins[n_cond:n_cond + n_body], ins[n_cond + n_body:]
        carry, _ = self._fixed_point(
            lambda c: self.block(body.jaxpr, [_whole(v.aval) for v in body.jaxpr.constvars] + body_consts + c,
                                 block_id_of(eqn_id, "body")), list(init), eqn)
        test = self.block(cond.jaxpr, [_whole(v.aval) for v in cond.jaxpr.constvars] + cond_consts + carry,
                          block_id_of(eqn_id, "cond"))
        if any(is_split(layout) for layout in test):
            raise _unsupported(eqn, "the while loop's condition reads a value split over devices")
        return Step(tuple(carry), _converted(init, carry, n_cond + n_body))

    def _cond(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Layout]) -> Step:
        if is_split(ins[0]):
            raise _unsupported(eqn, "the lax.cond's branch index is split over devices")
        found = []
        for k, branch in enumerate(eqn.params["branches"]):
            found.append(self.block(branch.jaxpr, [_whole(v.aval) for v in branch.jaxpr.constvars] + ins[1:],
                                    block_id_of(eqn_id, f"branch{k}")))
        if any(outs != found[0] for outs in found[1:]):
            raise _unsupported(eqn, "the lax.cond's branches split their results differently")
        return Step(tuple(found[0]))


# --------------------------------------------------------------------------- first-order rules


Rule = Callable[[_Walker, "JaxprEqn", list[Layout]], Step]


def _elementwise(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Operands of one shape (scalars aside, and dimensions of size 1 that broadcast) split
    alike: a whole one is cut to the block."""
    shape = _shape(eqn.outvars[0])
    shaped = [k for k, v in enumerate(eqn.invars) if _shape(v)]
    out = _join(eqn, [ins[k] for k in shaped])
    wanted = [tuple(_WHOLE if n == 1 and shape[d] != 1 else out[d] for d, n in enumerate(_shape(eqn.invars[k])))
              for k in shaped]
    return Step(tuple(out for _ in eqn.outvars), _converted([ins[k] for k in shaped], wanted, 0, shaped))


def _broadcast_in_dim(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    shape, dims = eqn.params["shape"], eqn.params["broadcast_dimensions"]
    operand = _shape(eqn.invars[0])
    out = [_WHOLE] * len(shape)
    for k, d in enumerate(dims):
        if ins[0][k] and operand[k] == shape[d]:
            out[d] = ins[0][k]
    layout = tuple(out)
    return Step((layout,), local={"shape": local_shape(shape, layout, walker.sizes), "sharding": None})


def _reshape(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Dimensions kept, split into parts or merged; a split dimension's devices go to the part
    that holds them (see the module: the innermost part they divide when it is split)."""
    if eqn.params.get("dimensions") is not None:
        raise _unsupported(eqn, "a reshape that transposes a split value")
    before, after = _shape(eqn.invars[0]), tuple(eqn.params["new_sizes"])
    out = [_WHOLE] * len(after)
    for ins_group, outs_group in _reshape_groups(before, after):
        split = [d for d in ins_group if ins[0][d]]
        if not split:
            continue
        axes = ins[0][split[0]]
        count = _count(axes, walker.sizes)
        if len(split) > 1 or (len(ins_group) > 1 and len(outs_group) > 1):
            raise _unsupported(eqn, f"a reshape of {before} to {after} regroups dimensions split over {_axes_text(ins)}")
        if len(ins_group) > 1:  # parts merged: the split part's devices split the merged dimension
            out[outs_group[0]] = axes
            continue
        parts = [d for d in outs_group if after[d] % count == 0 and after[d] > 1]
        if not parts:
            raise _unsupported(eqn, f"a reshape of {before} to {after}: no part of the dimension split over "
                                    f"{_axes_text(ins)} is divided by its {count} devices")
        out[parts[-1]] = axes
    layout = tuple(out)
    return Step((layout,), local={"new_sizes": local_shape(after, layout, walker.sizes), "sharding": None})


def _reduce(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """A reduction over split dimensions leaves each device its part: a sum's part is summed over
    the devices, a max's maxed. The other dimensions stay split."""
    reduced = set(eqn.params["axes"])
    name = eqn.primitive.name
    over = frozenset().union(*(ins[0][d] for d in reduced))
    if over and name not in _PER_DEVICE_REDUCTIONS:
        raise _unsupported(eqn, f"a {name} over a dimension split over {_axes_text(ins)}")
    layout = tuple(a for d, a in enumerate(ins[0]) if d not in reduced)
    return Step(tuple(layout for _ in eqn.outvars), summed=over, combiner=_PER_DEVICE_REDUCTIONS.get(name, "")
                if over else "")


def _dot_general(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Contracted dimensions split alike on both sides are summed over their axes (a whole side
    is cut to the blocks the other holds, unless it is split over those axes elsewhere: then
    the split side is gathered whole, as FSDP gathers a weight for a batch split over the same
    axis); batch dimensions are split alike; the free ones keep their split."""
    (lhs_c, rhs_c), (lhs_b, rhs_b) = eqn.params["dimension_numbers"]
    lhs, rhs = list(ins[0]), list(ins[1])
    for l, r in zip(lhs_c, rhs_c):
        if lhs[l] and not rhs[r] and lhs[l] & frozenset().union(*rhs):
            lhs[l] = _WHOLE
        elif rhs[r] and not lhs[l] and rhs[r] & frozenset().union(*lhs):
            rhs[r] = _WHOLE
    summed: set[str] = set()
    for pairs, is_sum in (((lhs_c, rhs_c), True), ((lhs_b, rhs_b), False)):
        for l, r in zip(*pairs):
            axes = _join(eqn, [(lhs[l],), (rhs[r],)])[0]
            lhs[l] = rhs[r] = axes
            if is_sum:
                summed |= axes
    lhs_free = [d for d in range(len(lhs)) if d not in lhs_c and d not in lhs_b]
    rhs_free = [d for d in range(len(rhs)) if d not in rhs_c and d not in rhs_b]
    taken = frozenset().union(*lhs, summed)
    for d in rhs_free:  # a weight's output features split over the batch's axis: gathered
        if rhs[d] & taken:
            rhs[d] = _WHOLE
    layout = tuple([lhs[d] for d in lhs_b] + [lhs[d] for d in lhs_free] + [rhs[d] for d in rhs_free])
    used = [a for axes in layout for a in axes] + sorted(summed)
    if len(used) != len(set(used)):
        raise _unsupported(eqn, "a dot_general whose result would be split twice over one mesh axis")
    wanted = [tuple(lhs), tuple(rhs)]
    return Step((layout,), _converted(ins[:2], wanted), summed=frozenset(summed), combiner="add" if summed else "")


def _transpose(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    return Step((tuple(ins[0][d] for d in eqn.params["permutation"]),))


def _squeeze(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    dropped = {d % len(ins[0]) for d in eqn.params["dimensions"]}
    return Step((tuple(a for d, a in enumerate(ins[0]) if d not in dropped),))


def _expand_dims(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    out = list(ins[0])
    for d in sorted(eqn.params["dimensions"]):
        out.insert(d, _WHOLE)
    return Step((tuple(out),))


def _along(param: str) -> Rule:
    """A primitive that works along one dimension (``param``): elementwise elsewhere, and that
    dimension must be whole."""

    def rule(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
        value = eqn.params[param]
        dims = set(value) if isinstance(value, (tuple, list)) else {value}
        step = _elementwise(walker, eqn, ins)
        if any(step.results[0][d % len(step.results[0])] for d in dims):
            raise _unsupported(eqn, f"a {eqn.primitive.name} along a dimension split over {_axes_text(ins)}")
        return step

    return rule


def _slice(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    shape = _shape(eqn.invars[0])
    starts, limits = eqn.params["start_indices"], eqn.params["limit_indices"]
    strides = eqn.params.get("strides") or (1,) * len(shape)
    for d, axes in enumerate(ins[0]):
        if axes and (starts[d], limits[d], strides[d]) != (0, shape[d], 1):
            raise _unsupported(eqn, f"a slice of a dimension split over {_axes_text(ins)}")
    return Step((ins[0],), local={"limit_indices": local_shape(limits, ins[0], walker.sizes)})


def _dynamic_slice(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    shape, sizes = _shape(eqn.invars[0]), eqn.params["slice_sizes"]
    if any(is_split(layout) for layout in ins[1:]):
        raise _unsupported(eqn, "a dynamic_slice at offsets split over devices")
    for d, axes in enumerate(ins[0]):
        if axes and sizes[d] != shape[d]:
            raise _unsupported(eqn, f"a dynamic_slice of a dimension split over {_axes_text(ins)}")
    return Step((ins[0],), local={"slice_sizes": local_shape(sizes, ins[0], walker.sizes)})


def _dynamic_update_slice(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    shape, update = _shape(eqn.invars[0]), _shape(eqn.invars[1])
    if any(is_split(layout) for layout in ins[2:]):
        raise _unsupported(eqn, "a dynamic_update_slice at offsets split over devices")
    out = _join(eqn, ins[:2])
    if any(axes and update[d] != shape[d] for d, axes in enumerate(out)):
        raise _unsupported(eqn, f"a dynamic_update_slice into a dimension split over {_axes_text(ins)}")
    return Step((out,), _converted(ins[:2], [out, out]))


def _concatenate(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    out = _join(eqn, ins)
    if out[eqn.params["dimension"]]:
        raise _unsupported(eqn, f"a concatenate along a dimension split over {_axes_text(ins)}")
    return Step((out,), _converted(ins, [out] * len(ins)))


def _pad(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    for axes, (low, high, interior) in zip(ins[0], eqn.params["padding_config"]):
        if axes and (low, high, interior) != (0, 0, 0):
            raise _unsupported(eqn, f"a pad of a dimension split over {_axes_text(ins)}")
    if is_split(ins[1]):
        raise _unsupported(eqn, "a pad whose padding value is split over devices")
    return Step((ins[0],))


def _reshard(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """``with_sharding_constraint``/``reshard``: the value split as its spec says from here on."""
    sharding = eqn.params.get("sharding") or eqn.params.get("dst_sharding")
    spec = getattr(sharding, "spec", sharding)
    out = layout_of_spec(spec, len(ins[0])) if spec is not None else ins[0]
    return Step((out,), _converted(ins[:1], [out]))


def _gather(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Rows of a whole table looked up at indices split over devices (an embedding): the result's
    batch dimensions are split as the indices' are."""
    numbers = eqn.params["dimension_numbers"]
    operand, indices = ins[0], ins[1]
    if is_split(operand) or indices[-1] or len(getattr(numbers, "operand_batching_dims", ())):
        raise _unsupported(eqn, f"a gather from a value split over {_axes_text(ins)}")
    shape = _shape(eqn.outvars[0])
    batch = iter(indices[:-1])
    layout = tuple(_WHOLE if d in numbers.offset_dims else next(batch) for d in range(len(shape)))
    return Step((layout,))


def _scatter_add(walker: _Walker, eqn: "JaxprEqn", ins: list[Layout]) -> Step:
    """Rows added into a whole zero table at indices split over devices (an embedding's
    gradient): each device adds its own rows, the table is its part of a sum over devices."""
    numbers = eqn.params["dimension_numbers"]
    operand, indices, updates = ins[0], ins[1], ins[2]
    if is_split(operand) or indices[-1] or len(getattr(numbers, "operand_batching_dims", ())):
        raise _unsupported(eqn, f"a scatter-add into a value split over {_axes_text(ins)}")
    if eqn.invars[0] not in walker.zeros:
        raise _unsupported(eqn, "a scatter-add of rows split over devices into a value that is not zeros")
    scattered = [updates[d] for d in range(len(updates)) if d not in numbers.update_window_dims]
    if any(updates[d] for d in numbers.update_window_dims) or _join(eqn, [indices[:-1], tuple(scattered)]) != indices[:-1]:
        raise _unsupported(eqn, f"a scatter-add whose updates are split otherwise than its indices over {_axes_text(ins)}")
    return Step((operand,), summed=frozenset().union(*indices), combiner="add")


_RULES: dict[str, Rule] = {
    "broadcast_in_dim": _broadcast_in_dim, "reshape": _reshape, "dot_general": _dot_general,
    "reduce_sum": _reduce, "reduce_max": _reduce, "reduce_min": _reduce, "reduce_prod": _reduce,
    "reduce_and": _reduce, "reduce_or": _reduce, "reduce_xor": _reduce, "argmax": _reduce, "argmin": _reduce,
    "transpose": _transpose, "squeeze": _squeeze, "expand_dims": _expand_dims, "slice": _slice,
    "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice, "concatenate": _concatenate,
    "pad": _pad, "gather": _gather, "scatter-add": _scatter_add, "scatter_add": _scatter_add, "rev": _along("dimensions"), "sort": _along("dimension"), "split": _along("axis"),
    **{name: _along("axis") for name in CUMULATIVE}, **{name: _reshard for name in RESHARDS},
}


# --------------------------------------------------------------------------- helpers


def _join(eqn: "JaxprEqn", layouts: Sequence[Layout]) -> Layout:
    """The layout operands of one shape take together: each dimension split as any of them
    splits it (two splits over other axes, or one axis on two dimensions, cannot be joined)."""
    if not layouts:
        return ()
    out = []
    for dims in zip(*layouts):
        found = {axes for axes in dims if axes}
        if len(found) > 1:
            raise _unsupported(eqn, f"operands of a {eqn.primitive.name} are split over different mesh axes")
        out.append(found.pop() if found else _WHOLE)
    used = [a for axes in out for a in axes]
    if len(used) != len(set(used)):
        raise _unsupported(eqn, f"operands of a {eqn.primitive.name} are split over one mesh axis on different dimensions")
    return tuple(out)


def _converted(has: Sequence[Layout], wants: Sequence[Layout], offset: int = 0,
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


def _is_zeros(eqn: "JaxprEqn") -> bool:
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


def _whole(aval: object) -> Layout:
    return (_WHOLE,) * len(getattr(aval, "shape", ()))


def _names(entry: object) -> Axes:
    if entry is None:
        return _WHOLE
    return frozenset(map(str, entry)) if isinstance(entry, (tuple, list)) else frozenset({str(entry)})


def _axes_text(layouts: Sequence[Layout]) -> str:
    axes = sorted({a for layout in layouts for dims in layout for a in dims})
    return ", ".join(repr(a) for a in axes) or "no axis"


def _only_jaxpr(eqn: "JaxprEqn") -> "ClosedJaxpr | Jaxpr | None":
    from jax.extend.core import ClosedJaxpr, Jaxpr

    found = [v for v in eqn.params.values() if isinstance(v, (ClosedJaxpr, Jaxpr))]
    if len(found) == 1 and len(open_jaxpr(found[0]).invars) == len(eqn.invars):
        return found[0]
    return None


class _NotSplit(Unsupported):
    """What the per-device reading cannot split (``what``), at the user's line (``where``)."""

    def __init__(self, what: str, where: str) -> None:
        super().__init__(f"{what} (at {where})" if where else what)
        self.what = what
        self.where = where


def _unsupported(eqn: "JaxprEqn", what: str) -> _NotSplit:
    return _NotSplit(what, short_source(equation_source(eqn, own=True)))
