"""The one pipeline: trace, compile, run, time and check the programs of a :class:`Workload`.

The same sequence for a demo's plans and a program file's programs: trace each program once
(an optional one that fails is listed as unavailable), compile each once, place its arguments as
the compiled program expects them, run each once (an error names the program), time them all
interleaved, read the compiled module (the compiled plan, memory, XLA's cost analysis) and check the results:
against the reference where there is one, and with each other.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Collection, Callable, Mapping, TypeVar

from shardscope import failures
from shardscope.distributed.workers import collectives_transport
from shardscope.engine.compilation import served_from_cache
from shardscope.engine.compile_abort import naming_compiles
from shardscope.engine.joined.inspection import Inspection
from shardscope.errors import SettingsError, ShardscopeError, TargetError, quote_error
from shardscope.failures import quiet_callback_logs, run_error
from shardscope.measure import speedup, timing
from shardscope.measure.crosscheck import compare_results
from shardscope.measure.profile_capture import profile_each
from shardscope.measure.profile_read import Profile, ProfileError
from shardscope.measure.timed_on import timed_on
from shardscope.pipeline.analysis import Analysis, PlanResult, Progress, ReferenceResult
from shardscope.pipeline.comparison import CompiledWork, compare, compiled_work, default_pair
from shardscope.pipeline.demo_plans import demo_workload
from shardscope.pipeline.gc_pause import paused
from shardscope.pipeline.one_program import (Compiling, NotTraced, TracedProgram, compile_on_cpu, compile_program,
                                             trace_program)
from shardscope.pipeline.profiled import measured_from_dir, read_or_error
from shardscope.pipeline.program_files import program_workload
from shardscope.targets.plans import settings_on_targets
from shardscope.pipeline.workload import PipelineProgram, Workload
from shardscope.plans import registry
from shardscope.config.settings import Settings, check_axis_name
from shardscope.sources.demos import DemoFile
from shardscope.sources.examples import ArgumentsDoNotFit
from shardscope.sources.loading import load_file
from shardscope.sources.marks import listed_name
from shardscope.sources.programs import ProgramFile

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax.stages import Compiled, Traced

    from shardscope.engine.dispatch.plan import DispatchPlan
    from shardscope.engine.hlo.plan import CompiledPlan
    from shardscope.measure.crosscheck import GradientCheck
    from shardscope.targets.base import TargetDevices

Traces = dict[str, TracedProgram]
_Read = TypeVar("_Read")


def analyze(
    settings: Settings,
    progress: Progress | None = None,
    loaded: DemoFile | ProgramFile | None = None,
    *,
    measure: bool = True,
    compile: bool = False,
    graphs: bool = True,
    plan_set: tuple | None = None,
    targets: "Sequence[TargetDevices]" = (),
) -> Analysis:
    """Load ``settings.path`` and run the pipeline on its programs: a demo's plans, or every
    program of a program file (:func:`shardscope.pipeline.run.run`).

    The CPU device count must already be set (:func:`shardscope.targets.host.ensure_devices`).
    ``loaded`` skips loading when the caller already holds the loaded file. With
    ``measure=False`` the programs are only traced: no compiled plan, timings, memory or error;
    ``compile=True`` compiles them all the same and reads their compiled plans (``check``). With
    ``graphs=False`` no dataflow graph is built (``report`` and ``diff`` never draw one, and
    skip importing networkx). ``plan_set`` replaces the registry's plans of a demo
    (:data:`shardscope.plans.registry.PLANS`), e.g. to add the compute-only floor. Each
    program is also compiled for each of ``targets`` (loaded TPU slices: nothing runs there),
    which needs the CPU compile too. Raises :class:`ShardscopeError` for anything the user can fix.
    """
    report = progress or (lambda stage, fraction: None)
    report("loading", 0.0)
    if settings.repeats < 1:
        raise SettingsError(f"repeats must be at least 1, not {settings.repeats}.", "time each program at least once")
    loaded = loaded or load_file(settings.path)
    if isinstance(loaded, ProgramFile) and settings.function is not None:
        listed = listed_name(loaded.functions, settings.function)  # an alias names the same program
        if listed is None:
            raise SettingsError(f"{settings.path.name} has no program {settings.function!r}.",
                                f"available: {', '.join(loaded.names)}")
        settings = settings.with_(function=listed)
    with naming_compiles(str(settings.path)):  # XLA's abort names it (shardscope.engine.compile_abort)
        if isinstance(loaded, ProgramFile):
            return run(program_workload(loaded, settings), report, measure=measure, compile=compile, graphs=graphs,
                       targets=targets)
        return _on_demo(settings, loaded, lambda workload: run(workload, report, measure=measure, compile=compile,
                                                               graphs=graphs, targets=targets), plan_set, targets)


def inspect_demo(settings: Settings, loaded: DemoFile, targets: "Sequence[TargetDevices]" = ()) -> dict[str, Inspection]:
    """``check``'s reading of a demo's plans: each plan traced, compiled (for each of ``targets``
    too) and read, by name, as :func:`analyze` with ``measure=False, compile=True`` reads them, and
    nothing around them (no :class:`Analysis`: its per-call counts, canonical texts and their
    diff, which a check never shows). The CPU device count must already be set."""

    def inspections(workload: Workload) -> dict[str, Inspection]:
        _, _, inspected, target_errors = _traced_and_compiled(workload, lambda stage, fraction: None, False, True,
                                                              targets)
        shown = {p.name: inspected[p.name].inspection for p in workload.programs if p.name in inspected}
        if target_errors and not shown:
            raise target_errors[0]
        return shown

    return _on_demo(settings, loaded, inspections, None, targets)


def _on_demo(settings: Settings, loaded: DemoFile, read: "Callable[[Workload], _Read]", plan_set: tuple | None,
             targets: "Sequence[TargetDevices]") -> "_Read":
    """``read`` of the workload of the demo ``settings.function`` names: its plans on the demo's
    own mesh (when the user gave none), stretched over the targets; the model's ``sys.exit()`` a message."""
    for name in settings.mesh.names:
        check_axis_name(name)  # XLA aborts the process on a non-ASCII axis name
    demo_fn = loaded.get(settings.function)
    settings = settings.for_demo(demo_fn.default_mesh)  # the demo's own mesh when the user gave none
    settings = settings_on_targets(settings, targets)  # a 1-D mesh of the demo's stretched over the targets
    try:
        return read(demo_workload(demo_fn, settings, loaded.path, registry.PLANS if plan_set is None else plan_set))
    except SystemExit as exc:  # the model called sys.exit(): a message, not our exit status
        raise failures.system_exit(exc, settings.path, demo_fn.name) from None


