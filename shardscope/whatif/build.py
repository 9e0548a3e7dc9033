"""Building the rewrite of one group of findings: which rewrite, on which jaxpr, in which style.

- a ``shard_map`` program: the deferral (:mod:`~shardscope.whatif.deferral`) or the hoist
  (:mod:`~shardscope.whatif.hoisting`) of the group's own jaxpr collectives;
- jit with Explicit axes: the sums the partitioner writes in the loop the compiled findings
  leave, read from the Explicit-axes types (:mod:`~shardscope.whatif.explicit_axes`), each
  kept only if the loop only accumulates it;
- jit with Auto axes: the same, on the program traced again with Explicit axes;
- the shard_map route of a jit program (either axes), when that one fails: the step run per
  device inside ``jax.shard_map`` (:mod:`~shardscope.whatif.shard_map_route`).

With the program come what its checks need (the compiled collectives it moves and how often
each should run after) and what its patch needs (the loop's line, whether every carry
accumulates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from shardscope.engine.hlo.compiled import argument_specs, jax_traced
from shardscope.engine.hlo.fixes import argument_specs_text
from shardscope.collective_kinds import ALL_REDUCE
from shardscope.engine.hlo.pairing import HLO_KIND
from shardscope.engine.jaxpr.model import equation_source, loop_function_of, scan_operand_groups, short_source
from shardscope.engine.hlo.loss_scaling import loss_scalings
from shardscope.whatif.deferral import EXPLICIT, SHARD_MAP, Deferral, EquationIndex, plan_deferral, Unsupported
from shardscope.whatif.explicit_axes import as_explicit, implicit_sums
from shardscope.whatif.groups import HOIST, FindingGroup, group_axes, group_values
from shardscope.whatif.hoisting import plan_hoist
from shardscope.whatif.patch import PatchRequest, patch_for
from shardscope.whatif.rewritten import RewrittenProgram, check_signature, rewritten_program
from shardscope.whatif.shard_map_route import accumulated_deferral, shard_map_rewrite
from shardscope.whatif.subject import AUTO

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledLoop
    from shardscope.engine.jaxpr.dataflow import Collective
    from shardscope.whatif.patch import Patch
    from shardscope.whatif.shard_map_snippet import StepSignature
    from shardscope.whatif.subject import Subject


@dataclass(frozen=True)
class Built:
    """A rewritten program and what its checks and patch need: the compiled collectives it moves
    with the runs per call each should have after, the collectives' kind, the route, the memory
    a hoist keeps alive, the loop's source line and whether every carry accumulates."""

    program: RewrittenProgram
    moved: list
    kind: str
    route: str
    memory: int
    loop_source: str
    whole_carry: bool = True
    axes: tuple[str, ...] = ()  # the mesh axes its sums span, where the findings' groups are part of them
    step: "StepSignature | None" = None  # a jit program's step run per device inside jax.shard_map


def build(subject: "Subject", group: FindingGroup, route: str = "") -> Built:
    """The rewritten program of one group, compiled and planned, by the program's own route
    or by ``route`` (:data:`SHARD_MAP` for a jit program: its step inside ``jax.shard_map``)."""

    check_signature(subject)
    index = EquationIndex(subject.traced.jaxpr)
    if route == SHARD_MAP and subject.style != SHARD_MAP:
        return _build_per_device(subject, group, index)
    moved = [(c, _after(c, group.equations)) for c in group.findings]
    if group.kind == HOIST:
        hoist = plan_hoist(index, tuple(c.equation_id for c in group.equations), group.loop)
        program = rewritten_program(subject, subject.traced.jaxpr, hoist.edits(index))
        return Built(program, moved, HLO_KIND[group.equations[0].primitive], SHARD_MAP, hoist.memory_bytes,
                      _source_of(index, group.loop))
    if subject.style == SHARD_MAP:
        reductions = {c.equation_id: frozenset(c.axes) for c in group.equations}
        deferral = plan_deferral(index, reductions, group.loop, SHARD_MAP)
        program = rewritten_program(subject, subject.traced.jaxpr, deferral.edits(index))
        return Built(program, moved, ALL_REDUCE, SHARD_MAP, 0, _source_of(index, group.loop),
                      _whole_carry(index, deferral))
    return _build_jit(subject, group, index)


def _build_jit(subject: "Subject", group: FindingGroup, index: EquationIndex) -> Built:
    """The Explicit-axes route, on the program itself or on the Auto program traced again with
    Explicit axes."""
    import jax


    loop = _compiled_loop(group)
    moved = [(c, c.verdict.executions_after) for c in group.findings]
    kind = group.findings[0].kind
    if subject.style == EXPLICIT:
        closed = _traced_under_mesh(subject)
        index = EquationIndex(closed)
        loop_id = _jaxpr_loop(index, loop.source, loop.trip_count)
        deferral = _explicit_deferral(index, loop_id)
        program = rewritten_program(subject, closed, deferral.edits(index), mesh=subject.mesh)
        return Built(program, moved, kind, EXPLICIT, 0, _source_of(index, loop_id), _whole_carry(index, deferral))
    if subject.mesh is None:
        raise Unsupported("the program's arguments name no mesh: there is nothing to shard with Explicit axes.")
    leaves = jax.tree.leaves((subject.args, subject.kwargs))
    converted = as_explicit(subject.traced.jaxpr, subject.mesh, jax.tree.leaves(subject.compiled.input_shardings), leaves)
    explicit_index = EquationIndex(converted.traced.jaxpr)
    loop_id = _jaxpr_loop(explicit_index, loop.source, loop.trip_count)
    deferral = _explicit_deferral(explicit_index, loop_id)
    program = rewritten_program(subject, converted.traced.jaxpr, deferral.edits(explicit_index), mesh=converted.mesh,
                                converted=converted)
    return Built(program, moved, kind, AUTO, 0, _source_of(index, _jaxpr_loop(index, loop.source, loop.trip_count)),
                  _whole_carry(explicit_index, deferral))


