"""A step that is not jitted itself and calls jitted functions: a sequence of dispatches.

Compiled as one ``jax.jit``, such a step lets XLA merge across its calls (four micro-batches'
gradient all-reduces summed and reduced once). What runs is not that: each call of a jitted
function is its own module, dispatched on its own, and each eager operation between the calls
too. :func:`is_dispatch_sequence` is the one place that decides that a program is read this
way; :func:`dispatch_plan` compiles each distinct module once as JAX compiles it when called
(:mod:`shardscope.engine.dispatch.calls`), counts its compiled collectives once per call, and
judges the collectives of modules the step calls more than once: one whose result the step
only adds up across the calls (:mod:`shardscope.engine.dispatch.sums`) is deferrable across
dispatches, since one reduction of the sum would do.
"""

from __future__ import annotations

import traceback
from collections import Counter
from pathlib import PurePath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from shardscope.engine.dispatch.calls import JIT_PRIMITIVES, CompiledCall, compile_calls, is_user_jit
from shardscope.engine.dispatch.sums import is_sum, reduced_outputs, summed_results
from shardscope.engine.hlo.replica_groups import whole_axes
from shardscope.engine.hlo.sites import SiteFinder
from shardscope.engine.jaxpr.model import is_shardscope_file, short_source
from shardscope.engine.user_frames import is_library_file
from shardscope.errors import TraceError
from shardscope.verdict_kinds import DEFERRABLE, NEEDED, is_flagged

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr

    from shardscope.engine.hlo.paired import PairedCollective
    from shardscope.engine.hlo.plan import CompiledPlan


class Inspection(Protocol):
    """What a dispatch reads of its module's :class:`~shardscope.engine.joined.inspection.Inspection`
    (named by its shape: an Inspection holds a step's dispatches, each holding an Inspection)."""

    @property
    def function(self) -> str: ...

    @property
    def compiled(self) -> "CompiledPlan | None": ...

    @property
    def paired(self) -> "tuple[PairedCollective, ...]": ...

    @property
    def flagged(self) -> "tuple[PairedCollective, ...]": ...

    @property
    def executed_collectives(self) -> int | None: ...

    def counts(self) -> dict[str, int | None]: ...

__all__ = ["Dispatch", "DispatchFinding", "DispatchPlan", "dispatch_plan",
           "is_dispatch_sequence", "reads_a_value_error"]

InspectOne = Callable[..., "Inspection"]
"""``inspect_traced(traced, name, input_names, output_names, compiled=..., compile_s=...)``."""


def is_dispatch_sequence(fn: object, closed: "ClosedJaxpr") -> bool:
    """True when ``fn`` runs as a sequence of dispatches: it is not jitted itself (no ``.trace``:
    not ``jax.jit``, not ``nnx.jit``) and its jaxpr, traced as one jit, calls at least one
    jitted function that is not JAX's own (``jnp.clip``'s jit is JAX's; the user's, or an
    installed training engine's, count). A wrapper around one
    jitted call (``functools.partial`` of a jitted function, ``eqx.filter_jit``) runs that one
    module: it is read as that program, as before."""
    if hasattr(fn, "trace") or hasattr(fn, "lower"):
        return False
    eqns = closed.jaxpr.eqns
    if len(eqns) == 1 and eqns[0].primitive.name in JIT_PRIMITIVES:
        return False
    return any(is_user_jit(eqn) for eqn in eqns)


