"""What would the fix buy? Each flagged finding of a program, rewritten the way a user would fix
it, checked before it is reported.

For every group of flagged collectives (the sums a loop only accumulates, deferrable out of one
loop; the collectives whose operands do not change inside one loop) the traced program is
rewritten (:mod:`~shardscope.engine.deferral`, :mod:`~shardscope.engine.hoisting`,
:mod:`~shardscope.engine.explicit_axes`, run by :mod:`~shardscope.engine.retrace`), compiled,
planned and run on the same arguments as the original: a :class:`Rewrite` says ``verified``
only when its compiled plan runs the collectives as often as the rewrite predicts and its
outputs match the original's (:mod:`~shardscope.engine.rewrite_checks`). Sums that a loop needs
where they are (their result read inside it, something else added into the accumulator) are
listed as ``refused``, with the reason.

How the lead calls it::

    result = what_if(step, params, xs, ys)          # traces, compiles, plans, rewrites, checks
    for r in result.rewrites:
        r.status, r.reason, r.outputs_match, r.summary()
        r.findings                                    # the compiled collectives it fixes
        r.program.function, r.program.plan            # the rewritten program, its compiled plan
        r.program.pipeline_program(original)          # the same, as a PipelineProgram
        r.patch.text if r.patch else None             # the change as a unified diff or a snippet

or, on what the pipeline already has, ``rewrites_of(Subject(...))``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from shardscope.engine.deferral import EXPLICIT, SHARD_MAP, Deferral, EquationIndex, Refused, plan_deferral
from shardscope.engine.rewrite_checks import PlanCheck, plan_check
from shardscope.engine.retrace import Edits, RetraceError, Retracer

if TYPE_CHECKING:
    import jax
    from jax.sharding import Mesh

    from shardscope.engine.compiled import CompiledCollective, CompiledPlan
    from shardscope.engine.dataflow import Collective
    from shardscope.engine.patch import Patch
    from shardscope.measure.crosscheck import GradientCheck
    from shardscope.pipeline.workload import PipelineProgram

__all__ = ["DEFER", "HOIST", "VERIFIED", "REFUSED", "FAILED", "STILL_IN_LOOP", "OUTPUTS_DIFFER", "NO_SAVING",
           "Subject", "RewrittenProgram", "Rewrite", "WhatIf", "subject_of", "rewrites_of", "what_if",
           "rewritten_program", "verify"]

DEFER, HOIST = "defer", "hoist"
"""The two rewrites: a sum moved after its loop, a loop-invariant collective moved before it."""

VERIFIED, REFUSED, FAILED, STILL_IN_LOOP, OUTPUTS_DIFFER, NO_SAVING = (
    "verified", "refused", "failed", "still_in_loop", "outputs_differ", "no_saving")
"""A rewrite's status: only ``verified`` is a saving."""

AUTO = "auto"
"""The route of an Auto-axes program: traced again with Explicit axes, then deferred there."""


# --------------------------------------------------------------------------- what it takes


@dataclass(frozen=True)
class Subject:
    """The program a what-if rewrites: the jitted function, the (dynamic) arguments it was
    traced with, its trace, compiled program and plan, the jaxpr view's collectives, and the
    concrete placed arguments both programs run on for the output check."""

    name: str
    function: Any
    args: tuple
    kwargs: dict
    traced: "jax.stages.Traced"
    compiled: "jax.stages.Compiled"
    plan: "CompiledPlan"
    collectives: tuple["Collective", ...]
    input_names: tuple[str, ...]
    run_arguments: tuple[tuple, dict]
    mesh: "Mesh | None" = None
    style: str = AUTO

    def context(self) -> contextlib.AbstractContextManager:
        """The mesh context the program traces and runs under (Explicit axes need one)."""
        return _mesh_context(self.mesh, self.style)