def _traced_and_compiled(workload: Workload, report: Progress, measure: bool, compile: bool,
                         targets: "Sequence[TargetDevices]"
                         ) -> tuple[Traces, dict[str, str], dict[str, _Compiled], list[TargetError]]:
    """Every program traced (and why the others are not), then compiled and read when anything
    needs its compiled plan (``measure``, ``compile``, ``targets``), with each target's refusals."""
    traced, unavailable = _trace(workload, report, measure)
    compiles = measure or compile or bool(targets)
    inspected, target_errors = _compile(workload, traced, report, Compiling(targets), unavailable) if compiles else (
        {}, [])
    return traced, unavailable, inspected, target_errors


def run(workload: Workload, progress: Progress | None = None, *, measure: bool = True, compile: bool = False,
        graphs: bool = True, targets: "Sequence[TargetDevices]" = ()) -> Analysis:
    """The :class:`Analysis` of ``workload``'s programs.

    With ``measure=False`` the programs are only traced (no compiled plan, timings, memory or
    checks), unless ``compile`` asks for their compiled plans (``targets`` do too: each
    program's plan on each target is compared with its CPU plan); with ``graphs=False`` no
    dataflow graph is built (``report`` and ``diff`` draw none).
    """
    import jax

    report = progress or (lambda stage, fraction: None)
    traced, unavailable, inspected, target_errors = _traced_and_compiled(workload, report, measure, compile, targets)
    compiles = measure or compile or bool(targets)
    compiled = {name: (found.executable, found.compile_s) for name, found in inspected.items()}
    if compiles and workload.reference is not None and workload.reference.name in traced:
        # checked against, never shown: nothing to read of its module
        compiled[workload.reference.name] = compile_on_cpu(workload.reference, traced[workload.reference.name].traced)
    eager = {name for name, found in inspected.items() if found.dispatches is not None}
    plans = {name: None if name in eager else found.inspection.compiled for name, found in inspected.items()}
    measured = _measure(workload, traced, compiled, report, eager, plans) if measure else _Measured()
    profile = _profile(workload, measured.calls, eager, report) if measure else None
    shown = [p for p in workload.programs if p.name in (inspected if compiles else traced)]
    inspections = {p.name: inspected[p.name].inspection if p.name in inspected else traced[p.name].only_traced()
                   for p in shown}
    inspections, profile_errors = _with_profile(inspections, profile)
    results = {}
    with paused():  # one pause for every program: the collector catches up once, not after each
        for program in shown:  # the others did not trace, or (optional) do not fit a target: listed as unavailable
            found = inspected.get(program.name)
            inspection = inspections[program.name]
            results[program.name] = PlanResult.from_inspection(
                inspection, name=program.name, description=program.description, role=program.role,
                graphs=graphs, mesh=program.mesh(traced[program.name].traced),
                dispatches=found.dispatches if found is not None else None,
                **measured.per_program.get(program.name, {}),
            )
    if target_errors and not results:
        raise target_errors[0]
    off_target = {p.name for p in workload.programs if p.name in traced and p.name not in results}  # off the slice
    roles = {name: result.role for name, result in results.items()}
    baseline, candidate = default_pair(results, roles, workload.settings.function, workload.check_group)
    return Analysis(
        origin=workload.origin,
        settings=workload.settings,
        backend=jax.default_backend(),
        shapes=workload.shapes,
        plans=results,
        reference=measured.reference if workload.reference is not None else None,
        comparison=compare(results, baseline, candidate),
        unavailable={**workload.unavailable, **unavailable},
        processes=jax.process_count(),
        collectives_transport=collectives_transport(),
        checks=tuple(c for c in measured.checks if not {c.baseline, c.candidate} & off_target),
        what_if_notes=workload.what_if_notes,
        timed_on=timed_on(jax.devices()[:_devices_timed(workload)]) if measure and not measured.not_timed else None,
        what_if_shown=workload.what_if_shown,
        not_timed=measured.not_timed,
        profile_errors=tuple(profile_errors),
    )