@dataclass(frozen=True)
class Dispatch:
    """One distinct module the step dispatches, ``calls`` times per step: a call of a jitted
    function (``jitted``: the user's, or a library's such as ``jnp.clip``) or an eager primitive. Its
    :attr:`inspection` is the module traced and compiled alone; ``source`` is the step's line
    of its first call."""

    name: str
    jitted: bool
    calls: int
    equations: tuple[int, ...]
    source: str
    inspection: "Inspection"

    @property
    def label(self) -> str:
        """``grad_fn x4``."""
        return f"{self.name} x{self.calls}"

    def counts_per_call(self) -> dict[str, int | None]:
        """Runs of each compiled collective kind in one call."""
        return self.inspection.counts()

    def counts(self) -> dict[str, int | None]:
        """Runs of each compiled collective kind per step: per call times calls."""
        return {kind: None if runs is None else runs * self.calls for kind, runs in self.counts_per_call().items()}

    @property
    def executed_per_call(self) -> int | None:
        """Collective runs in one call (None when a loop's trip count is unknown)."""
        return self.inspection.executed_collectives

    @property
    def executed_per_step(self) -> int | None:
        """Collective runs per step."""
        runs = self.executed_per_call
        return None if runs is None else runs * self.calls

    @property
    def bytes_per_step(self) -> int | None:
        """Per-device bytes its collectives move per step (None when a count is unknown)."""
        per_call = [c.bytes_per_call for c in self.inspection.paired if c.compiled is not None]
        if any(b is None for b in per_call):
            return None
        return sum(b for b in per_call if b is not None) * self.calls

    @property
    def collectives(self) -> int:
        """Compiled collective instructions of its module."""
        plan = self.inspection.compiled
        return len(plan.collectives) if plan is not None else 0


@dataclass(frozen=True)
class DispatchFinding:
    """A collective of a module the step calls more than once: it runs once per call, in the
    step's (Python) loop. ``summed`` is how many calls' results the step only adds up (of this
    function's modules together: a last micro-batch of another size is another module; 0: the
    step uses each call's result otherwise); then the verdict is ``deferrable``: one reduction of
    the sum would do the work of ``summed``, and ``saved_calls`` of this module's calls need not
    reduce (all but one, across the function's modules)."""

    dispatch: str
    collective: "PairedCollective"
    calls: int
    summed: int
    verdict_kind: str
    reason: str
    fix: str
    source: str
    saved_calls: int = 0

    @property
    def kind(self) -> str:
        """The compiled kind, ``all-reduce`` (its collective's :attr:`~PairedCollective.label`)."""
        return self.collective.label

    @property
    def primitives(self) -> tuple[str, ...]:
        """The JAX primitives it comes from (none for the partitioner's)."""
        return self.collective.primitives

    @property
    def value(self) -> str:
        """The value(s) it carries."""
        return self.collective.value

    @property
    def values(self) -> tuple[str, ...]:
        """Every value it carries."""
        return self.collective.values

    @property
    def executions(self) -> int | None:
        """Runs per step: per call times the calls."""
        runs = self.collective.executions
        return None if runs is None else runs * self.calls

    @property
    def avoidable(self) -> int | None:
        """Runs per step one reduction after the sum would save (0 when not deferrable)."""
        runs = self.collective.executions
        if runs is None or not self.flagged:
            return None if runs is None else 0
        return runs * self.saved_calls

    @property
    def flagged(self) -> bool:
        """True when the step runs it more often than it needs to."""
        return is_flagged(self.verdict_kind)

    in_loop = True
    """Every call of a repeated module is an iteration of the step's loop."""


@dataclass(frozen=True)
class DispatchPlan:
    """A step as its sequence of dispatches: each distinct module with its calls, and the
    collectives of repeated modules with their verdicts across the calls."""

    dispatches: tuple[Dispatch, ...]
    findings: tuple[DispatchFinding, ...]
    compile_s: float

    @property
    def flagged(self) -> tuple[DispatchFinding, ...]:
        """The collectives the step runs once per call where once per step would do."""
        return tuple(f for f in self.findings if f.flagged)

    @property
    def flagged_in_loops(self) -> "tuple[PairedCollective, ...]":
        """The collectives a loop of one module runs without needing to (each module's own verdicts)."""
        return tuple(c for d in self.dispatches for c in d.inspection.flagged)

    @property
    def flagged_count(self) -> int:
        """How many collectives the step runs without needing to, as ``check`` counts them: each
        module's loop findings, and those it runs once per call where once per step would do."""
        return len(self.flagged_in_loops) + len(self.flagged)

    @property
    def calls(self) -> int:
        """Dispatches per step."""
        return sum(d.calls for d in self.dispatches)

    def counts(self) -> dict[str, int | None]:
        """Runs per step of each compiled collective kind, summed over the dispatches."""
        totals: dict[str, int | None] = {}
        for dispatch in self.dispatches:
            for kind, runs in dispatch.counts().items():
                before = totals.get(kind, 0)
                totals[kind] = None if runs is None or before is None else before + runs
        return totals

    @property
    def executed_collectives(self) -> int | None:
        """Collective runs per step (None when a count is unknown)."""
        runs = [d.executed_per_step for d in self.dispatches]
        return None if any(r is None for r in runs) else sum(r for r in runs if r is not None)

    @property
    def eager_with_collectives(self) -> tuple[Dispatch, ...]:
        """The eager operations between the calls whose own module communicates."""
        return tuple(d for d in self.dispatches if not d.jitted and d.collectives)


