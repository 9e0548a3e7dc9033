"""A program file's ``@shardscope.program`` functions as a :class:`Workload`: programs the user wrote.

Each program is traced on its example arguments and read by the same engine as the plans, then
compiled once and run on materialised example arguments placed as the compiled program expects
them. A program has no unchunked reference: two programs given the same example arguments are
checked against each other instead. A program that fails to trace is listed as unavailable
while another one traces.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from shardscope.engine.hlo.compiled import jax_traced
from shardscope.errors import ShardscopeError, quote_error
from shardscope.measure.crosscheck import layout
from shardscope.pipeline.one_program import user_program
from shardscope.pipeline.workload import Arguments, PipelineProgram, Workload
from shardscope.config.settings import Settings
from shardscope.sources import prng_keys
from shardscope.sources.examples import check_program_fits, materialize
from shardscope.sources.programs import CLI_DEBUG, ProgramFile, ProgramFunction, ProgramSpec

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr
    from jax.stages import Compiled, Traced

    from shardscope.pipeline.analysis import Analysis
    from shardscope.pipeline.comparison import Comparison

SEED = 0
"""The seed example arguments given as shapes are filled from (reproducible timings and outputs)."""


@dataclass(frozen=True)
class ProgramFileOrigin:
    """The origin of an analysis of a program file: each program on its own mesh and example
    arguments, not chunked by shardscope, checked against each other."""

    path: Path
    description: str
    noun = "program"
    chunked = False
    checked = "outputs"

    @property
    def name(self) -> str:
        """The program file's stem."""
        return self.path.stem

    def headline(self, analysis: "Analysis") -> list[str]:
        """``shardscope: train_step.py: 2 programs (step, step_fixed)`` and their meshes."""
        count = len(analysis.plans)
        started = f"{analysis.backend}, {analysis.settings.devices} devices started"
        meshes = {plan.mesh or "no shard_map" for plan in analysis.plans.values()}
        if len(meshes) == 1:
            where = f"mesh {meshes.pop()} ({started})"
        else:
            where = "meshes " + ", ".join(f"{n}: {p.mesh or 'no shard_map'}" for n, p in analysis.plans.items())
            where += f" ({started})"
        return [
            f"shardscope: {self.path.name}: {count} program{'s' if count > 1 else ''} ({', '.join(analysis.plans)})",
            f"{where}; each program runs as written, on its own example arguments",
        ]

    def timing_note(self, repeats: int, backend: str) -> str:
        """How the programs were timed."""
        return (f"{repeats} timed runs per program after warm-up, interleaved, on the example arguments of "
                f"@shardscope.program (shapes filled with random values); backend {backend}")

    def export_stem(self, analysis: "Analysis", comparison: "Comparison") -> str:
        """``<file>-<baseline>-vs-<candidate>-<devices>dev`` (``<file>-<program>-...`` for one)."""
        pair = comparison.baseline if comparison.baseline == comparison.candidate else (
            f"{comparison.baseline}-vs-{comparison.candidate}")
        return f"{self.path.stem}-{pair}-{analysis.settings.devices}dev"


def program_workload(loaded: ProgramFile, settings: Settings) -> Workload:
    """Every program of ``loaded``, in file order (``settings.function`` names the candidate);
    with ``settings.what_if``, each followed by its verified rewrites (checked against it)."""
    held = [0]  # bytes the example arguments of the programs made so far take: all are held until timed
    programs: list[PipelineProgram] = []
    groups: dict[str, str] = {}
    left_out: list[str] = []
    for function in loaded.functions.values():
        program = _program(function, held)
        programs.append(program)
        groups[program.name] = program.name
        if settings.what_if:
            from shardscope.pipeline.what_if_programs import what_if_programs  # the what-if: only when asked for

            rewrites, refused = what_if_programs(function, program)
            for rewritten in rewrites:
                programs.append(rewritten)
                groups[rewritten.name] = program.name
            left_out += refused
    return Workload(
        origin=ProgramFileOrigin(loaded.path, loaded.description),
        settings=settings.with_(devices=jax.device_count()),
        programs=tuple(programs),
        check_group=lambda name: argument_key(loaded.functions[groups[name]].spec),
        what_if_notes=tuple(left_out),
        what_if_shown=len(programs) - len(loaded.functions),
    )


def _program(function: ProgramFunction, held: list[int]) -> PipelineProgram:
    """The program as ``check`` reads it (:func:`~shardscope.pipeline.one_program.user_program`),
    with what the explorer adds: the example arguments it runs on, its mesh, and the explorer's
    words for it (``program step``: ``XLA failed to compile the program step``)."""
    program = user_program(function.fn, function.spec.args, function.spec.kwargs, function.name, CLI_DEBUG)
    return replace(
        program, description=function.description, optional=True, compile_failure=None, called="",
        run_arguments=lambda traced, compiled: _run_arguments(function.name, program, traced, compiled, held),
        mesh=lambda traced: mesh_text(jax_traced(traced).jaxpr),
    )


