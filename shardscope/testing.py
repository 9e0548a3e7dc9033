"""Assertions on a program's collectives, for a project's own tests.

    from shardscope.testing import assert_no_collectives_in_loops, collective_counts

    def test_step_all_reduces_once_per_step():
        assert collective_counts(step, params, xs, ys) == {"all-reduce": 1}
        assert_no_collectives_in_loops(step, params, xs, ys)

Each function traces and compiles ``fn(*args, **kwargs)`` (nothing runs) with the engine behind
:func:`shardscope.inspect`, so it sees what XLA runs: the collectives a ``shard_map`` writes and
the ones the partitioner writes for a jit with shardings. Counts are keyed by the compiled
collective's kind (``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
``collective-permute``, ``collective-broadcast``), combined instructions counted once;
:func:`jaxpr_collective_counts` keys the jaxpr's by JAX primitive (``psum_invariant``), dead
ones left out. A failing assertion raises ``AssertionError`` whose message is the findings table
with the fixes (on a target: the target's plan, its verdict, memory and step estimate, then the
CPU's); pytest shows the test's own line, not shardscope's frames (``__tracebackhide__``). The
CPU device count must be set before JAX starts (e.g. in ``conftest.py``:
``jax.config.update("jax_num_cpu_devices", 8)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

from shardscope.engine.counts import Runs, runs_per_call
from shardscope.engine.hlo.sites import COLLECTIVE_KINDS
from shardscope.engine.joined.inspection import Inspection
from shardscope.engine.jaxpr.model import COLLECTIVE_PRIMITIVES
from shardscope.engine.pytree_paths import labelled_argument
from shardscope.render.targets import plan_verdict
from shardscope.engine.dispatch.plan import DispatchFinding
from shardscope.engine.hlo.paired import PairedCollective
from shardscope.errors import TargetError
from shardscope.pipeline.one_program import inspect, inspect_on

if TYPE_CHECKING:
    from shardscope.engine.hlo.target_plan import TargetPlan

__all__ = ["assert_collectives", "assert_fits_on", "assert_no_collectives_in_loops", "assert_no_deferrable_collectives_in_loops_on",
           "assert_no_rematerialization", "collective_counts", "collective_counts_on", "jaxpr_collective_counts"]


def collective_counts(fn: Callable, *args: Any, **kwargs: Any) -> dict[str, int | None]:  # the user's arguments, passed on to fn
    """Runs per call of each compiled collective kind, e.g. ``{"all-reduce": 4}``: what XLA runs
    (for a step that is not jitted, per step: each jitted call's module counted once per call).

    ``None`` for a kind inside a while loop with no static trip count; collectives in
    conditional branches all count (an upper bound).
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames
    return inspect(fn, *args, **kwargs).counts()


def collective_counts_on(target: str, fn: Callable, *args: Any, **kwargs: Any) -> dict[str, int | None]:  # the user's arguments, passed on to fn
    """Runs per call of each collective kind in the plan ``target``'s compiler makes
    (``"gpu:h100:8"``, ``"tpu:v5e:2x4"``; nothing runs there), e.g. ``{"all-reduce": 1}``."""
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames

    return _target_plan(inspect_on(target, fn, args, kwargs), target).compiled.counts()


def assert_no_deferrable_collectives_in_loops_on(target: str, fn: Callable, *args: Any, **kwargs: Any) -> Inspection:  # the user's arguments, passed on to fn
    """Fail when ``target``'s compiler keeps in a loop a collective the loop does not need (what
    ``check --target`` exits 1 for); one its compiler moves out itself passes. Returns the inspection."""
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames

    inspection = inspect_on(target, fn, args, kwargs)
    across = [f for f in inspection.dispatch_findings if f.flagged]
    if across:  # a step of jitted calls: no target's compiler merges separate calls (check --target fails too)
        names = "; ".join(f"{f.kind} of {f.value} in {f.dispatch}, {f.calls} calls per step: {f.verdict_kind}"
                          for f in across)
        raise AssertionError(f"{inspection.function} runs {len(across)} collective(s) once per call where once per "
                             f"step would do, on {target} as on any target: {names}\n{inspection}")
    plan = _target_plan(inspection, target)
    staying = [p.describe_staying() for p in plan.staying_findings]  # the judged plan's findings, as check fails on them
    staying += [f"{row.collective.name} of {row.value or 'an unnamed value'}, {row.verdict_kind} there, "
                f"{row.collective.runs.badge()}" for row in plan.findings if row.collective is not None and not row.staying]
    if staying:
        raise AssertionError(f"{plan.compiler} keeps {len(staying)} collective(s) in loops on {target} that need not "
                             f"run there: {'; '.join(staying)}\n{inspection}")
    return inspection


def assert_fits_on(target: str, fn: Callable, *args: object, **kwargs: object) -> Inspection:
    """Fail when ``fn(*args, **kwargs)`` does not fit in the memory of ``target``'s devices
    (``"tpu:v5e:2x4"``, ``"gpu:h100:8"``): it needs more bytes per device than the chip has, or the
    target's compiler refused it for memory. A chip whose memory shardscope does not know fails
    too (nothing shows that it fits). Returns the inspection (``.targets[0].fit`` has the numbers)."""
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames

    inspection = inspect_on(target, fn, args, kwargs)
    plan = _target_plan(inspection, target)
    if plan.fit is None or plan.fit.fits is not True:
        said = plan.fit.line() if plan.fit is not None else "its memory is unknown"
        raise AssertionError(f"{getattr(fn, '__name__', 'the step')} on {target}: {said}\n{inspection}")
    return inspection


def _target_plan(inspection: Inspection, target: str) -> "TargetPlan":
    """The plan :func:`~shardscope.pipeline.one_program.inspect_on` made for ``target``; a step that is
    not jitted has none (its calls are read on the CPU, each its own module): one clear error."""
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames
    if not inspection.targets:
        raise TargetError(
            f"{inspection.function} is not jitted: it is a step of separate jitted calls, which shardscope reads "
            f"on the CPU and does not compile for {target}.",
            f"pass one of the jitted functions it calls to compile it for {target}, or jax.jit the whole step")
    (plan,) = inspection.targets
    return plan


def jaxpr_collective_counts(fn: Callable, *args: Any, **kwargs: Any) -> dict[str, int | None]:  # the user's arguments, passed on to fn
    """Runs per call of each JAX collective primitive the program writes, e.g. ``{"psum_invariant": 8}``.

    The jaxpr's count: empty for a jit with shardings (the partitioner's collectives are only in
    the compiled module), each of several collectives XLA combines into one counted on its own,
    and the dead ones (whose result nothing uses: the compiler removes them) left out.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames
    return inspect(fn, *args, **kwargs).jaxpr_counts()


def assert_no_collectives_in_loops(
    fn: Callable, *args: object, allow: Iterable[str] = (), **kwargs: object
) -> Inspection:
    """Fail when a collective runs inside a loop of the compiled program, unless ``allow`` names it.

    ``allow`` holds compiled kinds (``"collective-permute"``), JAX primitives (``"ppermute"``: a
    collective the program wrote as one), values (``"params['W']"``, which also allows the sum of
    its gradient, labelled ``grad(params['W'])``; ``"grad(params['W'])"`` allows that sum alone;
    an instruction XLA combined from several collectives is allowed when every value it carries
    is) or verdicts
    (``"needed"``: allow every collective the loop needs). A step that is not jitted and calls
    a jitted function several times (a Python loop over micro-batches) runs that function's
    collectives in its loop: each one counts (:attr:`Inspection.dispatch_findings`). Returns
    the inspection.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames
    allowed = set(allow)
    inspection = _inspected_as_asked(fn, args, kwargs)
    # a Python loop of dispatches is a loop: its collectives count as the module's loops' do
    in_loops: list[PairedCollective | DispatchFinding] = [*inspection.findings, *inspection.dispatch_findings]
    bad = [c for c in in_loops if not _allowed(c, allowed)]
    if bad:
        names = ", ".join(f"{c.kind} of {c.value or 'an unnamed value'} ({runs_per_call(_runs(c))})" for c in bad)
        raise AssertionError(f"{len(bad)} collective(s) inside loops: {names}\n{inspection}")
    return inspection


def assert_no_rematerialization(fn: Callable, *args: Any, allow: Iterable[str] = (), **kwargs: Any) -> Inspection:  # the user's arguments, passed on to fn
    """Fail when the partitioner falls back to an involuntary full rematerialization while
    compiling (a whole tensor gathered onto every device to change its layout), as ``check``
    does, unless ``allow`` names the value (``"a"``, ``"params['w1']"``) or the finding's kind
    (``"involuntary-rematerialization"``). Returns the inspection."""
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames
    allowed = set(allow)
    inspection = inspect(fn, *args, **kwargs)
    bad = [w for w in inspection.rematerializations if not allowed & {w.kind, w.op_name}]
    if bad:
        raise AssertionError(f"{len(bad)} involuntary full rematerialization(s): "
                             f"{', '.join(w.title for w in bad)}\n{inspection}")
    return inspection


def assert_collectives(fn: Callable, *args: Any, max_per_call: dict[str, int], **kwargs: Any) -> Inspection:  # the user's arguments, passed on to fn
    """Fail when a collective runs more often per call than ``max_per_call`` allows.

    A key is a compiled kind (``"all-reduce"``: the compiled module's runs, see
    :func:`collective_counts`) or a JAX primitive (``"psum_invariant"``: the jaxpr's, see
    :func:`jaxpr_collective_counts`); both kinds of key may be mixed. Kinds missing from
    ``max_per_call`` are not limited; an unknown count (a while loop) fails, since it cannot be
    shown to stay under the limit. A key that is neither raises ``ValueError``. Returns the
    inspection.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames
    unknown = sorted(key for key in max_per_call if key not in COLLECTIVE_KINDS and key not in COLLECTIVE_PRIMITIVES)
    if unknown:
        raise ValueError(f"max_per_call: {', '.join(map(repr, unknown))} is neither a compiled collective kind "
                         f"({', '.join(COLLECTIVE_KINDS)}) nor a JAX collective primitive (psum, all_gather, ...)")
    inspection = _inspected_as_asked(fn, args, kwargs)
    counts = {**inspection.jaxpr_counts(), **inspection.counts()}  # the two kinds of key never collide
    over = {
        key: counts[key]
        for key, limit in max_per_call.items()
        if key in counts and _over(counts[key], limit)
    }
    if over:
        bounded = _in_cond_branches(inspection)
        text = ", ".join(
            f"{key}: {runs_per_call('unknown' if runs is None else ('≤ ' if key in bounded else '') + str(runs))} "
            f"(allowed: {max_per_call[key]}"
            + ("; counted as if every cond branch that holds one ran" if key in bounded and runs is not None else "")
            + ")"
            for key, runs in over.items()
        )
        raise AssertionError(f"too many collective runs per call: {text}\n{inspection}")
    return inspection


def _in_cond_branches(inspection: Inspection) -> set[str]:
    """The kinds and primitives whose count per call is an upper bound: some of their collectives
    sit in a ``cond`` branch, counted as if it were always taken (the count cannot show fewer)."""
    bounded = {c.primitive for c in inspection.live_collectives if c.in_conditional}
    if inspection.dispatches is None and (inspection.compiled is not None or inspection.shown_plan is not None):
        bounded |= {c.kind for c in inspection._plan().collectives if c.in_conditional}
    return bounded


def _inspected_as_asked(fn: Callable, args: tuple, kwargs: dict) -> Inspection:
    """:func:`~shardscope.inspect` of the program; fails when it spans fewer devices than its
    source asks for (the suite forgot ``jax_num_cpu_devices``): nothing sharded passes every check."""
    __tracebackhide__ = True  # pytest shows the caller's line, not shardscope's frames
    inspection = inspect(fn, *args, **kwargs)
    if inspection.device_request is not None:
        raise AssertionError(inspection.device_request.note())
    return inspection


def _over(count: int | None, limit: int) -> bool:
    """Whether ``count`` runs per call exceed ``limit``; an unknown count (a loop without a static
    trip count) always does."""
    return count is None or count > limit


def _allowed(c: "PairedCollective | DispatchFinding", allowed: set[str]) -> bool:
    """True when ``allowed`` names ``c``'s kind, a primitive it comes from, its verdict, or every
    value it carries (a gradient, ``grad(params['W'])``, by its label or its argument's path)."""
    return bool(allowed & {c.kind, *c.primitives, c.verdict_kind}) or (
        bool(c.values) and all(v in allowed or labelled_argument(v) in allowed for v in c.values))


def _runs(c: "Runs | DispatchFinding") -> str:
    return "unknown" if c.executions is None else f"{c.executions:,}"
