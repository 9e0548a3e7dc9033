"""The analysis of one program: every collective, where it runs, how often, and whether it must.

:func:`inspect` is the public entry point for any function that uses ``jax.shard_map``; the
plans of :mod:`shardscope.pipeline.analysis` go through :func:`inspect_traced` as well, so a plan and a
user's own training step are read by the same engine.
"""

from __future__ import annotations

import inspect as _pyinspect
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Sequence

from shardscope.engine.counts import total_executions
from shardscope.errors import ShardscopeError
from shardscope.failures import trace_error
from shardscope.render.findings import render_inspection, to_text
from shardscope.render.findings_html import inspection_html


@dataclass(frozen=True)
class Inspection:
    """One traced program with its named collectives, their verdicts and its loops."""

    function: str
    program: Any  # shardscope.engine.jaxpr_model.Program
    collectives: tuple  # tuple[shardscope.engine.dataflow.Collective, ...]
    trace_s: float = 0.0

    @cached_property
    def loops(self) -> tuple:
        """Every loop with the collectives inside it (``dataflow.Loop``)."""
        from shardscope.engine.dataflow import loops

        return loops(self.program, self.collectives)

    @property
    def findings(self) -> tuple:
        """The collectives inside loops: the ones a verdict is about."""
        return tuple(c for c in self.collectives if c.in_loop)

    @property
    def flagged(self) -> tuple:
        """The collectives a loop runs without needing to (deferrable or loop-invariant)."""
        return tuple(c for c in self.collectives if c.verdict is not None and c.verdict.flagged)

    @property
    def executed_collectives(self) -> int | None:
        """Collective runs per call, every ``cond`` branch counted (None when a count is unknown)."""
        return total_executions(self.collectives)

    def counts(self) -> dict[str, int | None]:
        """Runs per call of each primitive (None when a loop around one has no static trip count)."""
        totals: dict[str, list] = {}
        for c in self.collectives:
            totals.setdefault(c.primitive, []).append(c)
        return {primitive: total_executions(found) for primitive, found in totals.items()}

    def __rich__(self) -> Any:
        """The findings table with the fixes under it (``rich.print(inspection)``)."""
        return render_inspection(self)

    def __str__(self) -> str:
        return to_text(self)

    def _repr_html_(self) -> str:
        """The same table in a notebook."""
        return inspection_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def inspect(fn: Callable, *args: Any, **kwargs: Any) -> Inspection:
    """Trace ``fn(*args, **kwargs)`` and analyse its collectives.

    ``fn`` uses ``jax.shard_map`` (jitted or not); ``args`` are arrays or
    ``jax.ShapeDtypeStruct`` pytrees. Raises :class:`~shardscope.errors.TraceError` when it does
    not trace.
    """
    return inspect_program(fn, args, kwargs, debug=API_DEBUG)


API_DEBUG = "JAX's whole error is this exception's __cause__"
"""Where the Python API's trace errors say the whole of JAX's error is (the CLI says ``--debug``)."""


def inspect_program(fn: Callable, args: tuple, kwargs: dict, name: str | None = None,
                    debug: str = API_DEBUG) -> Inspection:
    """:func:`inspect` of ``fn`` named ``name`` (default: its own name); a trace error says that
    ``debug`` shows the whole of JAX's error."""
    name = name or getattr(fn, "__name__", type(fn).__name__)
    traced, trace_s = trace_program(fn, args, kwargs, name, debug)
    return inspect_traced(traced, name, argument_names(fn, args, kwargs), pytree_names(traced.out_info, "out"), trace_s)


def trace_program(fn: Callable, args: tuple, kwargs: dict, name: str, debug: str) -> tuple[Any, float]:
    """``jax.jit(fn).trace(*args, **kwargs)`` and its seconds; JAX's error as a :class:`TraceError`
    (:func:`shardscope.failures.trace_error`, the quoting every command shares)."""
    import jax

    jitted = fn if hasattr(fn, "trace") else jax.jit(fn)
    start = time.perf_counter()
    try:
        traced = jitted.trace(*args, **kwargs)
    except ShardscopeError:
        raise
    except Exception as exc:
        raise trace_error(exc, name, demo=False, debug=debug) from exc
    return traced, time.perf_counter() - start
def inspect_traced(
    traced: Any, function: str, input_names: Sequence[str], output_names: Sequence[str], trace_s: float = 0.0
) -> Inspection:
    """The :class:`Inspection` of an already traced program (``jax.jit(f).trace(...)``)."""
    from shardscope.engine.dataflow import collectives
    from shardscope.engine.jaxpr_model import from_jaxpr

    program = from_jaxpr(traced.jaxpr)
    invars = len(traced.jaxpr.jaxpr.invars)
    names_in = list(input_names) if len(input_names) == invars else [""] * invars
    outvars = len(program.root.outputs)
    names_out = list(output_names) if len(output_names) == outvars else [""] * outvars
    return Inspection(function, program, collectives(program, names_in, names_out), trace_s)


def pytree_names(tree: Any, prefix: str) -> list[str]:
    """``prefix['W'][0]`` for every leaf of ``tree``, in flattening order."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [prefix + jax.tree_util.keystr(path) for path, _ in leaves]


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """The leaves of ``(args, kwargs)`` named after ``fn``'s parameters, as jit flattens them."""
    try:
        params = [
            p.name for p in _pyinspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    names = []
    for i, arg in enumerate(args):
        names += pytree_names(arg, params[i] if i < len(params) else f"args[{i}]")
    for key in sorted(kwargs):
        names += pytree_names(kwargs[key], key)
    return names
