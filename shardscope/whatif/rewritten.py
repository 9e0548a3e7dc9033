"""A rewritten program: the traced program run again with edits, jitted over the original's
arguments, traced, compiled and planned, and run beside the original on the same arguments.

The function takes the original's (dynamic) arguments, so the pipeline traces, places, times
and projects it exactly as the original (:meth:`RewrittenProgram.pipeline_program`). An Auto
program rewritten with Explicit axes is traced on ``ShapeDtypeStruct``s sharded on the Explicit
mesh, and the original's run arguments are placed there (the same devices and layout: no data
moves); ``function.trace`` and calls enter the mesh an Explicit-axes program needs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from shardscope.engine.compilation import compile_traced
from shardscope.engine.hlo.compiled import plan_of
from shardscope.engine.joined.inspection import inspect_traced, pytree_names
from shardscope.measure.crosscheck import compare_results
from shardscope.whatif.deferral import Unsupported
from shardscope.whatif.retrace import Edits, RetraceError, Retracer
from shardscope.whatif.subject import mesh_context

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr
    import jax
    from jax.sharding import Mesh

    from shardscope.engine.hlo.plan import CompiledPlan
    from shardscope.engine.jaxpr.dataflow import Collective
    from shardscope.measure.crosscheck import GradientCheck
    from shardscope.whatif.explicit_axes import ExplicitProgram
    from shardscope.whatif.subject import Subject


@dataclass(frozen=True)
class MeshBound:
    """A jitted function traced and called under the mesh it needs (Explicit axes need one)."""

    jitted: jax.stages.Wrapped
    mesh: "Mesh | None" = None

    def context(self) -> contextlib.AbstractContextManager:
        """``jax.set_mesh(mesh)`` for Explicit axes, else nothing."""
        return mesh_context(self.mesh)

    def trace(self, *args: object, **kwargs: object) -> "jax.stages.Traced":
        """``jitted.trace`` under the mesh."""
        with self.context():
            return self.jitted.trace(*args, **kwargs)

    def __call__(self, *args: object, **kwargs: object) -> Any:  # the program's output: any pytree
        with self.context():
            return self.jitted(*args, **kwargs)


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

    def run(self, args: tuple, kwargs: dict) -> Any:  # the program's output: any pytree
        """The compiled program on the original's run arguments."""
        placed_args, placed_kwargs = self.place(args, kwargs)
        with self.function.context():
            return self.compiled(*placed_args, **placed_kwargs)



def rewritten_program(subject: "Subject", closed: "ClosedJaxpr", edits: Edits, mesh: "Mesh | None" = None,
                      converted: "ExplicitProgram | None" = None,
                      run: Callable[[list], list] | None = None) -> RewrittenProgram:
    """The program ``closed`` (the subject's jaxpr, or its Explicit-axes trace ``converted``) run
    with ``edits``: jitted over the subject's arguments, traced, compiled and planned. ``run``
    gives the flat outputs from the flat arguments in place of running ``closed`` with
    ``edits`` (the shard_map route runs it per device)."""
    import jax


    in_tree = jax.tree.structure((subject.args, subject.kwargs))
    out_tree = jax.tree.structure(subject.traced.out_info)
    flat = run or (lambda leaves: Retracer(edits).run(closed, leaves))

    def rewritten(*args: object, **kwargs: object) -> Any:  # the original's output's pytree
        return jax.tree.unflatten(out_tree, flat(jax.tree.leaves((args, kwargs))))

    rewritten.__name__ = subject.name
    rewritten.__qualname__ = subject.name
    function = MeshBound(jax.jit(rewritten), mesh)
    arguments: tuple[tuple, dict] = (subject.args, subject.kwargs)
    place: Callable[[tuple, dict], tuple[tuple, dict]] = _as_given
    if converted is not None:
        arguments = jax.tree.unflatten(in_tree, converted.arguments(jax.tree.leaves(arguments)))
        place = _placer(converted, in_tree)
    traced = function.trace(*arguments[0], **arguments[1])
    with function.context():
        compiled = compile_traced(traced)
    plan = plan_of(traced, compiled, input_names=subject.input_names)
    names_out = pytree_names(traced.out_info, "out")
    inspection = inspect_traced(traced, subject.name, subject.input_names, names_out)
    return RewrittenProgram(function, arguments, traced, compiled, plan, place, inspection.collectives)


def _as_given(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    return args, kwargs


def _placer(converted: "ExplicitProgram", in_tree: "jax.tree_util.PyTreeDef") -> Callable[[tuple, dict], tuple[tuple, dict]]:
    """The original's run arguments on the Explicit mesh of ``converted`` (the same devices and layout)."""
    import jax

    def place(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return jax.tree.unflatten(in_tree, converted.place(jax.tree.leaves((args, kwargs))))

    return place


def check_signature(subject: "Subject") -> None:
    """The rewrite takes the arguments the trace took: static ones are not rewritten."""
    import jax

    leaves = jax.tree.leaves((subject.args, subject.kwargs))
    if len(leaves) != len(subject.traced.jaxpr.jaxpr.invars):
        raise Unsupported("the program takes static (non-array) arguments: shardscope rewrites programs whose every "
                      "argument is an array or a jax.ShapeDtypeStruct.")


def compare_outputs(subject: "Subject", program: RewrittenProgram) -> "GradientCheck | None":
    """The rewritten program's outputs against the original's, on the same run arguments."""
    import jax
    import numpy as np


    args, kwargs = subject.run_arguments
    with subject.context():
        original = jax.tree.map(np.asarray, subject.compiled(*args, **kwargs))
    rewritten = jax.tree.map(np.asarray, program.run(args, kwargs))
    checks = compare_results({"original": original, "rewritten": rewritten}, subject="outputs")
    if not checks and jax.tree.leaves(original):
        raise RetraceError("the rewritten program's outputs are not laid out as the original's")
    return checks[0] if checks else None