def _with_profile(inspections: dict[str, Inspection], profile: "dict[str, Profile | ProfileError] | None"
                  ) -> tuple[dict[str, Inspection], list[ShardscopeError]]:
    """The inspections with their profile's times (each program's own, ``--profile``; one for
    all, ``--profile-dir``: read together, so that a program it does not hold is said once), and
    what the profile could not be put on; the plans stay either way."""
    if profile is None:
        return inspections, []
    groups: dict[int, list[str]] = {}
    for name in inspections:
        if name in profile:
            groups.setdefault(id(profile[name]), []).append(name)
    out, errors = dict(inspections), []
    for names in groups.values():
        done = measured_from_dir([inspections[name] for name in names], profile[names[0]])
        out.update(zip(names, done.inspections))
        errors.extend(done.errors)
    return out, errors


def _trace(workload: Workload, report: Progress, with_reference: bool) -> tuple[Traces, dict[str, str]]:
    """Every program that traces (:func:`~shardscope.pipeline.one_program.trace_program`), and
    why the others do not.

    A required program that fails stops the analysis with its error; an optional one is listed
    as unavailable with its reason. When no program traces, the first error is raised.
    """
    reference = [workload.reference] if with_reference and workload.reference is not None else []
    programs = [*workload.programs, *reference]
    traced: Traces = {}
    unavailable: dict[str, str] = {}
    errors: list[ShardscopeError] = []
    for i, program in enumerate(programs):
        report("tracing", i / len(programs))
        try:
            with paused():  # reading it makes 100,000s of objects that live on: no full passes meanwhile
                traced[program.name] = trace_program(program)
        except NotTraced as failed:
            if not program.optional:
                raise failed.error from failed.__cause__
            errors.append(failed.error)
            unavailable[program.name] = failed.reason
    if errors and not any(program.name in traced for program in workload.programs):
        raise errors[0]
    return traced, unavailable