def subject_of(fn: Callable, args: tuple = (), kwargs: dict | None = None, *, name: str | None = None,
               run_arguments: tuple[tuple, dict] | None = None) -> Subject:
    """Trace, compile and plan ``fn(*args, **kwargs)`` (arrays or ``ShapeDtypeStruct``s; call it
    under ``jax.set_mesh`` for Explicit axes); ``run_arguments`` are the concrete arguments both
    programs run on (default: the arguments, filled as the pipeline fills them, placed as the
    compiled program takes them)."""
    import jax

    from shardscope.engine.compiled import plan_of
    from shardscope.engine.dead_code import mesh_and_style
    from shardscope.engine.inspection import argument_names, inspect_traced, pytree_names

    kwargs = dict(kwargs or {})
    name = name or getattr(fn, "__name__", type(fn).__name__)
    jitted = fn if hasattr(fn, "trace") else jax.jit(fn)
    traced = jitted.trace(*args, **kwargs)
    compiled = traced.lower().compile()
    names = argument_names(fn, args, kwargs)
    plan = plan_of(traced, compiled, input_names=names)
    inspection = inspect_traced(traced, name, names, pytree_names(traced.out_info, "out"))
    mesh, style = mesh_and_style(traced.jaxpr, compiled)
    if run_arguments is None:
        from shardscope.sources.examples import materialize

        run_arguments = jax.device_put(materialize((tuple(args), kwargs), 0), compiled.input_shardings)
    return Subject(name, jitted, tuple(args), kwargs, traced, compiled, plan, inspection.collectives, tuple(names),
                   (tuple(run_arguments[0]), dict(run_arguments[1])), mesh, style)


# --------------------------------------------------------------------------- what it gives


@dataclass(frozen=True)
class RewrittenProgram:
    """The rewritten program: ``function`` takes the original's arguments (traced with
    ``arguments``; the original's run arguments go through ``place``), with its trace, compiled
    program and plan. ``function.trace`` and calls enter the mesh the program needs."""

    function: "MeshBound"
    arguments: tuple[tuple, dict]
    traced: "jax.stages.Traced"
    compiled: "jax.stages.Compiled"
    plan: "CompiledPlan"
    place: Callable[[tuple, dict], tuple[tuple, dict]]
    jaxpr_collectives: tuple["Collective", ...] = ()

    def run(self, args: tuple, kwargs: dict) -> Any:
        """The compiled program on the original's run arguments."""
        placed_args, placed_kwargs = self.place(args, kwargs)
        with self.function.context():
            return self.compiled(*placed_args, **placed_kwargs)

    def pipeline_program(self, original: "PipelineProgram", name: str | None = None) -> "PipelineProgram":
        """``original`` with this program in its place, for the pipeline to trace, compile, time
        and project beside the original (the same names, checks and run arguments: the compiled
        program places them as it takes them)."""
        return dataclasses.replace(original, name=name or f"{original.name} (what-if)",
                                   description=f"shardscope's rewrite of {original.name}",
                                   function=self.function, arguments=self.arguments)


