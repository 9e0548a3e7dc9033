"""The shard_map route of a jit program: its step run per device inside ``jax.shard_map`` over
its mesh, each device accumulating its own part of the sums a loop only accumulates, one
``psum`` after the loop.

What a user writes when Explicit axes do not take the program (a ``reshape`` of the sharded
batch into micro-batches that JAX refuses to type with Explicit axes): the step inside
``jax.shard_map(..., in_specs=<one spec per argument>, out_specs=...)``, the replicated
parameters cast to varying before the loop, the accumulators started varying, ``lax.psum``
after the loop; a loss that is a mean over the batch is each device's part of it, summed.

The traced jaxpr is run again (:class:`~shardscope.whatif.retrace.Retracer`) inside the
``shard_map`` on each device's blocks, as :mod:`shardscope.whatif.per_device` reads it: a
whole operand is cut to the device's block, shapes in parameters become the device's, and the
sum the partitioner writes after a contraction over a split dimension is written as a
``psum``, except the sums the rewrite moves: of those each device keeps its part, the
accumulator starts varying, and one ``psum`` follows the loop
(:mod:`shardscope.whatif.deferral`'s ``per_device`` style).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from shardscope.engine.hlo.compiled import argument_specs, spec_text
from shardscope.engine.hlo.fixes import argument_specs_text

from shardscope.whatif.deferral import PER_DEVICE, Deferral, EquationIndex, Refused, Unsupported, plan_deferral
from shardscope.whatif.per_device import PerDevice, per_device, spec_of_layout
from shardscope.whatif.split_rules import RESHARDS, Axes, Layout, layout_of_spec
from shardscope.whatif.retrace import Edits, Retracer, bind
from shardscope.whatif.rewritten import RewrittenProgram, rewritten_program
from shardscope.whatif.shard_map_snippet import StepSignature
from shardscope.whatif.type_reach import ADDED_TERM, type_reach

if TYPE_CHECKING:
    import jax
    from jax.extend.core import ClosedJaxpr, JaxprEqn
    from jax.sharding import AbstractMesh, Mesh

    from shardscope.whatif.subject import Subject


def per_device_of(subject: "Subject", manual: "Axes | None" = None) -> PerDevice:
    """The subject's program read per device, from the shardings its compiled program takes;
    ``manual``: the mesh axes it is read over (default: all), the others left whole, as a
    partial-auto ``shard_map`` leaves them to the partitioner. An axis of one device splits
    nothing: no value is read split over it (its sum is over one device)."""
    import jax

    mesh = _mesh(subject)
    leaves = jax.tree.leaves((subject.args, subject.kwargs))
    shardings = jax.tree.leaves(subject.compiled.input_shardings)
    order = tuple(mesh.axis_names)
    kept = frozenset(order) if manual is None else manual
    split = kept - {a for a, n in zip(order, mesh.devices.shape) if n == 1}
    layouts = [tuple(axes & split for axes in _input_layout(sharding, len(getattr(leaf, "shape", ())), order, name))
               for leaf, sharding, name in zip(leaves, shardings, _names(subject, len(leaves)), strict=True)]
    return per_device(subject.traced.jaxpr, layouts,
                      {a: n for a, n in zip(order, mesh.devices.shape) if a in kept})


def accumulated_deferral(index: EquationIndex, candidates: Mapping[str, Axes], loop_id: str, style: str,
                         split: Callable[[Any], Axes] | None = None) -> Deferral:
    """The deferral out of ``loop_id`` of every sum of ``candidates`` (equation id -> axes) that
    the loop only accumulates, each checked alone (a forward pass's sum read by a ``tanh`` is
    not one), then with the sums that are added into the same accumulator as it (an embedding's
    gradient: the lookup's scatter-add and the output projection's contraction, added together);
    ``split``: the axes a variable is split over where its type does not say."""
    accumulated, together = {}, {}
    reasons = []
    for eqn_id, axes in candidates.items():
        reach = type_reach(index.jaxpr, {eqn_id: axes}, frozenset({loop_id}), split)
        if not reach.leaks and reach.summed.get(loop_id):
            accumulated[eqn_id] = axes
        elif reach.leaks and all(leak.startswith(ADDED_TERM) for leak in reach.leaks):
            together[eqn_id] = axes  # its partner terms may be sums moved with it
        if reach.leaks:
            reasons.append(reach.first_leak)
    if together:
        joined = {**accumulated, **together}
        reach = type_reach(index.jaxpr, joined, frozenset({loop_id}), split)
        if not reach.leaks and reach.summed.get(loop_id):
            accumulated = joined
    if not accumulated and reasons:  # each sum goes somewhere else too: moving it changes the result
        raise Refused(f"no sum the partitioner writes in the loop is only accumulated, as the jaxpr shows it "
                      f"({reasons[0]}).")
    if not accumulated:
        raise Unsupported("no sum over devices in the loop reaches the loop's accumulator.")
    return plan_deferral(index, accumulated, loop_id, style, split)


@dataclass(frozen=True)
class PerDeviceRewrite:
    """The shard_map route's program, its deferral, the axes its sums span (in the mesh's order)
    and the step's signature for its snippet."""

    program: RewrittenProgram
    deferral: Deferral
    axes: tuple[str, ...]
    signature: StepSignature


