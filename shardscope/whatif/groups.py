"""Which findings one rewrite fixes together, and which sums in loops are refused.

A user fixes a loop, not a collective: ``step_fixed`` casts every parameter before the scan and
sums every gradient after it. So the flagged collectives of one program are grouped by what
the fix does (a sum moved after its loop, a collective moved before it) and the outermost loop
they leave. A ``shard_map`` program's groups come from the jaxpr view (its collectives are the
program's own, each paired with the compiled ones it becomes); a jit program's from the
compiled plan (the partitioner writes its sums). The sums a loop needs where they are, and the
non-sum reductions, are groups too, refused with the reason in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from shardscope.engine.jaxpr.dataflow import loops
from shardscope.engine.jaxpr.model import from_jaxpr
from shardscope.engine.jaxpr.verdicts import DEFERRABLE, LOOP_INVARIANT, NEEDED, REDUCTIONS
from shardscope.collective_kinds import PSUM_INVARIANT, REDUCES_BY, SUM_KINDS
from shardscope.engine.pytree_paths import gradient_label, labelled_argument
from shardscope.whatif.deferral import SHARD_MAP, EquationIndex, Refused, plan_deferral

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledPlan
    from shardscope.engine.jaxpr.dataflow import Collective
    from shardscope.whatif.subject import Subject

DEFER, HOIST = "defer", "hoist"
"""The two rewrites: a sum moved after its loop, a loop-invariant collective moved before it."""

OTHER_REDUCTIONS = REDUCES_BY
"""Reductions over devices that are not sums: they do not commute with a sum over iterations."""


@dataclass(frozen=True)
class FindingGroup:
    """Findings rewritten together: one kind of rewrite, one loop (the outermost they leave:
    a jaxpr loop id for a ``shard_map`` program, a compiled while's name for a jit one), the
    jaxpr and compiled collectives, and the reason when the group is refused (moving them would
    change the result) or when shardscope cannot rewrite it (``unsupported``: the fix may be
    right, the rewriter does not make it)."""

    kind: str
    loop: str
    equations: tuple["Collective", ...] = ()
    findings: tuple["CompiledCollective", ...] = ()
    refusal: str = ""
    unsupported: str = ""


def finding_groups(subject: "Subject") -> list[FindingGroup]:
    """Every group of ``subject``'s findings (see the module)."""
    return _shard_map_groups(subject) if subject.style == SHARD_MAP else _jit_groups(subject)


def _shard_map_groups(subject: "Subject") -> list[FindingGroup]:
    """The flagged jaxpr collectives by verdict and outermost loop left, with the compiled
    collectives they pair with; the reductions a loop needs, refused with the reason."""

    grouped: dict[tuple[str, str], list[Collective]] = {}
    refused: dict[str, list[Collective]] = {}
    index = EquationIndex(subject.traced.jaxpr)
    for c in subject.collectives:
        kind = c.verdict_kind
        if kind in (DEFERRABLE, LOOP_INVARIANT) and c.verdict.loop_ids:
            grouped.setdefault((DEFER if kind == DEFERRABLE else HOIST, c.verdict.loop_ids[-1]), []).append(c)
        elif kind == NEEDED and c.in_loop and (c.primitive in REDUCTIONS or c.primitive in OTHER_REDUCTIONS):
            refused.setdefault(_refusal(index, c), []).append(c)
    groups = [FindingGroup(kind, loop, tuple(found), _paired(subject.plan, found))
              for (kind, loop), found in grouped.items()]
    groups += [FindingGroup(DEFER, found[-1].loop_ids[-1], tuple(found), _paired(subject.plan, found), reason)
               for reason, found in refused.items()]
    paired = {c.name for g in groups for c in g.findings}
    for flagged in subject.plan.flagged:
        if flagged.name not in paired:
            groups.append(FindingGroup(DEFER if flagged.verdict_kind == DEFERRABLE else HOIST, "", (), (flagged,),
                                       unsupported=(f"the partitioner writes this {flagged.kind} (no collective of the "
                                                    "program pairs with it): shardscope rewrites the collectives a "
                                                    "shard_map program writes.")))
    return groups


def _refusal(index: EquationIndex, c: "Collective") -> str:
    """Why a reduction a loop needs is not moved, as precisely as the program says: a max is no
    sum; else where the unsummed value would go (:mod:`type_reach`); else the verdict's reason."""
    if c.primitive in OTHER_REDUCTIONS:
        return (f"a {c.primitive} takes the {OTHER_REDUCTIONS[c.primitive]} over devices, not a sum: it does not "
                "commute with the sum over iterations, so it cannot move after the loop.")
    if c.primitive == PSUM_INVARIANT and c.loop_ids:
        try:
            plan_deferral(index, {c.equation_id: frozenset(c.axes)}, c.loop_ids[-1], SHARD_MAP)
        except Refused as exc:
            return exc.reason
        except Exception:  # the analysis of a program it was not meant for: the verdict's words stand
            pass
    return c.verdict.reason


def _jit_groups(subject: "Subject") -> list[FindingGroup]:
    """The flagged compiled collectives of a jit program by verdict and outermost loop left;
    the sums a loop needs, refused with their verdict's reason."""

    grouped: dict[str, list[CompiledCollective]] = {}
    groups = []
    for c in subject.plan.collectives:
        if c.verdict_kind == DEFERRABLE and c.verdict.loop_ids:
            grouped.setdefault(c.verdict.loop_ids[0], []).append(c)  # outermost first
        elif c.verdict_kind == LOOP_INVARIANT:
            groups.append(FindingGroup(HOIST, "", (), (c,), unsupported=(
                f"the partitioner writes this loop-invariant {c.kind}: shardscope moves the collectives a shard_map "
                f"program writes. The fix: {c.verdict.fix}")))
        elif c.verdict_kind == NEEDED and c.in_loop and c.kind in SUM_KINDS:
            groups.append(FindingGroup(DEFER, "", (), (c,), c.verdict.reason))
    return [FindingGroup(DEFER, loop, (), tuple(found)) for loop, found in grouped.items()] + groups


def _paired(plan: "CompiledPlan", found: Sequence["Collective"]) -> tuple["CompiledCollective", ...]:
    """The compiled collectives that the jaxpr collectives ``found`` become."""
    ids = {c.equation_id for c in found}
    return tuple(c for c in plan.collectives if ids & set(c.equations))


# --------------------------------------------------------------------------- in words


def loop_words(subject: "Subject", group: FindingGroup) -> str:
    """The loop the rewrite moves out of, as the user wrote it (``the lax.scan at step.py:56 (step)``)."""

    if group.equations and group.loop:
        for loop in loops(from_jaxpr(subject.traced.jaxpr), tuple(group.equations)):
            if loop.equation_id == group.loop:
                return loop.words
    if group.findings and group.findings[0].loops:
        found = group.findings[0].loops
        compiled_loop = next((w for w in found if w.name == group.loop), found[0])
        return f"the loop at {compiled_loop.source}" if compiled_loop.source else f"the while loop {compiled_loop.name}"
    return "its loop"


def group_values(group: FindingGroup, inputs: Sequence[str]) -> tuple[str, ...]:
    """The values the rewrite moves, by the arguments they belong to, in the arguments' order:
    the compiled view's names when they all name arguments (a gradient's label, ``grad(params['b'])``,
    names its argument), else the jaxpr view's."""
    compiled = [labelled_argument(op.value) for c in group.findings for op in c.operands if op.value]
    jaxpr = [labelled_argument(c.value) for c in group.equations if c.value]
    names = compiled if compiled and set(compiled) <= set(inputs) else (jaxpr or compiled)
    order = {name: k for k, name in enumerate(inputs)}
    return tuple(sorted(dict.fromkeys(names), key=lambda name: order.get(name, len(order))))


def group_labels(group: FindingGroup, inputs: Sequence[str]) -> tuple[str, ...]:
    """:func:`group_values` as the views label them: a value the group's collectives carry as an
    argument's gradient is ``grad(params['W1'])`` (what a rewrite moves out of the loop is the sum
    of the gradient, not of the weight), any other by its argument's path."""
    labels = {op.value for c in group.findings for op in c.operands} | {c.value for c in group.equations}
    return tuple(gradient_label(v) if gradient_label(v) in labels else v for v in group_values(group, inputs))


def group_axes(group: FindingGroup) -> tuple[str, ...]:
    """The mesh axes the group's collectives work over."""
    axes = [a for c in group.equations for a in c.axes] or [a for c in group.findings for a in (c.axes or ())]
    return tuple(dict.fromkeys(axes))
