"""What the pipeline takes: the programs to analyse, where they came from, and what checks them.

A plan *is* a program that shardscope generated; a program file's functions are programs the
user wrote. Both reach :func:`shardscope.pipeline.run.run` as a :class:`Workload` of
:class:`PipelineProgram` values, built by their source (:mod:`shardscope.pipeline.demo_plans`,
:mod:`shardscope.pipeline.program_files`). What differs between the two sources is said by the
:class:`~shardscope.pipeline.analysis.Origin` the workload carries, and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from shardscope.errors import ShardscopeError, quote_error
from shardscope.pipeline.analysis import Origin

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced

    from shardscope.engine.dispatch.plan import DispatchPlan
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.engine.traceable import Jitted
    from shardscope.config.settings import Settings
    from shardscope.config.shapes import Shapes


Arguments = tuple[tuple, dict]
"""Positional and keyword arguments of one call."""


_T = TypeVar("_T")


def _same(value: _T) -> _T:
    return value


def _as_is(inspection: "Inspection") -> "Inspection":
    return inspection


@dataclass(frozen=True)
class PipelineProgram:
    """One program as the pipeline takes it: how to trace it, name its values, run and check it.

    ``function`` has ``.trace(*args, **kwargs)`` (a ``jax.jit`` object); ``arguments`` are what it
    is traced with (arrays or ``ShapeDtypeStruct`` pytrees). ``run_arguments(traced, compiled)``
    gives the concrete, placed arguments it runs on (made only once it compiled). ``result``
    turns its output into the value that is checked (a floor plan's stacked partials, summed);
    ``relabel`` names what only the source knows (a plan's own collectives). An ``optional``
    program that fails to trace is listed as unavailable, with ``trace_failure``'s reason, while
    the others go on; a required one stops the analysis with its :class:`ShardscopeError`.
    ``dispatches`` reads a user's step that is not jitted as the calls it makes (None for any
    other program): what runs is those, not the one jit the pipeline traces; such a step is
    timed as written, ``eager`` (the program not jitted) on the same arguments.
    ``compile_failure`` is the error for a program XLA does not compile (default: ``XLA failed
    to compile the naive plan``); ``called`` is how messages name it where that is not
    :attr:`title` (``check`` and ``shardscope.inspect`` name a program by its function's name).
    """

    name: str
    description: str
    role: str  # baseline, candidate or floor (a plan), reference, or program
    function: Jitted  # the user's function, jitted by jax.jit or flax's nnx.jit
    arguments: Arguments
    input_names: Callable[["Traced"], list[str]]
    output_names: Callable[["Traced"], list[str]]
    run_arguments: Callable[["Traced", "Compiled"], Arguments]
    trace_failure: Callable[[BaseException], tuple[ShardscopeError, str]]
    optional: bool = False
    result: Callable[[Any], Any] = _same
    relabel: Callable[["Inspection"], "Inspection"] = _as_is
    mesh: Callable[["Traced"], str | None] = field(default=lambda traced: None)
    dispatches: Callable[["Traced"], "DispatchPlan | None"] = field(default=lambda traced: None)
    eager: Callable | None = None
    compile_failure: Callable[[BaseException], ShardscopeError] | None = None
    called: str = ""

    @property
    def title(self) -> str:
        """``naive plan``, ``program step``: how messages name it."""
        if self.called:
            return self.called
        return f"program {self.name}" if self.role == "program" else f"{self.name} plan"

    def compile_error(self, exc: BaseException) -> ShardscopeError:
        """The error for XLA's failure ``exc`` to compile it."""
        if self.compile_failure is not None:
            return self.compile_failure(exc)
        return ShardscopeError(f"XLA failed to compile the {self.title}: {quote_error(exc)}",
                               "run with --debug for the full error")


@dataclass(frozen=True)
class Workload:
    """The programs of one analysis, in display order, with the reference they are checked against.

    ``reference`` (the unchunked VJP of a demo's plans) is traced, compiled and timed with the
    programs but is not one of the results; when it is given, each program's ``result`` is
    checked against its output (``max_abs_err``). ``check_groups(name)`` keys which programs'
    results are compared with each other (equal keys: compared with the first of the key);
    ``unavailable`` holds the programs the source could not build at all, with the reason.
    """

    origin: Origin
    settings: "Settings"
    programs: tuple[PipelineProgram, ...]
    reference: PipelineProgram | None = None
    shapes: "Shapes | None" = None
    unavailable: dict[str, str] = field(default_factory=dict)
    check_group: Callable[[str], Any] = field(default=lambda name: ())
    what_if_notes: tuple[str, ...] = ()  # with what-if: each rewrite left out (refused, failed), with why
    what_if_shown: int = 0  # with what-if: the verified rewrites among the programs