def shard_map_rewrite(subject: "Subject", index: EquationIndex, loop_id: str) -> PerDeviceRewrite:
    """The subject's step inside ``jax.shard_map`` with the sums of ``loop_id`` deferred,
    compiled and planned; raises :class:`Unsupported` (or :class:`Refused`) with the reason."""
    plan = per_device_of(subject)
    deferral = _loop_deferral(index, plan, loop_id)
    # a one-device axis splits nothing, so a shard_map over it too is as good: only the others are left to the
    # partitioner (a partial-auto shard_map), as the user's code would leave them
    manual = frozenset(deferral.axes) | {a for a, n in plan.sizes.items() if n == 1}
    if manual != frozenset(plan.sizes):
        plan = per_device_of(subject, manual)
        deferral = _loop_deferral(index, plan, loop_id)
    run = _shard_mapped(index.closed, deferral.edits(index), plan, frozenset(deferral.reductions), _mesh(subject))
    program = rewritten_program(subject, index.closed, Edits(), mesh=subject.mesh, run=run)
    axes = _ordered(deferral.axes, plan.sizes)
    return PerDeviceRewrite(program, deferral, axes, _signature(subject, plan, axes))


def _loop_deferral(index: EquationIndex, plan: PerDevice, loop_id: str) -> Deferral:
    """The deferral of the sums over devices that ``plan`` finds in the loop ``loop_id``."""
    inside = {eqn_id: axes for eqn_id, axes in plan.sums().items()
              if eqn_id.startswith(loop_id + "/") or eqn_id.startswith(loop_id + ".")}
    if not inside:
        raise Unsupported("run per device, the loop sums nothing over devices (shardscope finds no contraction or "
                          "reduction over a dimension split over devices in it).")
    return accumulated_deferral(index, inside, loop_id, PER_DEVICE, plan.split)


def _signature(subject: "Subject", plan: PerDevice, axes: Sequence[str]) -> StepSignature:
    """The step's name, each argument with its spec over the axes it runs per device on, its
    outputs' specs, the devices its sums span, and those axes where they are not all the mesh's
    (a partial-auto ``shard_map``'s ``axis_names``)."""
    specs = [spec_text(spec_of_layout(layout, plan.sizes)) for layout in plan.outputs]
    out_specs = specs[0] if len(set(specs)) == 1 else "..."
    manual = tuple(plan.sizes)
    mesh_axes = tuple(_mesh(subject).axis_names)
    partial = set(manual) != set(mesh_axes)
    split = tuple(a for a in manual if plan.sizes[a] > 1)  # the specs name no axis of one device: it splits nothing
    leaves = tuple(argument_specs(subject.compiled, subject.input_names))
    kept = split if split != mesh_axes else None
    return StepSignature(subject.name, argument_specs_text(leaves, kept), out_specs, prod(plan.sizes[a] for a in axes),
                         manual if partial else (), leaves, kept)


# --------------------------------------------------------------------------- the program per device


