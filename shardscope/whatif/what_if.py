"""What would the fix buy? Each flagged finding of a program, rewritten the way a user would fix
it, checked before it is reported.

For every group of flagged collectives (the sums a loop only accumulates, deferrable out of one
loop; the collectives whose operands do not change inside one loop) the traced program is
rewritten (:mod:`~shardscope.whatif.deferral`, :mod:`~shardscope.whatif.hoisting`,
:mod:`~shardscope.whatif.explicit_axes`, run by :mod:`~shardscope.whatif.retrace`), compiled,
planned and run on the same arguments as the original: a :class:`Rewrite` says ``verified``
only when its compiled plan runs the collectives as often as the rewrite predicts and its
outputs match the original's (:mod:`~shardscope.whatif.checks`). Sums that a loop needs
where they are (their result read inside it, something else added into the accumulator) are
listed as ``refused``, with the reason: ``refused`` says the rewrite would change the result.
A rewrite shardscope cannot make (a limitation of the rewriter, JAX refusing the rewritten
program) is ``failed``, with the whole reason.

How the lead calls it::

    result = what_if(step, params, xs, ys)          # traces, compiles, plans, rewrites, checks
    for r in result.rewrites:
        r.status, r.reason, r.outputs_match, r.summary()
        r.findings                                    # the compiled collectives it fixes
        r.program.function, r.program.plan            # the rewritten program, its compiled plan
        as_pipeline_program(r.program, original)  # the same, as a PipelineProgram (pipeline.what_if_programs)
        r.patch.text if r.patch else None             # the change as a unified diff or a snippet

or, on what the pipeline already has, ``rewrites_of(Subject(...))``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from shardscope.engine.pytree_paths import listed
from shardscope.engine.extensions import EXTENSIONS
from shardscope.whatif.build import build, patch_of
from shardscope.whatif.checks import PlanCheck, plan_check
from shardscope.whatif.deferral import EXPLICIT, SHARD_MAP, Refused, Unsupported
from shardscope.whatif.groups import (
    DEFER,
    HOIST,
    OTHER_REDUCTIONS,
    FindingGroup,
    finding_groups,
    group_axes,
    group_labels,
    loop_words,
)
from shardscope.whatif.retrace import exception_text
from shardscope.whatif.rewritten import RewrittenProgram, compare_outputs, rewritten_program
from shardscope.whatif.subject import AUTO, Subject, subject_from, subject_of

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.engine.jaxpr.dataflow import Collective
    from shardscope.measure.crosscheck import GradientCheck
    from shardscope.whatif.patch import Patch

__all__ = ["DEFER", "HOIST", "Attempt", "VERIFIED", "REFUSED", "FAILED", "STILL_IN_LOOP", "OUTPUTS_DIFFER", "NO_SAVING",
           "Subject", "RewrittenProgram", "Rewrite", "WhatIf", "subject_of", "rewrites_of", "what_if",
           "rewritten_program", "verify"]

VERIFIED, REFUSED, FAILED, STILL_IN_LOOP, OUTPUTS_DIFFER, NO_SAVING = (
    "verified", "refused", "failed", "still_in_loop", "outputs_differ", "no_saving")
"""A rewrite's status: only ``verified`` is a saving."""


ROUTE_WORDS = {SHARD_MAP: "the shard_map rewrite", EXPLICIT: "the Explicit-axes rewrite",
               AUTO: "the Explicit-axes rewrite"}
"""A route as the reasons name it."""

ROUTE_NAMES = {SHARD_MAP: "shard_map", EXPLICIT: "Explicit axes",
               AUTO: "Explicit axes (the Auto-axes program traced again with them)"}
"""A route as the what-if's text names it."""


@dataclass(frozen=True)
class Attempt:
    """A route a rewrite tried that did not give it: the route, its status and why."""

    route: str
    status: str
    reason: str

    def text(self) -> str:
        """``the Explicit-axes rewrite failed: ...``."""
        return f"{ROUTE_WORDS.get(self.route, self.route)} {_STATUS_WORDS.get(self.status, self.status)}: {self.reason}"