def _profile(workload: Workload, calls: Mapping[str, Callable[[], Any]], eager: Collection[str],
             report: Progress) -> "dict[str, Profile | ProfileError] | None":
    """The settings' profile of each program: each one run under JAX's profiler (``--profile``),
    or the one at ``--profile-dir`` for every one (or the error reading it gave: the plans stay,
    with that message); None without either. A step of dispatches is not profiled (its module
    is each call's own)."""
    settings = workload.settings
    if settings.profile_dir:
        user = read_or_error(settings.profile_dir)
        return {program.name: user for program in workload.programs}
    if not settings.profile:
        return None
    report("profiling", 0.0)
    names = {p.name for p in workload.programs} - set(eager)
    with quiet_callback_logs():
        profiles = profile_each({name: call for name, call in calls.items() if name in names})
    report("profiling", 1.0)
    return dict(profiles)


@dataclass(frozen=True)
class _Measured:
    """What needs the compiled programs: each one's numbers, the reference's, the cross-checks."""

    per_program: dict[str, dict[str, Any]] = field(default_factory=dict)
    reference: ReferenceResult | None = None
    checks: tuple["GradientCheck", ...] = ()
    calls: Mapping[str, Callable[[], Any]] = field(default_factory=dict)  # each program on its placed arguments
    not_timed: ArgumentsDoNotFit | None = None  # why nothing was run or timed, though it was asked


@dataclass(frozen=True)
class _Compiled:
    """A program compiled for the CPU (and the targets): what its result shows, and what runs.

    For a step of dispatches (``dispatches``: what runs, each call its own module) ``inspection``
    is the step compiled as one jit, which the explorer shows beside the calls and whose
    executable places the arguments."""

    inspection: Inspection
    executable: "Compiled"
    compile_s: float
    dispatches: "DispatchPlan | None" = None


def _compile(workload: Workload, traced: Traces, report: Progress, compiling: Compiling,
             unavailable: dict[str, str]) -> tuple[dict[str, _Compiled], list[TargetError]]:
    """Each traced program compiled once, for the CPU and ``compiling``'s targets; an optional
    program that a target cannot compile is listed as unavailable (the others still show), with
    its error."""
    programs = [p for p in workload.programs if p.name in traced]
    done: dict[str, _Compiled] = {}
    errors: list[TargetError] = []
    for i, program in enumerate(programs):
        report("compiling", i / len(programs))
        try:
            done[program.name] = _compiled(traced[program.name], compiling)
        except TargetError as exc:  # one program that does not fit the slice: the others still show
            if not program.optional:
                raise
            errors.append(exc)
            unavailable[program.name] = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
    return done, errors


def _compiled(one: TracedProgram, compiling: Compiling) -> _Compiled:
    """One program through :func:`~shardscope.pipeline.one_program.compile_program`; a step of
    dispatches a second time as one jit (see :class:`_Compiled`)."""
    with paused():  # the parse makes an object per instruction: no full passes meanwhile
        found = compile_program(one, compiling)
        steps = found.inspection.dispatches
        if steps is not None:
            found = compile_program(replace(one, program=replace(one.program, dispatches=_as_one_jit)), compiling)
    assert found.executable is not None and found.inspection.compile_s is not None  # compiled as one jit
    # the executable runs here and is dropped after: the analysis, which the explorer keeps, does not hold it
    return _Compiled(replace(found.inspection, call=None), found.executable, found.inspection.compile_s, steps)


def _as_one_jit(traced: "Traced") -> None:
    """No dispatches: the step read as the one jit it traces as."""
    return None