@dataclass(frozen=True)
class Rewrite:
    """One rewrite of one group of findings, and what came of it.

    ``findings`` are the compiled collectives it moves (those of the original's plan),
    ``equations`` the jaxpr collectives; ``status`` is :data:`VERIFIED` only when ``plan_check``
    and the output check both passed; ``reason`` says why not (or what was checked);
    ``memory_bytes`` is what a hoisted result keeps alive through the loop, per device.
    """

    kind: str
    route: str
    loop: str
    loop_words: str
    findings: tuple["CompiledCollective", ...]
    equations: tuple["Collective", ...]
    status: str
    reason: str
    outputs_match: bool | None = None
    output_check: "GradientCheck | None" = None
    plan_check: PlanCheck | None = None
    program: RewrittenProgram | None = None
    memory_bytes: int = 0
    patch: "Patch | None" = None
    values: tuple[str, ...] = ()
    axes: tuple[str, ...] = ()

    @property
    def verified(self) -> bool:
        """True when the rewrite is a checked saving."""
        return self.status == VERIFIED

    def summary(self) -> str:
        """One line: what moved, where, the runs per call it makes, and the status."""
        what = ", ".join(self.values) or "its values"
        kind = self.plan_check.kind if self.plan_check else (self.findings[0].kind if self.findings else "collective")
        primitive = self.equations[0].primitive if self.equations else ""
        noun = primitive if primitive in _OTHER_REDUCTIONS else ("sum" if self.kind == DEFER else kind)
        subject = f"the {noun} of {what}"
        if self.status == REFUSED:
            return f"{subject} in {self.loop_words}: not rewritten: {self.reason}"
        verb = "moved out of" if self.kind == DEFER else "moved before"
        runs = ""
        if self.plan_check is not None:
            before, after = self.plan_check.instruction_runs
            runs = f": {kind} {_text(before)} -> {_text(after)} runs per call"
        return f"{subject} {verb} {self.loop_words}{runs} ({self.status}{': ' + self.reason if self.reason else ''})"


@dataclass(frozen=True)
class WhatIf:
    """The rewrites of one program."""

    subject: Subject
    rewrites: tuple[Rewrite, ...]

    @property
    def verified(self) -> tuple[Rewrite, ...]:
        """The rewrites that are checked savings."""
        return tuple(r for r in self.rewrites if r.verified)

    def __str__(self) -> str:
        if not self.rewrites:
            return f"{self.subject.name}: no collective runs in a loop without needing to; nothing to rewrite."
        return "\n".join(f"{self.subject.name}: {r.summary()}" for r in self.rewrites)


def what_if(fn: Callable, *args: Any, **kwargs: Any) -> WhatIf:
    """The rewrites of ``fn(*args, **kwargs)``'s flagged findings, each checked (see the module)."""
    subject = subject_of(fn, args, kwargs)
    return WhatIf(subject, rewrites_of(subject))


# --------------------------------------------------------------------------- the groups of findings


@dataclass(frozen=True)
class _Group:
    """Findings rewritten together: one kind, one loop (the outermost they leave)."""

    kind: str
    loop: str
    equations: tuple["Collective", ...] = ()
    findings: tuple["CompiledCollective", ...] = ()
    refusal: str = ""


def rewrites_of(subject: Subject) -> tuple[Rewrite, ...]:
    """Every rewrite of ``subject``'s flagged findings, and the sums in loops it refuses."""
    groups = _shard_map_groups(subject) if subject.style == SHARD_MAP else _jit_groups(subject)
    return tuple(_rewrite(subject, group) for group in groups)


def _shard_map_groups(subject: Subject) -> list[_Group]:
    """The flagged jaxpr collectives by verdict and outermost loop left, with the compiled
    collectives they pair with; the sums a loop needs, refused with their verdict's reason."""
    from shardscope.engine.verdicts import DEFERRABLE, LOOP_INVARIANT, NEEDED, REDUCTIONS

    grouped: dict[tuple[str, str], list[Collective]] = {}
    refused: dict[str, list[Collective]] = {}
    index = EquationIndex(subject.traced.jaxpr)
    for c in subject.collectives:
        kind = c.verdict_kind
        if kind in (DEFERRABLE, LOOP_INVARIANT) and c.verdict.loop_ids:
            grouped.setdefault((DEFER if kind == DEFERRABLE else HOIST, c.verdict.loop_ids[-1]), []).append(c)
        elif kind == NEEDED and c.in_loop and (c.primitive in REDUCTIONS or c.primitive in _OTHER_REDUCTIONS):
            refused.setdefault(_refusal(index, c), []).append(c)
    groups = [_Group(kind, loop, tuple(found), _paired(subject.plan, found)) for (kind, loop), found in grouped.items()]
    groups += [_Group(DEFER, found[-1].loop_ids[-1], tuple(found), _paired(subject.plan, found), reason)
               for reason, found in refused.items()]
    paired = {c.name for g in groups for c in g.findings}
    for c in subject.plan.flagged:
        if c.name not in paired:
            groups.append(_Group(DEFER if c.verdict_kind == DEFERRABLE else HOIST, "", (), (c,),
                                 f"the partitioner writes this {c.kind} (no collective of the program pairs with it): "
                                 "shardscope rewrites the collectives a shard_map program writes."))
    return groups