def _build_per_device(subject: "Subject", group: FindingGroup, index: EquationIndex) -> Built:
    """The shard_map route of a jit program: its step run per device, the loop's sums deferred."""
    loop = _compiled_loop(group)
    loop_id = _jaxpr_loop(index, loop.source, loop.trip_count)
    rewrite = shard_map_rewrite(subject, index, loop_id)
    moved = [(c, c.verdict.executions_after) for c in group.findings]
    return Built(rewrite.program, moved, group.findings[0].kind, SHARD_MAP, 0, _source_of(index, loop_id),
                 _whole_carry(index, rewrite.deferral), axes=rewrite.axes, step=rewrite.signature)


def _compiled_loop(group: FindingGroup) -> "CompiledLoop":
    """The compiled while loop a jit group's sums leave (its name is the group's loop)."""
    found = group.findings[0].loops
    return found[[w.name for w in found].index(group.loop)]


def _traced_under_mesh(subject: "Subject") -> "ClosedJaxpr":
    """The subject's jaxpr traced under its Explicit mesh (``jax.set_mesh``). A program whose
    arguments carry the mesh traces without one in context too, but then jax 0.12 types the
    values it makes (``jnp.zeros_like(W)``) on an empty mesh, where no axis can be unreduced,
    and the rewrite replays each equation under the context it was traced in."""

    with subject.context():
        return jax_traced(subject.function.trace(*subject.args, **subject.kwargs)).jaxpr


def _explicit_deferral(index: EquationIndex, loop_id: str) -> "Deferral":
    """The deferral of every sum the partitioner writes inside ``loop_id`` that the loop only
    accumulates (each checked alone: a forward pass's sum read by a ``tanh`` is not one)."""

    candidates = implicit_sums(index, loop_id)
    if not candidates:
        raise Unsupported("shardscope finds no sum the partitioner writes in the loop in the program's jaxpr with "
                          "Explicit axes.")
    return accumulated_deferral(index, candidates, loop_id, EXPLICIT)


def _source_of(index: EquationIndex, eqn_id: str) -> str:
    """``/path/file.py:56 (step)``: the user's line that made the equation."""

    return equation_source(index.equation(eqn_id), own=True)


def _whole_carry(index: EquationIndex, deferral: "Deferral") -> bool:
    """True when every carry the user gave the loop the sums leave is an accumulator the rewrite
    starts unsummed (a ``lax.fori_loop`` adds its counter, and its bound when it is a while loop)."""

    eqn = index.equation(deferral.loop)
    if eqn.primitive.name == "scan":
        groups = scan_operand_groups(eqn.params)
        n_carry = groups[1] if groups else -1
    else:
        n_carry = len(eqn.invars) - eqn.params["cond_nconsts"] - eqn.params["body_nconsts"]
    if loop_function_of(eqn) == "fori_loop":
        n_carry -= 1 if eqn.primitive.name == "scan" else 2
    return len(deferral.carries.get(deferral.loop, ())) == n_carry


def patch_of(subject: "Subject", group: FindingGroup, built: Built) -> "Patch | None":
    """The change as code (a diff of the user's file, else a snippet)."""

    sources = tuple(c.source for c in group.equations) if group.kind == HOIST else ()
    full = tuple(_full_source(subject, c.equation_id) for c in group.equations) if group.kind == HOIST else ()
    values = group_values(group, subject.input_names)
    request = PatchRequest(kind=group.kind, route=built.route, axes=built.axes or group_axes(group), values=values,
                           loop_source=built.loop_source, collective_sources=full or sources,
                           whole_carry=built.whole_carry, inputs=subject.input_names,
                           primitive=group.equations[0].primitive if group.equations else "",
                           specs=argument_specs_text(argument_specs(subject.compiled, subject.input_names)), step=built.step,
                           computed=frozenset(op.value for c in group.findings for op in c.operands
                                              if op.computed and op.value),
                           scalings=loss_scalings(group.findings))
    try:
        return patch_for(request)
    except Exception:  # a patch is a convenience: its absence never hides the checked rewrite
        return None


def _full_source(subject: "Subject", eqn_id: str) -> str:
    return _source_of(EquationIndex(subject.traced.jaxpr), eqn_id)


def _jaxpr_loop(index: EquationIndex, source: str, trip_count: int | None) -> str:
    """The jaxpr loop a compiled while loop comes from: the same line and trip count, outermost first."""

    loops = [i for i in index.ids() if index.equation(i).primitive.name in ("scan", "while")]
    same = [i for i in loops if short_source(equation_source(index.equation(i), own=True)) == source
            and index.equation(i).params.get("length", trip_count) == trip_count]
    found = sorted(same or [i for i in loops if index.equation(i).params.get("length") == trip_count],
                   key=lambda i: i.count("/"))
    if not found:
        raise Unsupported(f"shardscope finds no loop of the jaxpr for the compiled loop at {source or 'an unknown line'}.")
    return found[0]


def _after(c: "CompiledCollective", equations: Sequence["Collective"]) -> int | None:
    """How often ``c`` runs once its equations moved: their verdict's count (the loops they stay in)."""
    counts = {e.verdict.executions_after for e in equations if e.equation_id in c.equations}
    return counts.pop() if len(counts) == 1 else None
