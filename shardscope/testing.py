"""Assertions on a program's collectives, for a project's own tests.

    from shardscope.testing import assert_no_collectives_in_loops, collective_counts

    def test_step_all_reduces_once_per_parameter():
        assert collective_counts(step, params, xs, ys) == {"psum_invariant": 2}
        assert_no_collectives_in_loops(step, params, xs, ys)

Each function traces ``fn(*args, **kwargs)`` (nothing runs) with the engine behind
:func:`shardscope.inspect`. A failing assertion raises ``AssertionError`` whose message is the
findings table with the fixes. The CPU device count must be set before JAX starts (e.g. in
``conftest.py``: ``jax.config.update("jax_num_cpu_devices", 8)``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from shardscope.engine.inspection import Inspection, inspect

__all__ = ["assert_collectives", "assert_no_collectives_in_loops", "collective_counts"]


def collective_counts(fn: Callable, *args: Any, **kwargs: Any) -> dict[str, int | None]:
    """Runs per call of each collective primitive, e.g. ``{"psum_invariant": 8}``.

    ``None`` for a primitive inside a ``while`` loop with no static trip count; collectives in
    ``cond`` branches all count (an upper bound).
    """
    return inspect(fn, *args, **kwargs).counts()


def assert_no_collectives_in_loops(
    fn: Callable, *args: Any, allow: Iterable[str] = (), **kwargs: Any
) -> Inspection:
    """Fail when a collective runs inside a loop, unless its primitive or value is in ``allow``.

    ``allow`` holds primitives (``"ppermute"``), values (``"params['W']"``) or verdicts
    (``"needed"``: allow every collective the loop needs). Returns the inspection.
    """
    allowed = set(allow)
    inspection = inspect(fn, *args, **kwargs)
    bad = [c for c in inspection.findings if not allowed & {c.primitive, c.value, c.verdict_kind}]
    if bad:
        names = ", ".join(f"{c.primitive} of {c.value} ({_runs(c)} runs/call)" for c in bad)
        raise AssertionError(f"{len(bad)} collective equation(s) inside loops: {names}\n{inspection}")
    return inspection


def assert_collectives(fn: Callable, *args: Any, max_per_call: dict[str, int], **kwargs: Any) -> Inspection:
    """Fail when a primitive runs more often per call than ``max_per_call[primitive]``.

    Primitives missing from ``max_per_call`` are not limited; an unknown count (a ``while``
    loop) fails, since it cannot be shown to stay under the limit. Returns the inspection.
    """
    inspection = inspect(fn, *args, **kwargs)
    counts = inspection.counts()
    over = {
        primitive: counts[primitive]
        for primitive, limit in max_per_call.items()
        if primitive in counts and (counts[primitive] is None or counts[primitive] > limit)
    }
    if over:
        text = ", ".join(
            f"{primitive}: {'unknown' if runs is None else runs} runs/call (at most {max_per_call[primitive]})"
            for primitive, runs in over.items()
        )
        raise AssertionError(f"too many collective runs per call: {text}\n{inspection}")
    return inspection


def _runs(c: Any) -> str:
    return "unknown" if c.executions is None else f"{c.executions:,}"