def dispatch_plan(closed: "ClosedJaxpr", arguments: Sequence[object], input_names: Sequence[str],
                  sources: Sequence[str], inspect_one: InspectOne) -> DispatchPlan:
    """The :class:`DispatchPlan` of the step whose one-jit trace is ``closed``.

    ``arguments`` are the step's flat arguments (their shardings are what the first calls
    see), ``input_names`` their names, ``sources`` the user's line of each top-level equation;
    ``inspect_one`` reads one traced and compiled module into an
    :class:`~shardscope.engine.joined.inspection.Inspection` (the engine's own, handed in so that this
    module stays below it).
    """
    calls = compile_calls(closed, arguments, input_names)
    dispatches = tuple(_dispatch(call, sources, inspect_one) for call in calls)
    function_of = {k: call.function for call in calls for k in call.equations}
    summed = summed_results(closed.jaxpr, function_of)
    consumer = _consumers(calls, {k: m for m, call in enumerate(calls) for k in call.equations})
    per_function = Counter(function_of.values())
    first: dict[str, int] = {}
    for m, call in enumerate(calls):
        first.setdefault(call.function, m)
    findings = tuple(f for m, (call, dispatch) in enumerate(zip(calls, dispatches)) if per_function[call.function] > 1
                     for f in _findings(call.function, dispatch, summed, consumer.get(m, ""), first[call.function] == m))
    return DispatchPlan(dispatches, findings, sum(call.compile_s for call in calls))


def _dispatch(call: CompiledCall, sources: Sequence[str], inspect_one: InspectOne) -> Dispatch:
    inspection = inspect_one(call.traced, call.name, call.input_names, call.output_names,
                             compiled=call.compiled, compile_s=call.compile_s)
    first = call.equations[0]
    source = sources[first] if first < len(sources) else ""
    return Dispatch(call.name, call.jitted, len(call.equations), tuple(call.equations), source, inspection)


def _findings(function: str, dispatch: Dispatch, summed: dict[tuple[str, int], int], consumer: str,
              first: bool) -> list[DispatchFinding]:
    """The verdict of each collective of a module of ``function``, which the step calls more than
    once (``first``: the function's first module, whose one reduction stays)."""
    plan = dispatch.inspection.compiled
    if plan is None or plan.module is None:
        return []
    sites = {site.instruction.name: site for site in SiteFinder(plan.module).sites()}
    found = []
    for paired in dispatch.inspection.paired:
        c = paired.compiled
        if c is None or c.in_loop:  # one in the module's own loop has that loop's verdict (its findings)
            continue
        site = sites.get(c.name)
        sums = site is not None and is_sum(plan.module, site.instruction)
        outputs = reduced_outputs(plan.module, site) if site is not None and sums else None
        parts = max((summed.get((function, index), 0) for index in outputs or ()), default=0)
        if parts >= 2:  # deferrable as a loop's sum is: one reduction after the calls replaces it
            saved = min(dispatch.calls, parts) - (1 if first else 0)
            found.append(DispatchFinding(dispatch.name, paired, dispatch.calls, parts, DEFERRABLE,
                                         _reason(function, paired, parts), _fix(dispatch, paired, consumer),
                                         dispatch.source, saved))
        else:
            found.append(DispatchFinding(dispatch.name, paired, dispatch.calls, 0, NEEDED,
                                         _needed_reason(dispatch, paired, sums), "", dispatch.source))
    return found


def _needed_reason(dispatch: Dispatch, c: "PairedCollective", sums: bool) -> str:
    """Why each call runs its own: the step reads each call's reduced result, or the collective
    is no sum of the results at all (an FSDP weight's all-gather moves an input into the call)."""
    if sums:
        return f"The step uses each call's result of {dispatch.name} on its own, not only their sum: each call needs its own."
    what = c.value or "its operand"
    return (f"The {c.label} brings {what} to each call of {dispatch.name}, which reads it there: it sums nothing "
            f"the step could add up across the calls first, so each call needs its own.")