@dataclass(frozen=True, repr=False)
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
    tried: tuple["Attempt", ...] = ()

    @property
    def verified(self) -> bool:
        """True when the rewrite is a checked saving."""
        return self.status == VERIFIED

    def summary(self) -> str:
        """One line: what moved, where, the runs per call it makes, and the status."""
        what = _values_text(self.values)
        kind = self.plan_check.kind if self.plan_check else (self.findings[0].kind if self.findings else "collective")
        primitive = self.equations[0].primitive if self.equations else ""
        noun = primitive if primitive in OTHER_REDUCTIONS else ("sum" if self.kind == DEFER else kind)
        subject = f"the {noun} of {what}"
        if self.status == REFUSED:
            return f"{subject} in {self.loop_words}: not rewritten: {self.reason}"
        verb = "moved out of" if self.kind == DEFER else "moved before"
        runs = ""
        if self.plan_check is not None:
            before, after = self.plan_check.instruction_runs
            runs = f": {kind} {_text(before)} -> {_text(after)} runs per call"
        return f"{subject} {verb} {self.loop_words}{runs} ({self.status}{': ' + self.reason if self.reason else ''})"

    def __repr__(self) -> str:
        """``<Rewrite verified: the sum of params['W1'] moved out of ...>``: what a person reads, not
        the rewritten program's arrays (``.program``, ``.patch`` hold those)."""
        return f"<Rewrite {self.status}: {self.summary()}>"


class PrettyPrinter(Protocol):
    """What IPython's pretty printer offers :meth:`WhatIf._repr_pretty_` (IPython not required)."""

    def text(self, obj: str) -> None: ...


@dataclass(frozen=True, repr=False)
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

    def __repr__(self) -> str:
        """``<WhatIf of step: 1 rewrite, 1 verified>`` and each rewrite's line: a notebook cell that
        ends in ``insp.what_if()`` shows this, not the subject's arguments."""
        count = len(self.rewrites)
        head = f"<WhatIf of {self.subject.name}: {count} rewrite{'' if count == 1 else 's'}, {len(self.verified)} verified>"
        return "\n".join([head, *(f"  {r.summary()}" for r in self.rewrites)])

    def _repr_pretty_(self, printer: "PrettyPrinter", cycle: bool) -> None:
        printer.text(repr(self))


def what_if(fn: Callable, *args: object, **kwargs: object) -> WhatIf:
    """The rewrites of ``fn(*args, **kwargs)``'s flagged findings, each checked (see the module)."""
    subject = subject_of(fn, args, kwargs)
    return WhatIf(subject, rewrites_of(subject))


def rewrites_of(subject: Subject) -> tuple[Rewrite, ...]:
    """Every rewrite of ``subject``'s flagged findings, and the sums in loops it refuses."""
    return tuple(_rewrite(subject, group) for group in finding_groups(subject))


def _rewrite(subject: Subject, group: FindingGroup) -> Rewrite:
    """The rewrite of one group: built, compiled, planned, run and checked (or refused). A jit
    program's sum that its own route does not move (Explicit axes refuse its ``reshape``, the
    rewrite still runs it in the loop) is tried again through ``jax.shard_map``."""
    base = Rewrite(kind=group.kind, route=subject.style, loop=group.loop, loop_words=loop_words(subject, group),
                   findings=group.findings, equations=group.equations, status=REFUSED, reason=group.refusal,
                   values=group_labels(group, subject.input_names), axes=group_axes(group))
    if group.unsupported:
        return dataclasses.replace(base, status=FAILED, reason=group.unsupported)
    if group.refusal:
        return base
    first = _attempt(subject, group, base)
    if subject.style == SHARD_MAP or group.kind != DEFER or first.status not in _ANOTHER_ROUTE:
        return first
    second = _attempt(subject, group, dataclasses.replace(base, route=SHARD_MAP), SHARD_MAP)
    tried = Attempt(first.route, first.status, first.reason)
    if second.verified:
        return dataclasses.replace(second, tried=(tried,))
    return _neither(first, second)


_ANOTHER_ROUTE = frozenset({FAILED, STILL_IN_LOOP, OUTPUTS_DIFFER})
"""What a first route's rewrite may come to for the shard_map route to be tried."""


def _attempt(subject: Subject, group: FindingGroup, base: Rewrite, route: str = "") -> Rewrite:
    """The rewrite of one group by one route (the program's own by default), checked."""
    try:
        built = build(subject, group, route)
    except Unsupported as exc:
        return dataclasses.replace(base, status=FAILED, reason=exc.reason)
    except Refused as exc:
        return dataclasses.replace(base, reason=exc.reason)
    except Exception as exc:  # JAX refused the rewritten program (RetraceError too): say so, never a saving
        return dataclasses.replace(base, status=FAILED, reason=_failure(subject, exc, base.route))
    base = dataclasses.replace(base, route=built.route, memory_bytes=built.memory, patch=patch_of(subject, group, built),
                               axes=built.axes or base.axes)
    return verify(subject, base, built.program, built.kind, built.moved)


