"""The program a what-if rewrites, as the pipeline has it: traced, compiled, planned, with the
arguments both it and its rewrite run on."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from shardscope.engine.compilation import compile_traced
from shardscope.engine.hlo.compiled import plan_of
from shardscope.engine.joined.inspection import argument_names, inspect_traced, pytree_names
from shardscope.engine.jaxpr.dead_code import mesh_and_style
from shardscope.engine.traceable import Jitted, is_jitted
from shardscope.sources.examples import materialize

if TYPE_CHECKING:
    import jax
    from jax.sharding import Mesh

    from shardscope.engine.hlo.plan import CompiledPlan
    from shardscope.engine.jaxpr.dataflow import Collective

AUTO = "auto"
"""The style (and rewrite route) of a jit program with Auto axes."""


@dataclass(frozen=True)
class Subject:
    """The program a what-if rewrites: the jitted function, the (dynamic) arguments it was
    traced with, its trace, compiled program and plan, the jaxpr view's collectives, and the
    concrete placed arguments both programs run on for the output check."""

    name: str
    function: Jitted  # the user's function, jitted by jax.jit or flax's nnx.jit
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
        return mesh_context(self.mesh)


def subject_of(fn: Callable, args: tuple = (), kwargs: dict | None = None, *, name: str | None = None,
               run_arguments: tuple[tuple, dict] | None = None) -> Subject:
    """Trace, compile and plan ``fn(*args, **kwargs)`` (arrays or ``ShapeDtypeStruct``s; call it
    under ``jax.set_mesh`` for Explicit axes); ``run_arguments`` are the concrete arguments both
    programs run on (default: the arguments, filled as the pipeline fills them, placed as the
    compiled program takes them)."""
    import jax


    kwargs = dict(kwargs or {})
    name = name or str(getattr(fn, "__name__", type(fn).__name__))
    jitted = fn if is_jitted(fn) else jax.jit(fn)
    traced = jitted.trace(*args, **kwargs)
    compiled = compile_traced(traced)
    names = argument_names(fn, args, kwargs)
    plan = plan_of(traced, compiled, input_names=names)
    inspection = inspect_traced(traced, name, names, pytree_names(traced.out_info, "out"))
    return subject_from(name, jitted, (tuple(args), kwargs), traced, compiled, plan, inspection.collectives, names,
                        run_arguments)


def subject_from(name: str, function: Jitted, arguments: tuple[tuple, dict], traced: "jax.stages.Traced",
                 compiled: "jax.stages.Compiled", plan: "CompiledPlan", collectives: tuple["Collective", ...],
                 input_names: Sequence[str], run_arguments: tuple[tuple, dict] | None = None) -> Subject:
    """The :class:`Subject` of what the pipeline already has for a program: its function and
    (dynamic) arguments, trace, compiled program, plan (``compiled.plan_of``), the jaxpr view's
    collectives (``Inspection.collectives``), input names and placed run arguments (default: the
    arguments filled from seed 0 and placed as the compiled program takes them)."""
    import jax


    args, kwargs = tuple(arguments[0]), dict(arguments[1])
    mesh, style = mesh_and_style(traced.jaxpr, compiled)
    if run_arguments is None:

        run_arguments = jax.device_put(materialize((args, kwargs), 0), compiled.input_shardings)
    return Subject(name, function, args, kwargs, traced, compiled, plan, tuple(collectives), tuple(input_names),
                   (tuple(run_arguments[0]), dict(run_arguments[1])), mesh, style)


def mesh_context(mesh: "Mesh | None") -> contextlib.AbstractContextManager:
    """``jax.set_mesh(mesh)`` when every axis of ``mesh`` is Explicit (tracing needs it), else nothing."""
    import jax

    types = [str(t) for t in getattr(mesh, "axis_types", ())]
    if mesh is None or not types or not all("Explicit" in t for t in types):
        return contextlib.nullcontext()
    return jax.set_mesh(mesh)