_OTHER_REDUCTIONS = {"pmax": "max", "pmin": "min"}
"""Reductions over devices that are not sums: they do not commute with a sum over iterations."""


def _refusal(index: EquationIndex, c: "Collective") -> str:
    """Why a reduction a loop needs is not moved, as precisely as the program says: a max is no
    sum; else where the unsummed value would go (:mod:`type_reach`); else the verdict's reason."""
    if c.primitive in _OTHER_REDUCTIONS:
        return (f"a {c.primitive} takes the {_OTHER_REDUCTIONS[c.primitive]} over devices, not a sum: it does not "
                "commute with the sum over iterations, so it cannot move after the loop.")
    if c.primitive == "psum_invariant" and c.loop_ids:
        try:
            plan_deferral(index, {c.equation_id: frozenset(c.axes)}, c.loop_ids[-1], SHARD_MAP)
        except Refused as exc:
            return exc.reason
        except Exception:  # the analysis of a program it was not meant for: the verdict's words stand
            pass
    return c.verdict.reason


def _jit_groups(subject: Subject) -> list[_Group]:
    """The flagged compiled collectives of a jit program by verdict and outermost loop left;
    the sums a loop needs, refused with their verdict's reason."""
    from shardscope.engine.compiled_verdicts import DEFERRABLE, LOOP_INVARIANT, NEEDED, SUM_KINDS

    grouped: dict[str, list[CompiledCollective]] = {}
    groups = []
    for c in subject.plan.collectives:
        if c.verdict_kind == DEFERRABLE and c.verdict.loop_ids:
            grouped.setdefault(c.verdict.loop_ids[0], []).append(c)
        elif c.verdict_kind == LOOP_INVARIANT:
            groups.append(_Group(HOIST, "", (), (c,), "the partitioner writes this loop-invariant "
                                 f"{c.kind}: shardscope rewrites the collectives a shard_map program writes. "
                                 f"The fix: {c.verdict.fix}"))
        elif c.verdict_kind == NEEDED and c.in_loop and c.kind in SUM_KINDS:
            groups.append(_Group(DEFER, "", (), (c,), c.verdict.reason))
    return [_Group(DEFER, loop, (), tuple(found)) for loop, found in grouped.items()] + groups


def _paired(plan: "CompiledPlan", found: Sequence["Collective"]) -> tuple["CompiledCollective", ...]:
    ids = {c.equation_id for c in found}
    return tuple(c for c in plan.collectives if ids & set(c.equations))


# --------------------------------------------------------------------------- one rewrite


def _rewrite(subject: Subject, group: _Group) -> Rewrite:
    """The rewrite of one group: built, compiled, planned, run and checked (or refused)."""
    base = Rewrite(kind=group.kind, route=subject.style, loop=group.loop, loop_words=_loop_words(subject, group),
                   findings=group.findings, equations=group.equations, status=REFUSED, reason=group.refusal,
                   values=_values(group, subject.input_names), axes=_axes(group))
    if group.refusal:
        return base
    try:
        built = _build(subject, group)
    except Refused as exc:
        return dataclasses.replace(base, reason=exc.reason)
    except (RetraceError, Exception) as exc:  # JAX refused the rewritten program: say so, never a saving
        return dataclasses.replace(base, status=FAILED, reason=f"the rewritten program does not trace or compile: "
                                                               f"{_first_line(exc)}")
    base = dataclasses.replace(base, route=built.route, memory_bytes=built.memory, patch=_patch(subject, group, built))
    return verify(subject, base, built.program, built.kind, built.moved)