class _PerDeviceRetracer(Retracer):
    """Runs a jit program's jaxpr on one device's blocks inside a ``shard_map``: every equation
    traced again at the device's shapes (:class:`~shardscope.whatif.per_device.Step`)."""

    retrace_all = True

    def __init__(self, edits: Edits, mesh: "AbstractMesh", plan: PerDevice, deferred: frozenset[str]) -> None:
        super().__init__(edits, mesh)
        self.plan = plan
        self.deferred = deferred

    def operands(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        """The operands cut to the device's block, or gathered whole, where the step says."""
        step = self.plan.steps.get(eqn_id)
        if step is None or not step.operands:
            return invals
        return [_converted(v, *step.operands[k], self.plan.sizes) if k in step.operands else v
                for k, v in enumerate(invals)]

    def first_order(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        """The primitive at the device's shapes; a sum over devices the partitioner writes after
        it written as a ``psum`` (``pmax``, ``pmin``), unless the rewrite moves it."""
        from jax import lax

        if eqn.primitive.name in RESHARDS:  # its layout is the operand's conversion, done already
            return invals[:1]
        step = self.plan.steps[eqn_id]
        outs = bind(eqn, invals, {**self._params(eqn), **step.local})
        if not step.summed or eqn_id in self.deferred:
            return outs
        finish = {"add": lax.psum, "max": lax.pmax, "min": lax.pmin}[step.combiner]
        axes = _ordered(step.summed, tuple(self.plan.sizes))
        return [finish(o, axes) for o in outs]


def _shard_mapped(closed: "ClosedJaxpr", edits: Edits, plan: PerDevice, deferred: frozenset[str],
                  mesh: "Mesh") -> Callable[[list], list]:
    """The program's flat outputs from its flat arguments, run per device inside ``jax.shard_map``."""
    import jax

    in_specs = tuple(spec_of_layout(layout, plan.sizes) for layout in plan.inputs)
    out_specs = [spec_of_layout(layout, plan.sizes) for layout in plan.outputs]

    def local(*blocks: object) -> list:
        retracer = _PerDeviceRetracer(edits, jax.sharding.get_abstract_mesh(), plan, deferred)
        return retracer.run(closed, blocks)

    def run(leaves: list) -> list:
        return list(jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                  axis_names=frozenset(plan.sizes), check_vma=True)(*leaves))

    return run


def _converted(value: "jax.Array", has: Layout, wants: Layout, sizes: Mapping[str, int]) -> "jax.Array":
    """``value`` (split as ``has``) split as ``wants``: a dimension gathered whole, or cut to the
    device's block (``dynamic_slice`` at its index along the axes)."""
    import jax.numpy as jnp
    from jax import lax

    for d, (h, w) in enumerate(zip(has, wants)):
        if h == w:
            continue
        if h:
            value = lax.all_gather(value, _ordered(h, sizes), axis=d, tiled=True)
        if w:
            axes = _ordered(w, sizes)
            size = jnp.shape(value)[d] // prod(sizes[a] for a in axes)
            value = lax.dynamic_slice_in_dim(value, lax.axis_index(axes) * size, size, d)
    return value


def _ordered(axes: Axes, order: Iterable[str]) -> tuple[str, ...]:
    """The axes in the mesh's order (the order a spec entry of several axes splits them in)."""
    return tuple(a for a in order if a in axes)


# --------------------------------------------------------------------------- the arguments


def _mesh(subject: "Subject") -> "Mesh":
    if subject.mesh is None:
        raise Unsupported("the program's arguments name no mesh: there is no mesh to run it per device over.")
    return subject.mesh


def _input_layout(sharding: "jax.sharding.Sharding", ndim: int, order: Sequence[str], name: str) -> Layout:
    """The layout a flat argument comes in (its ``NamedSharding``'s spec)."""
    spec = getattr(sharding, "spec", None)
    if spec is None:
        if getattr(sharding, "is_fully_replicated", False):
            return layout_of_spec(None, ndim)
        raise Unsupported(f"{name} comes in a sharding that names no mesh axes ({type(sharding).__name__}).")
    for entry in tuple(spec):
        if isinstance(entry, (tuple, list)) and list(entry) != [a for a in order if a in entry]:
            raise Unsupported(f"{name} is split over {tuple(entry)} in another order than the mesh's axes.")
    return layout_of_spec(spec, ndim)


def _names(subject: "Subject", count: int) -> list[str]:
    names = list(subject.input_names)
    return names if len(names) == count else [f"argument {k}" for k in range(count)]