def _run_arguments(name: str, program: PipelineProgram, traced: "Traced", compiled: "Compiled", held: list[int]) -> Arguments:
    """The example arguments, made concrete (shapes filled from :data:`SEED`) once they are known
    to fit beside the ``held[0]`` bytes of the programs before, and placed as the compiled program
    expects them: the timings measure the call alone."""
    spec = ProgramSpec(*program.arguments)
    arguments = dynamic_arguments(name, spec, traced.args_info)
    input_names = program.input_names(traced)
    names = list(input_names) if arguments[0] is spec.args and input_names else None
    held[0] += check_program_fits(name, arguments, compiled.input_shardings, names, held[0])  # before a byte is made
    args, kwargs = materialize(arguments, SEED)
    try:
        return jax.device_put((args, kwargs), compiled.input_shardings)
    except Exception as exc:
        raise ShardscopeError(
            f"The example arguments of the program {name} cannot be placed as its compiled program "
            f"expects them: {quote_error(exc)}",
            "check the example arguments of @shardscope.program against the shardings the program "
            "asks for; `shardscope check FILE --debug` shows JAX's error") from exc


def mesh_text(closed_jaxpr: ClosedJaxpr) -> str | None:
    """``batch=8``: the mesh of every ``shard_map`` in the program (outermost first, distinct ones)."""
    from jax.extend.core import jaxprs_in_params

    found: list[str] = []

    def walk(jaxpr: Jaxpr) -> None:
        for eqn in jaxpr.eqns:
            mesh = eqn.params.get("mesh") if eqn.primitive.name == "shard_map" else None
            if mesh is not None:
                text = ",".join(f"{axis}={size}" for axis, size in mesh.shape.items())
                if text not in found:
                    found.append(text)
            for sub in jaxprs_in_params(eqn.params):
                walk(getattr(sub, "jaxpr", sub))

    walk(closed_jaxpr.jaxpr)
    return " + ".join(found) or None


def dynamic_arguments(name: str, spec: ProgramSpec, args_info: Any) -> Arguments:  # Any: a pytree of jax ArgInfo
    """The example arguments the compiled program takes: all but the static ones of a
    ``jax.jit(..., static_argnums=..., static_argnames=...)`` (``args_info`` lists the others).

    A static positional argument cannot be an array, so the positional arguments that are not
    arrays or ``ShapeDtypeStruct``s are the static candidates; when there are more candidates
    than static arguments, which ones are static is ambiguous and a ShardscopeError says so.
    """
    dynamic_args, dynamic_kwargs = args_info
    kwargs = {key: value for key, value in spec.kwargs.items() if key in dynamic_kwargs}
    n_static = len(spec.args) - len(dynamic_args)
    if n_static == 0:
        return spec.args, kwargs
    candidates = [i for i, value in enumerate(spec.args) if not _holds_arrays(value)]
    if len(candidates) != n_static:
        raise ShardscopeError(
            f"shardscope cannot tell which {n_static} of the example arguments of the program {name} are static.",
            "give every argument that is not static as an array or jax.ShapeDtypeStruct (e.g. jnp.asarray(3))")
    return tuple(value for i, value in enumerate(spec.args) if i not in candidates), kwargs


def _holds_arrays(value: object) -> bool:
    """True when the pytree ``value`` has an array or ``ShapeDtypeStruct`` leaf."""
    return any(isinstance(leaf, (jax.Array, np.ndarray, jax.ShapeDtypeStruct))
               for leaf in jax.tree.leaves(value, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct)))


def argument_key(spec: ProgramSpec) -> tuple:
    """Equal for two programs given the same example arguments: the same structure, shapes and
    dtypes (:func:`shardscope.measure.crosscheck.layout`) and the same bytes in every concrete array and
    value. ``ShapeDtypeStruct``s are filled from one seed, so equal layouts get equal values."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves((spec.args, spec.kwargs), is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct)):
        if isinstance(leaf, jax.ShapeDtypeStruct):
            digest.update(b"shape")
        else:
            data = jax.random.key_data(leaf) if prng_keys.is_key_array(leaf) else leaf
            digest.update(np.ascontiguousarray(np.asarray(data)).tobytes())
            digest.update(repr(leaf).encode() if not hasattr(leaf, "shape") else b"array")
    return layout((spec.args, spec.kwargs)), digest.hexdigest()