def verify(subject: Subject, rewrite: Rewrite, program: RewrittenProgram, kind: str,
           moved: Sequence[tuple["CompiledCollective", int | None]]) -> Rewrite:
    """``rewrite`` with ``program`` checked: its compiled plan runs the ``kind`` collectives of
    ``moved`` as often as each says (``(original collective, runs per call after)``), and its
    outputs on the subject's run arguments match the original's. Only then ``verified``."""
    check = plan_check(subject.plan, program.plan, kind, moved)
    base = dataclasses.replace(rewrite, program=program, plan_check=check)
    try:
        outputs = _compare(subject, program)
    except Exception as exc:
        return dataclasses.replace(base, status=FAILED, reason=f"the rewritten program fails to run: {_first_line(exc)}")
    matched = outputs is None or outputs.agree
    base = dataclasses.replace(base, outputs_match=matched, output_check=outputs)
    if not matched:
        return dataclasses.replace(base, status=OUTPUTS_DIFFER, reason=outputs.warning or "its outputs differ")
    if not check.saves:
        return dataclasses.replace(base, status=NO_SAVING, reason=(
            f"the compiler already runs the {kind} {_text(check.runs_before)} times per call here: the rewrite "
            "changes nothing this backend runs"))
    if not check.ok:
        return dataclasses.replace(base, status=STILL_IN_LOOP, reason=check.reason())
    tolerance = f"within {outputs.tolerance:.1e}" if outputs is not None else "(no outputs to compare)"
    return dataclasses.replace(base, status=VERIFIED, reason=f"outputs match {tolerance}")


@dataclass(frozen=True)
class _Built:
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


def _build(subject: Subject, group: _Group) -> _Built:
    """The rewritten program of one group, compiled and planned."""
    from shardscope.engine.hoisting import plan_hoist
    from shardscope.engine.jaxpr_pairing import HLO_KIND

    _check_signature(subject)
    index = EquationIndex(subject.traced.jaxpr)
    moved = [(c, _after(c, group.equations)) for c in group.findings]
    if group.kind == HOIST:
        hoist = plan_hoist(index, tuple(c.equation_id for c in group.equations), group.loop)
        program = rewritten_program(subject, subject.traced.jaxpr, hoist.edits(index))
        return _Built(program, moved, HLO_KIND[group.equations[0].primitive], SHARD_MAP, hoist.memory_bytes,
                      _source_of(index, group.loop))
    if subject.style == SHARD_MAP:
        reductions = {c.equation_id: frozenset(c.axes) for c in group.equations}
        deferral = plan_deferral(index, reductions, group.loop, SHARD_MAP)
        program = rewritten_program(subject, subject.traced.jaxpr, deferral.edits(index))
        return _Built(program, moved, "all-reduce", SHARD_MAP, 0, _source_of(index, group.loop),
                      _whole_carry(index, deferral))
    return _build_jit(subject, group, index)


def _build_jit(subject: Subject, group: _Group, index: EquationIndex) -> _Built:
    """The Explicit-axes route, on the program itself or on the Auto program traced again with
    Explicit axes."""
    import jax

    from shardscope.engine.explicit_axes import as_explicit

    loop = group.findings[0].loops[[w.name for w in group.findings[0].loops].index(group.loop)]
    moved = [(c, c.verdict.executions_after) for c in group.findings]
    kind = group.findings[0].kind
    if subject.style == EXPLICIT:
        loop_id = _jaxpr_loop(index, loop.source, loop.trip_count)
        deferral = _explicit_deferral(index, loop_id)
        program = rewritten_program(subject, subject.traced.jaxpr, deferral.edits(index), mesh=subject.mesh, style=EXPLICIT)
        return _Built(program, moved, kind, EXPLICIT, 0, _source_of(index, loop_id), _whole_carry(index, deferral))
    if subject.mesh is None:
        raise Refused("the program's arguments name no mesh: there is nothing to shard with Explicit axes.")
    leaves = jax.tree.leaves((subject.args, subject.kwargs))
    converted = as_explicit(subject.traced.jaxpr, subject.mesh, jax.tree.leaves(subject.compiled.input_shardings), leaves)
    explicit_index = EquationIndex(converted.traced.jaxpr)
    loop_id = _jaxpr_loop(explicit_index, loop.source, loop.trip_count)
    deferral = _explicit_deferral(explicit_index, loop_id)
    program = rewritten_program(subject, converted.traced.jaxpr, deferral.edits(explicit_index), mesh=converted.mesh,
                       style=EXPLICIT, converted=converted)
    return _Built(program, moved, kind, AUTO, 0, _source_of(index, _jaxpr_loop(index, loop.source, loop.trip_count)),
                  _whole_carry(explicit_index, deferral))


