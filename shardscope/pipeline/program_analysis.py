"""The :class:`~shardscope.pipeline.analysis.Analysis` of a program file: one result per ``@shardscope.program``.

Each program is traced on its example arguments and read by the same engine as the plans
(:func:`shardscope.engine.inspection.inspect_traced`), then compiled once and timed interleaved with
the others on materialised example arguments placed as the compiled program expects them. A
program has no unchunked reference and no gradient to check: those fields stay None. Two
programs whose outputs have the same structure are checked against each other instead.
"""

from __future__ import annotations

from typing import Any

from shardscope.pipeline.analysis import Analysis, PlanResult, Progress
from shardscope.pipeline.comparison import Comparison, compare
from shardscope.errors import SettingsError, ShardscopeError, TraceError, quote_error
from shardscope.pipeline.gc_pause import paused
from shardscope.plans.settings import Settings

SEED = 0
"""The seed example arguments given as shapes are filled from (reproducible timings and outputs)."""


def analyze_programs(
    settings: Settings,
    progress: Progress | None = None,
    program_file: Any = None,
    *,
    measure: bool = True,
    graphs: bool = True,
) -> Analysis:
    """Trace, compile and time every program of the program file ``settings.path``.

    The CPU device count must already be set (each program builds its own mesh at import).
    ``program_file`` (a :class:`~shardscope.sources.programs.ProgramFile`) skips loading. The default
    comparison is the first program against the second, or against ``settings.function`` when
    that names one. A program that fails to trace is listed in ``unavailable`` while another
    one traces; when none does, its :class:`TraceError` is raised.
    """
    report = progress or (lambda stage, fraction: None)
    report("loading", 0.0)

    import jax

    from shardscope.sources.programs import ProgramFile, load_file, no_program_error

    if settings.repeats < 1:
        raise SettingsError(f"repeats must be at least 1, not {settings.repeats}.", "time each program at least once")
    loaded = program_file or load_file(settings.path)
    if not isinstance(loaded, ProgramFile):
        raise no_program_error(settings.path)
    if settings.function is not None and settings.function not in loaded.functions:
        raise SettingsError(f"{settings.path.name} has no program {settings.function!r}.",
                            f"available: {', '.join(loaded.names)}")
    traced, unavailable = _trace(loaded, report)
    measured, output_checks = _measure(loaded, traced, settings, report) if measure else ({}, ())

    results = {}
    with paused():  # one pause for every program: the collector catches up once, not after each
        for name, (trace, inspection) in traced.items():
            results[name] = PlanResult.from_inspection(
                inspection, name=name, description=loaded.functions[name].description, role="program",
                trace_s=inspection.trace_s, graphs=graphs, mesh=mesh_text(trace.jaxpr), **measured.get(name, {}),
            )
    return Analysis(
        settings=settings.with_(devices=jax.device_count()),
        function=settings.path.stem,
        description=loaded.description,
        backend=jax.default_backend(),
        shapes=None,
        plans=results,
        reference=None,
        comparison=default_comparison(results, settings.function),
        unavailable=unavailable,
        processes=jax.process_count(),
        kind="programs",
        output_checks=output_checks,
    )


def default_comparison(results: dict[str, PlanResult], candidate: str | None = None) -> Comparison:
    """The first program against the second (or against ``candidate``); a lone program with itself."""
    names = list(results)
    if candidate in results:
        baseline = next((n for n in names if n != candidate), candidate)
        return program_comparison(results, baseline, candidate)
    return program_comparison(results, names[0], names[1] if len(names) > 1 else names[0])


def program_comparison(results: dict[str, PlanResult], baseline: str, candidate: str) -> Comparison:
    """:func:`shardscope.pipeline.comparison.compare`, except that a program is never "faster" than itself."""
    if baseline == candidate:
        return Comparison(baseline, candidate, None, ())
    return compare(results, baseline, candidate)


def mesh_text(closed_jaxpr: Any) -> str | None:
    """``batch=8``: the mesh of every ``shard_map`` in the program (outermost first, distinct ones)."""
    from jax.extend.core import jaxprs_in_params

    found: list[str] = []

    def walk(jaxpr: Any) -> None:
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


def _trace(loaded: Any, report: Progress) -> tuple[dict[str, tuple[Any, Any]], dict[str, str]]:
    """``{name: (traced, inspection)}`` of every program that traces, and why the others do not."""
    from shardscope.engine.inspection import argument_names, inspect_traced, pytree_names, trace_program
    from shardscope.sources.programs import CLI_DEBUG

    traced, unavailable, errors = {}, {}, []
    programs = list(loaded.functions.values())
    for i, program in enumerate(programs):
        report("tracing", i / len(programs))
        fn, args, kwargs = program.fn, program.spec.args, program.spec.kwargs
        try:
            trace, trace_s = trace_program(fn, args, kwargs, program.name, CLI_DEBUG)
        except SystemExit as exc:  # the program called sys.exit(): a message, not our exit status
            errors.append(TraceError(f"{program.name} called sys.exit({exc.code!r}) while being traced.",
                                     "shardscope traces the program: it must return, not exit"))
            unavailable[program.name] = f"it called sys.exit({exc.code!r}) while being traced"
            continue
        except TraceError as error:
            errors.append(error)
            # one line: it also heads the diff export and sits in the Timings tab's notes
            unavailable[program.name] = "it fails to trace: " + " ".join(quote_error(error.__cause__, 3).split())
            continue
        inspection = inspect_traced(trace, program.name, argument_names(fn, args, kwargs),
                                    pytree_names(trace.out_info, "out"), trace_s)
        traced[program.name] = (trace, inspection)
    if not traced:
        raise errors[0]
    return traced, unavailable