def _neither(first: Rewrite, second: Rewrite) -> Rewrite:
    """Neither route gave a verified rewrite: the first route's result unless it failed (then
    the second's, which got further), with one reason per route."""
    attempts = tuple(Attempt(r.route, r.status, r.reason) for r in (first, second))
    chosen = first if first.status != FAILED or second.status == FAILED else second
    reason = "; ".join(a.text() for a in attempts)
    return dataclasses.replace(chosen, reason=reason, tried=attempts)


def verify(subject: Subject, rewrite: Rewrite, program: RewrittenProgram, kind: str,
           moved: Sequence[tuple["CompiledCollective", int | None]]) -> Rewrite:
    """``rewrite`` with ``program`` checked: its compiled plan runs the ``kind`` collectives of
    ``moved`` as often as each says (``(original collective, runs per call after)``), and its
    outputs on the subject's run arguments match the original's. Only then ``verified``."""
    check = plan_check(subject.plan, program.plan, kind, moved)
    base = dataclasses.replace(rewrite, program=program, plan_check=check)
    try:
        outputs = compare_outputs(subject, program)
    except Exception as exc:
        return dataclasses.replace(base, status=FAILED, reason=f"the rewritten program fails to run: {exception_text(exc)}")
    matched = outputs is None or outputs.agree
    base = dataclasses.replace(base, outputs_match=matched, output_check=outputs)
    if not matched and outputs is not None:  # not matched: there were outputs to compare
        return dataclasses.replace(base, status=OUTPUTS_DIFFER, reason=outputs.warning or "its outputs differ")
    if not check.saves:
        return dataclasses.replace(base, status=NO_SAVING, reason=(
            f"the compiler already runs the {kind} {_text(check.runs_before)} times per call here: the rewrite "
            "changes nothing this backend runs"))
    if not check.ok:
        return dataclasses.replace(base, status=STILL_IN_LOOP, reason=check.reason())
    tolerance = f"within {outputs.tolerance:.1e}" if outputs is not None else "(no outputs to compare)"
    if outputs is not None and outputs.non_finite_note:
        tolerance += f"; {outputs.non_finite_note}"
    unknown = ("; a loop's trip count is unknown, so the check is that no moved value stays inside a loop"
               if check.runs_before is None else "")
    return dataclasses.replace(base, status=VERIFIED, reason=f"outputs match {tolerance}{unknown}")


def _failure(subject: Subject, exc: BaseException, route: str) -> str:
    """Why the rewritten program did not trace or compile, with what to do when the cause is known."""
    import jax

    reason = f"the rewritten program does not trace or compile: {exception_text(exc)}"
    shardy = getattr(jax.config, "jax_use_shardy_partitioner", True)
    if route in (EXPLICIT, AUTO) and not shardy:
        reason += (" (an unreduced accumulator compiles with the Shardy partitioner only, which is off here: "
                   "jax.config.update('jax_use_shardy_partitioner', True))")
    return reason


_STATUS_WORDS = {FAILED: "failed", STILL_IN_LOOP: "still runs it in the loop", OUTPUTS_DIFFER: "changes the outputs",
                 REFUSED: "is refused", NO_SAVING: "saves nothing"}


def _values_text(values: Sequence[str]) -> str:
    """``params['W1'], params['W2']``; past three, the first two and how many more (a 12-layer
    model's 73 gradients are not one line)."""
    return listed(values) or "its values"


def _text(count: int | None) -> str:
    return "?" if count is None else f"{count:,}"



def what_if_of(inspection: "Inspection") -> WhatIf:
    """The rewrites of an inspection's flagged findings (:meth:`Inspection.what_if`), each checked."""
    call, plan = inspection.call, inspection.compiled
    assert call is not None and plan is not None  # Inspection.what_if checks both first
    subject = subject_from(inspection.function, call.program.function, (call.program.args, call.program.kwargs),
                           call.traced, call.compiled, plan, inspection.collectives, call.program.input_names)
    return WhatIf(subject, rewrites_of(subject))


EXTENSIONS.what_if = what_if_of