def _explicit_deferral(index: EquationIndex, loop_id: str) -> "Deferral":
    """The deferral of every sum the partitioner writes inside ``loop_id`` that the loop only
    accumulates (each checked alone: a forward pass's sum read by a ``tanh`` is not one)."""
    from shardscope.engine.explicit_axes import implicit_sums
    from shardscope.engine.type_reach import type_reach

    candidates = implicit_sums(index, loop_id)
    accumulated = {}
    reasons = []
    for eqn_id, axes in candidates.items():
        reach = type_reach(index.jaxpr, {eqn_id: axes}, frozenset({loop_id}))
        if not reach.leaks and reach.summed.get(loop_id):
            accumulated[eqn_id] = axes
        elif reach.leaks:
            reasons.append(reach.first_leak)
    if not accumulated:
        why = f" ({reasons[0]})" if reasons else ""
        raise Refused(f"no sum the partitioner writes in the loop is only accumulated, as the jaxpr shows it{why}.")
    return plan_deferral(index, accumulated, loop_id, EXPLICIT)


def _source_of(index: EquationIndex, eqn_id: str) -> str:
    """``/path/file.py:56 (step)``: the user's line that made the equation."""
    from shardscope.engine.jaxpr_model import _source

    return _source(index.equation(eqn_id), own=True)


def _whole_carry(index: EquationIndex, deferral: "Deferral") -> bool:
    """True when every carry of the loop the sums leave is an accumulator the rewrite starts unsummed."""
    from shardscope.engine.jaxpr_model import _scan_groups

    eqn = index.equation(deferral.loop)
    if eqn.primitive.name == "scan":
        groups = _scan_groups(eqn.params)
        n_carry = groups[1] if groups else -1
    else:
        n_carry = len(eqn.invars) - eqn.params["cond_nconsts"] - eqn.params["body_nconsts"]
    return len(deferral.carries.get(deferral.loop, ())) == n_carry


def _patch(subject: Subject, group: _Group, built: _Built) -> "Patch | None":
    """The change as code (a diff of the user's file, else a snippet)."""
    from shardscope.engine.patch import PatchRequest, patch_for

    sources = tuple(c.source for c in group.equations) if group.kind == HOIST else ()
    full = tuple(_full_source(subject, c.equation_id) for c in group.equations) if group.kind == HOIST else ()
    values = _values(group, subject.input_names)
    request = PatchRequest(kind=group.kind, route=built.route, axes=_axes(group), values=values,
                           loop_source=built.loop_source, collective_sources=full or sources,
                           whole_carry=built.whole_carry, inputs=subject.input_names,
                           primitive=group.equations[0].primitive if group.equations else "",
                           replicated=_replicated(subject, values))
    try:
        return patch_for(request)
    except Exception:  # a patch is a convenience: its absence never hides the checked rewrite
        return None


def _full_source(subject: Subject, eqn_id: str) -> str:
    return _source_of(EquationIndex(subject.traced.jaxpr), eqn_id)


