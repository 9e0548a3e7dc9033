"""Move sums out of their loop: each device accumulates its own part, one sum after the loop.

Of a sum that a loop only adds into its accumulator, the sum over devices commutes with the
sum over iterations. The rewrite leaves each iteration's value unsummed, starts the
accumulator unsummed and sums it once after the outermost loop it leaves, in the program's
own style:

- ``shard_map``: the ``psum_invariant`` (the transpose of a replicated value's implicit
  ``pvary``) is dropped, so the value stays varying; the accumulator starts
  ``lax.pcast(zeros, axes, to='varying')``; ``lax.psum(acc, axes)`` after the loop. The
  replicated values whose ``pvary`` the sum transposes are cast before the loop instead of
  inside it, as ``lax.pcast(params, axes, to='varying')`` before the loop reads;
- ``per_device`` (a jit program run per device inside ``jax.shard_map``,
  :mod:`shardscope.whatif.shard_map_route`): the ``psum`` the per-device program writes after
  a contraction over a split dimension is not written; the accumulator starts varying and one
  ``psum`` follows the loop, as in ``shard_map``;
- ``explicit`` (jit with Explicit axes): the ``dot_general``/``reduce_sum`` whose contraction
  over a sharded axis the partitioner sums gives its result ``unreduced`` over that axis
  (what ``jax.grad`` of a parameter resharded ``reduced`` gives); the accumulator starts
  ``jax.reshard(zeros, P(..., unreduced=axes))``; ``jax.reshard(acc, P(...))`` after the loop.

The rewrite is refused, with the reason, where the unsummed value would go anywhere but the
accumulator (:mod:`shardscope.whatif.type_reach`'s leaks) or where the accumulator starts from
something other than zero (summed over devices after the loop, it would count once per device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from shardscope.engine.jaxpr.dead_code import named_equations
from shardscope.engine.jaxpr.model import scan_operand_groups, user_frames_of
from shardscope.collective_kinds import PSUM_INVARIANT
from shardscope.whatif.retrace import Edits, Replacement, block_id_of
from shardscope.whatif.type_reach import Axes, Carry, type_reach

if TYPE_CHECKING:
    import jax
    from jax.core import ShapedArray
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn
    from jax.sharding import AbstractMesh, Mesh, PartitionSpec

SHARD_MAP, EXPLICIT, PER_DEVICE = "shard_map", "explicit", "per_device"
_VARYING = frozenset({SHARD_MAP, PER_DEVICE})
"""The styles whose unsummed values are varying (``shard_map``'s types), not unreduced."""


class Refused(Exception):
    """A rewrite that would change what the program computes: the what-if's ``refused``."""

    @property
    def reason(self) -> str:
        """The sentence that says why."""
        return str(self.args[0]) if self.args else ""


class Unsupported(Refused):
    """A rewrite shardscope cannot make here, though the fix may well be right (a limitation of
    the rewriter, or JAX refusing the rewritten program): the what-if's ``failed``, never
    ``refused``, which users read as "the fix is wrong here"."""


@dataclass(frozen=True)
class Deferral:
    """Sums (by equation id) moved out of the loop ``loop`` (the outermost one they leave).

    ``carries`` are the accumulators that start unsummed (loop id -> carries), ``summed`` the
    results of ``loop`` summed after it (position -> axes), ``cast_consts`` the operands of
    ``loop`` cast to varying before it (a ``shard_map`` program's replicated parameters).
    """

    style: str
    reductions: tuple[str, ...]
    loop: str
    axes: Axes
    carries: Mapping[str, tuple[Carry, ...]]
    summed: Mapping[int, Axes]
    cast_consts: tuple[int, ...] = ()

    def edits(self, index: "EquationIndex") -> Edits:
        """The :class:`Edits` that make this rewrite."""
        replace = {} if self.style == PER_DEVICE else {
            r: (_unsummed if self.style == SHARD_MAP else _unreduced(self.axes)) for r in self.reductions}
        before: dict[str, Replacement] = {}
        for loop_id, carries in self.carries.items():
            first = _first_carry(index.equation(loop_id))
            casts = {first + c.index: c.axes for c in carries}
            if loop_id == self.loop:
                casts.update({k: self.axes for k in self.cast_consts})
            before[loop_id] = _cast_operands(casts, self.style)
        after = {self.loop: _sum_results(dict(self.summed), self.style)}
        return Edits(replace=replace, before=before, after=after)


def plan_deferral(index: "EquationIndex", reductions: Mapping[str, Axes], loop: str, style: str,
                  split: Callable[[Any], Axes] | None = None) -> Deferral:
    """The :class:`Deferral` of ``reductions`` (equation id -> the axes each sums over) out of
    ``loop``; raises :class:`Refused` when it would change the result. ``split``: the axes a
    variable is split over where its type does not say (``per_device``)."""
    for eqn_id in reductions:
        primitive = index.equation(eqn_id).primitive.name
        if style == SHARD_MAP and primitive != PSUM_INVARIANT:
            raise Unsupported(f"a {primitive} is not rewritten (only the psum_invariant that sums a replicated value's "
                          "gradient is)")
    reach = type_reach(index.jaxpr, reductions, frozenset({loop}), split)
    if reach.leaks:
        raise Refused(_sentence(reach.first_leak) + "; moving the sum after the loop would change what the program "
                      "computes.")
    if loop not in reach.summed or not reach.summed[loop]:
        raise Refused("the sum's result does not reach the loop's accumulator.")
    for loop_id, carries in reach.carries.items():
        if not (loop_id == loop or loop_id.startswith(loop + "/") or loop_id.startswith(loop + ".")):
            raise Unsupported("the unsummed value reaches another loop than the one it leaves.")
        for carry in carries:
            if carry.start == "other":
                raise Refused("the accumulator does not start from zero: summed over the devices after the loop, its "
                              "starting value would count once per device.")
    axes = frozenset().union(*reductions.values())
    casts = _replicated_operands(index, loop, reductions) if style == SHARD_MAP else ()
    return Deferral(style, tuple(reductions), loop, axes, reach.carries, reach.summed[loop], casts)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


# --------------------------------------------------------------------------- the equations


class EquationIndex:
    """Every equation of a closed jaxpr by its id (as :mod:`shardscope.engine.jaxpr.model` names
    them), with the block it sits in and the equation that owns that block."""

    def __init__(self, closed: "ClosedJaxpr") -> None:

        self.closed = closed
        self.jaxpr = closed.jaxpr
        self._equations: dict[str, JaxprEqn] = dict(named_equations(self.jaxpr))

    def equation(self, eqn_id: str) -> "JaxprEqn":
        """The equation called ``eqn_id``."""
        return self._equations[eqn_id]

    def __contains__(self, eqn_id: str) -> bool:
        return eqn_id in self._equations

    def body(self, loop_id: str) -> "Jaxpr":
        """The body of the loop ``loop_id``."""
        params = self.equation(loop_id).params
        body = params["jaxpr"] if "jaxpr" in params else params["body_jaxpr"]
        return body.jaxpr

    def ids(self) -> list[str]:
        """Every equation id, in program order."""
        return list(self._equations)


def _first_carry(eqn: "JaxprEqn") -> int:
    """The operand position of a loop's first carry."""

    if eqn.primitive.name == "scan":
        groups = scan_operand_groups(eqn.params)
        return groups[0] if groups else 0
    return eqn.params["cond_nconsts"] + eqn.params["body_nconsts"]


def _replicated_operands(index: EquationIndex, loop: str, reductions: Mapping[str, Axes]) -> tuple[int, ...]:
    """The operands of ``loop`` whose ``pvary`` inside its body the reductions transpose, read
    there by nothing else: cast before the loop, as the fix writes it, they change no other type."""
    eqn = index.equation(loop)
    if eqn.primitive.name != "scan":
        return ()
    body = index.body(loop)
    n_consts = _first_carry(eqn)
    origins = {user_frames_of(index.equation(r)) for r in reductions if block_of(r) == block_id_of(loop, "body")}
    origins.discard(())
    if not origins:
        return ()
    axes = frozenset().union(*reductions.values())
    uses: dict[Any, list[JaxprEqn]] = {}
    for inner in body.eqns:
        for var in inner.invars:
            if not _literal(var):
                uses.setdefault(var, []).append(inner)
    found = []
    for k, var in enumerate(body.invars[:n_consts]):
        users = uses.get(var, [])
        if users and all(u.primitive.name == "pvary" and frozenset(u.params["axes"]) == axes and user_frames_of(u) in origins
                         for u in users):
            found.append(k)
    return tuple(found)


def block_of(eqn_id: str) -> str:
    """The id of the block ``eqn_id`` sits in."""
    return eqn_id.rsplit("/", 1)[0] if "/" in eqn_id else ""


def _literal(atom: object) -> bool:
    from jax.extend.core import Literal

    return isinstance(atom, Literal)


# --------------------------------------------------------------------------- the changes


def _unsummed(eqn: "JaxprEqn", invals: list) -> list:
    """A ``psum_invariant`` left out: each device keeps its own part."""
    return list(invals)


def _unreduced(axes: Axes) -> Replacement:
    """A contraction over a sharded axis whose result stays unreduced over ``axes``."""

    def bind(eqn: "JaxprEqn", invals: list) -> list:
        from jax.sharding import NamedSharding

        # jax types an aval as AbstractValue; a traced contraction's output is a ShapedArray
        sharding = cast("ShapedArray", eqn.outvars[0].aval).sharding
        spec = unreduced_spec(sharding.spec, frozenset(sharding.spec.unreduced) | axes)
        params = dict(eqn.params, out_sharding=NamedSharding(sharding.mesh, spec))
        bind_params = eqn.primitive.get_bind_params(params)
        out = eqn.primitive.bind(*invals, **bind_params)
        return list(out) if eqn.primitive.multiple_results else [out]

    return bind


def _cast_operands(casts: Mapping[int, Axes], style: str) -> Replacement:
    """The loop's operands at ``casts``' positions started unsummed over their axes."""

    def cast(eqn: "JaxprEqn", invals: list) -> list:
        return [_start_unsummed(v, casts[k], style) if k in casts else v for k, v in enumerate(invals)]

    return cast


def _sum_results(summed: Mapping[int, Axes], style: str) -> Replacement:
    """The loop's results at ``summed``' positions summed over their axes: the one sum after it."""

    def total(eqn: "JaxprEqn", outs: list) -> list:
        return [_sum(v, summed[k], style) if k in summed else v for k, v in enumerate(outs)]

    return total


def _start_unsummed(value: jax.Array, axes: Axes, style: str) -> jax.Array:
    import jax
    from jax import lax
    from jax._src import core
    from jax.sharding import NamedSharding

    aval = core.typeof(value)
    if style in _VARYING:
        missing = tuple(sorted(axes - aval.manual_axis_type.varying))
        return lax.pcast(value, missing, to="varying") if missing else value
    spec = aval.sharding.spec
    if axes <= frozenset(spec.unreduced):
        return value
    return jax.sharding.reshard(value, NamedSharding(_mesh_with(aval.sharding.mesh, axes),
                                                     unreduced_spec(spec, frozenset(spec.unreduced) | axes)))


def _mesh_with(mesh: Mesh | AbstractMesh, axes: Axes) -> Mesh | AbstractMesh:
    """``mesh``, or the mesh the program is traced under when ``mesh`` lacks ``axes``: a value
    made inside the program from no argument (the loss accumulator's ``jnp.zeros(())``) has
    an empty mesh, and is started unreduced on the program's."""
    import jax

    return mesh if axes <= frozenset(mesh.axis_names) else jax.sharding.get_abstract_mesh()


def _sum(value: jax.Array, axes: Axes, style: str) -> jax.Array:
    import jax
    from jax import lax
    from jax._src import core
    from jax.sharding import NamedSharding

    if style in _VARYING:
        return lax.psum(value, tuple(sorted(axes)))
    sharding = core.typeof(value).sharding
    spec = sharding.spec
    return jax.sharding.reshard(value, NamedSharding(sharding.mesh, unreduced_spec(spec, frozenset(spec.unreduced) - axes)))


def unreduced_spec(spec: "PartitionSpec", unreduced: Axes) -> "PartitionSpec":
    """``spec`` unreduced over ``unreduced`` (none: a plain spec, which jax 0.12 needs spelled so)."""
    from jax.sharding import AbstractMesh, Mesh, PartitionSpec

    reduced = frozenset(spec.reduced)
    extra = {"reduced": reduced} if reduced else {}
    return PartitionSpec(*spec.partitions, unreduced=unreduced, **extra) if unreduced else PartitionSpec(*spec.partitions, **extra)