def _reason(function: str, c: "PairedCollective", parts: int) -> str:
    runs = c.executions or 1
    axes = ",".join(c.axes or ()) or "the mesh"
    what = f" of {c.value}" if c.value else ""
    made = f" (made at {short_source(c.source)})" if c.source else ""
    return (f"The step adds up the results of {parts} calls of {function.partition(' ')[2]} (a loop over micro-batches, each "
            f"call its own dispatch), and each call runs its own {c.label}{what} over {axes}{made}: the sum of the "
            f"reduced results is the reduction of the sum, so {(parts - 1) * runs} of its {parts * runs} runs per "
            f"step need not happen. XLA cannot merge them: each call is its own module.")


def _fix(dispatch: Dispatch, c: "PairedCollective", consumer: str) -> str:
    """The fix in the style the module is written in: its own psum, or the partitioner's all-reduce."""
    axis = (whole_axes(c.axes or ()) or ("data",))[0]
    value = f" ({c.value})" if c.value else ""
    where = consumer or "the update after the loop"
    once = "or move the loop into one jax.jit with lax.scan over the micro-batches (XLA then reduces the sum once)"
    if not dispatch.jitted:  # an eager jnp.sum / jnp.mean between the calls: its own module, nothing to shard_map
        return (f"keep what the eager {dispatch.name} reduces (each call's per-example values) unreduced across the "
                f"calls: add them up elementwise (or stack them) in the loop and apply {dispatch.name} (jnp.sum, "
                f"jnp.mean) once after the loop: 1 {c.label} per step; {once}.")
    if c.primitives:  # the program's own psum under shard_map
        return (f"return {dispatch.name}'s result{value} unreduced (no {'/'.join(c.primitives)} over '{axis}' in it; "
                f"out_specs P('{axis}') stacks each device's part), add those up across the calls, and psum over "
                f"'{axis}' once in {where}: 1 {c.label} per step; {once}.")
    return (f"have {dispatch.name} return each device's own, unreduced result{value}: jax.shard_map over "
            f"'{axis}' with the parameters cast to varying (lax.pcast(w, '{axis}', to='varying')) and out_specs "
            f"P('{axis}'), or JAX's unreduced sharding (P(..., unreduced={{'{axis}'}}) on Explicit axes); add those "
            f"up across the calls and reduce once in {where} (jnp.sum over the stacked axis, or lax.psum under "
            f"shard_map): 1 {c.label} per step; {once}.")


def _consumers(calls: list[CompiledCall], module_of: dict[int, int]) -> dict[int, str]:
    """``{module: the next jitted call of another function after its last call}``: where the
    summed results are read (``apply``), named in the fix."""
    found: dict[int, str] = {}
    for m, call in enumerate(calls):
        last = max(call.equations)
        later = sorted(k for k, other in module_of.items() if k > last and other != m and calls[other].jitted)
        if later:
            found[m] = calls[module_of[later[0]]].name
    return found


def reads_a_value_error(exc: BaseException, name: str, debug: str) -> TraceError | None:
    """The message for a step that is not jitted and reads a value (``if loss > 0``): it runs
    eagerly, but cannot be traced without values, so its dispatches cannot be read. None for
    any other error."""
    import jax

    if not isinstance(exc, jax.errors.ConcretizationTypeError):
        return None
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not is_library_file(f.filename) and not is_shardscope_file(f.filename)]
    line = (frames[-1].filename, frames[-1].lineno or 0) if frames else None
    where = f" at {PurePath(line[0]).name}:{line[1]} (`{(frames[-1].line or '').strip()}`)" if line else ""
    return TraceError(
        f"{name} reads the value of an array{where}: a step that is not jitted runs that line eagerly, but "
        "shardscope reads its dispatches from a trace without values, where no array has one.",
        f"pass what the line decides as an argument (a Python bool or number, static), or move the line into "
        f"a jitted function (jnp.where / lax.cond on the value) so that the step only calls it; {debug}", line=line)