def _replicated(subject: Subject, values: tuple[str, ...]) -> bool:
    """True when the inputs the values belong to are replicated (their reshard keeps no other sharding)."""
    import jax

    shardings = jax.tree.leaves(subject.compiled.input_shardings)
    for name, sharding in zip(subject.input_names, shardings):
        if any(name == v or name.startswith(v.split("[")[0]) for v in values):
            spec = getattr(sharding, "spec", None)
            if spec is not None and any(entry is not None for entry in spec):
                return False
    return True


def _jaxpr_loop(index: EquationIndex, source: str, trip_count: int | None) -> str:
    """The jaxpr loop a compiled while loop comes from: the same line and trip count, outermost first."""
    from shardscope.engine.jaxpr_model import _source, short_source

    loops = [i for i in index.ids() if index.equation(i).primitive.name in ("scan", "while")]
    same = [i for i in loops if short_source(_source(index.equation(i), own=True)) == source
            and index.equation(i).params.get("length", trip_count) == trip_count]
    found = sorted(same or [i for i in loops if index.equation(i).params.get("length") == trip_count],
                   key=lambda i: i.count("/"))
    if not found:
        raise Refused(f"shardscope finds no loop of the jaxpr for the compiled loop at {source or 'an unknown line'}.")
    return found[0]


def _after(c: "CompiledCollective", equations: Sequence["Collective"]) -> int | None:
    """How often ``c`` runs once its equations moved: their verdict's count (the loops they stay in)."""
    counts = {e.verdict.executions_after for e in equations if e.equation_id in c.equations}
    return counts.pop() if len(counts) == 1 else None


# --------------------------------------------------------------------------- the rewritten program