def _measure(workload: Workload, traced: Traces, compiled: dict[str, tuple["Compiled", float]],
             report: Progress, eager: Collection[str] = (),
             plans: Mapping[str, "CompiledPlan | None"] | None = None) -> _Measured:
    """Run each compiled program once, time them interleaved, check the results. The programs
    named in ``eager`` (steps of dispatches) run as written, not jitted, on the same arguments.
    ``plans``: each program's compiled plan (None for a step of dispatches), which with its memory
    and XLA's counts says which two compile to the same work (:func:`_pairs_to_settle`)."""
    programs = [p for p in (*workload.programs, workload.reference) if p is not None and p.name in compiled]
    calls = {}
    for program in programs:
        executable = compiled[program.name][0]
        try:
            args, kwargs = program.run_arguments(traced[program.name].traced, executable)
        except ArgumentsDoNotFit as exc:  # nothing runs; the arguments made so far are dropped with ``calls``
            return _not_timed(workload, compiled, exc)
        run = program.eager if program.name in eager and program.eager is not None else executable
        calls[program.name] = functools.partial(run, *args, **kwargs)

    numbers: dict[str, dict[str, Any]] = {
        name: {"memory": timing.memory(compiled[name][0]), "cost_analysis": timing.cost_summary(compiled[name][0])}
        for name in calls}
    works = {name: compiled_work((plans or {}).get(name), n["memory"], n["cost_analysis"]) for name, n in numbers.items()}
    report("timing", 0.0)
    settings = workload.settings
    pairs = _pairs_to_settle(workload, calls, works)
    with quiet_callback_logs():
        outputs = {program.name: _first_run(program, calls[program.name], workload) for program in programs}
        try:
            times = timing.time_interleaved(calls, (), settings.repeats, warmup=1,
                                            on_round=lambda done: report("timing", done),
                                            until=lambda samples: speedup.settled(samples, pairs),
                                            budget_s=settings.timing_budget_s if pairs else 0.0)
        except ShardscopeError:
            raise
        except Exception as exc:  # e.g. a program that donates its arguments cannot run twice on them
            raise ShardscopeError(f"A program failed when run again: {quote_error(exc, 1)}",
                                  "shardscope runs each program many times on the same arguments: "
                                  "do not donate them (donate_argnums)") from exc
    report("checking", 0.0)
    for name in calls:
        numbers[name]["run_s"] = times[name]
    results = {program.name: program.result(outputs[program.name]) for program in workload.programs
               if program.name in outputs}
    reference = None
    if workload.reference is not None and workload.reference.name in outputs:
        name = workload.reference.name
        reference = ReferenceResult(compiled[name][1], times[name], numbers.pop(name)["memory"],
                                    served_from_cache(compiled[name][0]))
        expected = outputs[name]
        for program_name, result in results.items():
            numbers[program_name]["max_abs_err"] = timing.max_abs_err(result, expected)
    checks = _cross_checks(workload, results)
    report("checking", 1.0)
    return _Measured(numbers, reference, checks, calls)


def _pairs_to_settle(workload: Workload, calls: Mapping[str, Callable[[], Any]],
                     works: Mapping[str, "CompiledWork | None"]) -> list[tuple[str, str]]:
    """Every two timed programs whose comparison more rounds may settle: not two that compile to
    the same work (their difference is noise, and said so), and none across processes (each
    process would stop after its own count of rounds, and a collective would wait forever for
    the others)."""
    import jax

    if jax.process_count() > 1:
        return []
    names = [p.name for p in workload.programs if p.name in calls]
    return [(a, b) for k, a in enumerate(names) for b in names[k + 1:]
            if works.get(a) is None or works.get(a) != works.get(b)]


def _not_timed(workload: Workload, compiled: dict[str, tuple["Compiled", float]], why: ArgumentsDoNotFit) -> _Measured:
    """What the compiled programs say without running (memory, XLA's cost analysis) when the
    example arguments of one cannot be made here: the plans, their compiled plans and their
    targets need no arguments, so the analysis goes on without timings, and says why."""
    numbers = {program.name: {"memory": timing.memory(compiled[program.name][0]),
                              "cost_analysis": timing.cost_summary(compiled[program.name][0])}
               for program in workload.programs if program.name in compiled}
    return _Measured(numbers, not_timed=why)


def _first_run(program: PipelineProgram, call: Callable[[], Any], workload: Workload) -> Any:  # its output: any pytree
    """The first run of ``program``: its output, or an error that names it."""
    import jax

    try:
        return jax.block_until_ready(call())
    except Exception as exc:
        raise run_error(exc, program.title, workload.origin.path) from exc


def _cross_checks(workload: Workload, results: dict[str, Any]) -> tuple["GradientCheck", ...]:
    """Each program's result against the first one's of its check group (same structure only)."""
    groups: dict[Any, dict[str, Any]] = {}
    for name, result in results.items():
        groups.setdefault(workload.check_group(name), {})[name] = result
    return tuple(check for group in groups.values() for check in compare_results(group, workload.origin.checked))


def _devices_timed(workload: Workload) -> int:
    """How many devices the programs ran on: a demo's mesh, or the devices a program file started with."""
    settings = workload.settings
    return settings.mesh.devices if workload.origin.chunked else settings.devices