def _measure(loaded: Any, traced: dict, settings: Settings, report: Progress) -> tuple[dict[str, dict], tuple]:
    """Compile each program once, run it on its example arguments, time them all interleaved."""
    import functools

    import jax

    from shardscope.pipeline import failures
    from shardscope.engine import hlo
    from shardscope.measure import timing
    from shardscope.measure.crosscheck import compare_outputs
    from shardscope.sources.examples import check_program_fits, materialize
    from shardscope.engine.inspection import argument_names

    compiled, compile_s, calls = {}, {}, {}
    held = 0  # bytes the example arguments of the programs so far take (all are held until timed)
    for i, (name, (trace, _)) in enumerate(traced.items()):
        report("compiling", i / len(traced))
        try:
            compiled[name], compile_s[name] = timing.timed(lambda: trace.lower().compile())
        except Exception as exc:
            raise ShardscopeError(f"XLA failed to compile the program {name}: {quote_error(exc)}",
                                  "run `shardscope check FILE --debug` for the full error") from exc
        spec = loaded.functions[name].spec
        arguments = dynamic_arguments(name, spec, trace.args_info)
        names = argument_names(loaded.functions[name].fn, *arguments) if arguments[0] is spec.args else None
        held += check_program_fits(name, arguments, compiled[name].input_shardings, names, held)  # before they are made
        args, kwargs = materialize(arguments, SEED)
        try:  # placed as the compiled program expects them: the timings measure the call alone
            args, kwargs = jax.device_put((args, kwargs), compiled[name].input_shardings)
        except Exception as exc:
            raise ShardscopeError(
                f"The example arguments of the program {name} cannot be placed as its compiled program "
                f"expects them: {quote_error(exc)}",
                "check the example arguments of @shardscope.program against the shardings the program "
                "asks for; `shardscope check FILE --debug` shows JAX's error") from exc
        calls[name] = functools.partial(compiled[name], *args, **kwargs)

    report("timing", 0.0)
    outputs = {}
    with failures.quiet_callback_logs():
        for name, call in calls.items():  # the first run of each: an error names the program
            try:
                outputs[name] = jax.block_until_ready(call())
            except Exception as exc:
                raise _run_failed(name, exc, settings.path) from exc
        repeats = settings.repeats
        try:
            times = timing.time_interleaved(calls, (), repeats, warmup=1,
                                             on_round=lambda i: report("timing", (i + 1) / repeats))
        except ShardscopeError:
            raise
        except Exception as exc:  # e.g. a program that donates its arguments cannot run twice on them
            raise ShardscopeError(f"A program failed when run again: {quote_error(exc, 1)}",
                                  "shardscope runs each program many times on the same arguments: "
                                  "do not donate them (donate_argnums) in a @shardscope.program") from exc
    report("checking", 0.0)
    backend = jax.default_backend()
    results = {
        name: {
            "compile_s": compile_s[name],
            "run_s": times[name],
            "memory": timing.memory(compiled[name]),
            "hlo": hlo.summarize(compiled[name].as_text(), backend),
            "cost_analysis": timing.cost_summary(compiled[name]),
        }
        for name in compiled
    }
    # only programs given the same example arguments (same shapes and the same values) can agree
    groups: dict[tuple, dict[str, Any]] = {}
    for name in outputs:
        groups.setdefault(argument_key(loaded.functions[name].spec), {})[name] = outputs[name]
    checks = tuple(check for group in groups.values() for check in compare_outputs(group))
    report("checking", 1.0)
    return results, checks


def dynamic_arguments(name: str, spec: Any, args_info: Any) -> tuple[tuple, dict]:
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


def _holds_arrays(value: Any) -> bool:
    """True when the pytree ``value`` has an array or ``ShapeDtypeStruct`` leaf."""
    import jax
    import numpy as np

    return any(isinstance(leaf, (jax.Array, np.ndarray, jax.ShapeDtypeStruct))
               for leaf in jax.tree.leaves(value, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct)))


def argument_key(spec: Any) -> tuple:
    """Equal for two programs given the same example arguments: the same structure, shapes and
    dtypes (:func:`shardscope.measure.crosscheck.layout`) and the same bytes in every concrete array and
    value. ``ShapeDtypeStruct``s are filled from one seed, so equal layouts get equal values."""
    import hashlib

    import jax
    import numpy as np

    from shardscope.sources import prng_keys
    from shardscope.measure.crosscheck import layout

    digest = hashlib.sha256()
    for leaf in jax.tree.leaves((spec.args, spec.kwargs), is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct)):
        if isinstance(leaf, jax.ShapeDtypeStruct):
            digest.update(b"shape")
        else:
            data = jax.random.key_data(leaf) if prng_keys.is_key_array(leaf) else leaf
            digest.update(np.ascontiguousarray(np.asarray(data)).tobytes())
            digest.update(repr(leaf).encode() if not hasattr(leaf, "shape") else b"array")
    return layout((spec.args, spec.kwargs)), digest.hexdigest()


def _run_failed(name: str, exc: BaseException, path: Any) -> TraceError:
    """The program ``name`` failed while running on its example arguments."""
    from shardscope.pipeline import failures

    error = failures.run_error(exc, name, path)
    return TraceError(error.message.replace(f"The {name} plan", f"The program {name}"), error.hint)