@dataclass(frozen=True)
class MeshBound:
    """A jitted function traced and called under the mesh it needs (Explicit axes need one)."""

    jitted: Any
    mesh: "Mesh | None" = None
    style: str = SHARD_MAP

    def context(self) -> contextlib.AbstractContextManager:
        """``jax.set_mesh(mesh)`` for Explicit axes, else nothing."""
        return _mesh_context(self.mesh, self.style)

    def trace(self, *args: Any, **kwargs: Any) -> "jax.stages.Traced":
        """``jitted.trace`` under the mesh."""
        with self.context():
            return self.jitted.trace(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.context():
            return self.jitted(*args, **kwargs)


def rewritten_program(subject: Subject, closed: Any, edits: Edits, mesh: "Mesh | None" = None, style: str = SHARD_MAP,
             converted: Any = None) -> RewrittenProgram:
    """The program ``closed`` (the subject's jaxpr, or its Explicit-axes trace ``converted``) run
    with ``edits``: jitted over the subject's arguments, traced, compiled and planned."""
    import jax

    from shardscope.engine.compiled import plan_of
    from shardscope.engine.inspection import inspect_traced, pytree_names

    in_tree = jax.tree.structure((subject.args, subject.kwargs))
    out_tree = jax.tree.structure(subject.traced.out_info)

    def rewritten(*args: Any, **kwargs: Any) -> Any:
        leaves = jax.tree.leaves((args, kwargs))
        return jax.tree.unflatten(out_tree, Retracer(edits).run(closed, leaves))

    rewritten.__name__ = subject.name
    rewritten.__qualname__ = subject.name
    function = MeshBound(jax.jit(rewritten), mesh, style)
    arguments: tuple[tuple, dict] = (subject.args, subject.kwargs)
    place: Callable[[tuple, dict], tuple[tuple, dict]] = _as_given
    if converted is not None:
        arguments = jax.tree.unflatten(in_tree, converted.arguments(jax.tree.leaves(arguments)))
        place = _placer(converted, in_tree)
    traced = function.trace(*arguments[0], **arguments[1])
    with function.context():
        compiled = traced.lower().compile()
    plan = plan_of(traced, compiled, input_names=subject.input_names)
    names_out = pytree_names(traced.out_info, "out")
    inspection = inspect_traced(traced, subject.name, subject.input_names, names_out)
    return RewrittenProgram(function, arguments, traced, compiled, plan, place, inspection.collectives)


def _as_given(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    return args, kwargs


def _placer(converted: Any, in_tree: Any) -> Callable[[tuple, dict], tuple[tuple, dict]]:
    """The original's run arguments on the Explicit mesh of ``converted`` (the same devices and layout)."""
    import jax

    def place(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return jax.tree.unflatten(in_tree, converted.place(jax.tree.leaves((args, kwargs))))

    return place


def _check_signature(subject: Subject) -> None:
    """The rewrite takes the arguments the trace took: static ones are not rewritten."""
    import jax

    leaves = jax.tree.leaves((subject.args, subject.kwargs))
    if len(leaves) != len(subject.traced.jaxpr.jaxpr.invars):
        raise Refused("the program takes static (non-array) arguments: shardscope rewrites programs whose every "
                      "argument is an array or a jax.ShapeDtypeStruct.")


def _compare(subject: Subject, program: RewrittenProgram) -> "GradientCheck | None":
    """The rewritten program's outputs against the original's, on the same run arguments."""
    import jax
    import numpy as np

    from shardscope.measure.crosscheck import compare_results

    args, kwargs = subject.run_arguments
    with subject.context():
        original = jax.tree.map(np.asarray, subject.compiled(*args, **kwargs))
    rewritten = jax.tree.map(np.asarray, program.run(args, kwargs))
    checks = compare_results({"original": original, "rewritten": rewritten}, subject="outputs")
    if not checks and jax.tree.leaves(original):
        raise RetraceError("the rewritten program's outputs are not laid out as the original's")
    return checks[0] if checks else None


def _mesh_context(mesh: "Mesh | None", style: str) -> contextlib.AbstractContextManager:
    import jax

    if mesh is None or style not in (EXPLICIT, AUTO) or not hasattr(jax, "set_mesh"):
        return contextlib.nullcontext()
    types = [str(t) for t in getattr(mesh, "axis_types", ())]
    return jax.set_mesh(mesh) if types and all("Explicit" in t for t in types) else contextlib.nullcontext()


# --------------------------------------------------------------------------- words


def _loop_words(subject: Subject, group: _Group) -> str:
    """The loop the rewrite moves out of, as the user wrote it."""
    from shardscope.engine.dataflow import loops
    from shardscope.engine.jaxpr_model import from_jaxpr

    if group.equations and group.loop:
        for loop in loops(from_jaxpr(subject.traced.jaxpr), tuple(group.equations)):
            if loop.equation_id == group.loop:
                return loop.words
    if group.findings and group.findings[0].loops:
        compiled_loop = group.findings[0].loops[0] if not group.loop else next(
            (w for w in group.findings[0].loops if w.name == group.loop), group.findings[0].loops[0])
        return f"the loop at {compiled_loop.source}" if compiled_loop.source else f"the while loop {compiled_loop.name}"
    return "its loop"


def _values(group: _Group, inputs: Sequence[str]) -> tuple[str, ...]:
    """The values the rewrite moves, by the arguments they belong to, in the arguments' order:
    the compiled view's names when they all name arguments (it names a bias's gradient after its
    parameter), else the jaxpr view's."""
    compiled = [op.value for c in group.findings for op in c.operands if op.value]
    jaxpr = [c.value for c in group.equations if c.value]
    known = set(inputs)
    names = compiled if compiled and set(compiled) <= known else (jaxpr or compiled)
    order = {name: k for k, name in enumerate(inputs)}
    return tuple(sorted(dict.fromkeys(names), key=lambda name: order.get(name, len(order))))


def _axes(group: _Group) -> tuple[str, ...]:
    axes = [a for c in group.equations for a in c.axes] or [a for c in group.findings for a in (c.axes or ())]
    return tuple(dict.fromkeys(axes))


def _text(count: int | None) -> str:
    return "?" if count is None else f"{count:,}"


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
