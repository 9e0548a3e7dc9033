"""``shardscope check FILE``: the findings of every program in a file, as a CI lint.

A program file's ``@shardscope.program`` functions are inspected as they are; a demo file's
``@shardscope.demo`` functions are checked through their naive and deferred plans (the naive
plan flags, the deferred plan passes). Every program is traced and compiled (nothing runs):
the findings are the compiled plan's (what XLA runs, the partitioner's collectives too) joined
with the jaxpr's, each collective once. A program (or demo) that fails to trace or compile is
one failure of the check, with its message; the others are still checked. The CPU device count
must already be set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Sequence

from shardscope.engine.compilation import READ_ONLY
from shardscope.engine.compile_abort import naming_compiles
from shardscope.engine.hlo.costing import weighed
from shardscope.engine.hlo.plan_costs import MinSaving
from shardscope.engine.joined.inspection import Inspection
from shardscope.errors import SettingsError, ShardscopeError
from shardscope.pipeline.freed_memory import release_freed_memory
from shardscope.pipeline.gc_pause import paused
from shardscope.pipeline.one_program import Compiling, inspect_program, user_program
from shardscope.pipeline.run import analyze, inspect_demo
from shardscope.targets.plans import settings_on_targets, target_device_count
from shardscope.targets.base import TargetDevices
from shardscope.targets.registry import UnavailableTarget
from shardscope.config.settings import DEFAULT_DEVICES, Settings
from shardscope.sources.demos import DemoFile, DemoFunction
from shardscope.sources.loading import import_file, marked_functions, unmarked_file_error
from shardscope.sources.programs import CLI_DEBUG, ProgramFunction, pick


EXIT_CLEAN, EXIT_FLAGGED = 0, 1
EXIT_FAILED = ShardscopeError.exit_status
"""A program failed to trace or compile: the user's mistake, over any finding of the others."""


@dataclass(frozen=True)
class FailedProgram:
    """A program (or demo) of the file that could not be checked, and why."""

    function: str
    error: ShardscopeError


@dataclass(frozen=True)
class FileCheck:
    """What ``check`` found in a file, judged: the inspection of each program (or demo plan) that
    traced and compiled (each target plan costed, its findings weighed against ``min_saving``), the
    programs that did not, in the file's order, and the ``--target``s that could not be compiled
    for (``unavailable``). :attr:`exit_status` is the one exit rule; every rendering reads it."""

    inspections: list[Inspection]
    failed: tuple[FailedProgram, ...] = ()
    notes: tuple[str, ...] = ()
    """Choices made on the user's behalf, said (``check --xla-dump``: which of several
    compilations of the step was read)."""
    min_saving: MinSaving | None = None
    unavailable: tuple[UnavailableTarget, ...] = ()
    profile_errors: tuple[ShardscopeError, ...] = ()
    """What a profile given (``--profile``, ``--profile-dir``) could not be put on: the plans
    stand without its times, and the exit status is 2."""

    @cached_property
    def exit_status(self) -> int:
        """``check``'s exit status: :func:`exit_status` of what it found."""
        status = exit_status(self.inspections, self.failed, self.unavailable)
        return EXIT_FAILED if self.profile_errors else status

    @property
    def judged_on(self) -> list[str]:
        """The compilers whose plans the exit status judges: the targets' when there are any, else
        the CPU's (a dumped module's, its own compiler's)."""
        targets = sorted({plan.compiler for ins in self.inspections for plan in ins.targets})
        return targets or sorted({ins.compiler for ins in self.inspections}) or ["XLA:CPU"]


def judged(checked: FileCheck, min_saving: MinSaving | None = None,
           unavailable: Sequence[UnavailableTarget] = ()) -> FileCheck:
    """``checked`` with each target plan's findings weighed against ``min_saving`` (``check
    --min-saving``) and the targets that could not be compiled for: the value every rendering of
    the check reads. A share of the step needs a step estimate: a
    :class:`~shardscope.errors.SettingsError` for a plan with a finding to weigh and none."""
    inspections = [replace(ins, targets=tuple(weighed(plan, min_saving) for plan in ins.targets))
                   for ins in checked.inspections]
    return replace(checked, inspections=inspections, min_saving=min_saving, unavailable=tuple(unavailable))


def check_file(path: Path, function: str | None = None, devices: int | None = None,
               targets: Sequence[TargetDevices] = (), profile: bool = False, runs: bool = True,
               min_saving: MinSaving | None = None, unavailable: Sequence[UnavailableTarget] = ()) -> FileCheck:
    """The :class:`~shardscope.engine.joined.inspection.Inspection` of each program (or demo plan) in
    ``path``, and the ones that failed to trace or compile (:class:`FileCheck`). ``path`` is a file
    (the command's start-up checked it, :mod:`shardscope.cli.startup`, before JAX started).

    ``devices`` is the mesh size of a demo's plans (default: the demo's own mesh, else the
    report's default; with ``targets``, the targets' device count); program files build their
    own meshes. Each program is also compiled for each of ``targets`` (its
    :attr:`Inspection.targets`). With ``profile`` a demo's plans are run under JAX's profiler too
    (their :attr:`Inspection.measured`; a program file's programs are profiled by
    :mod:`shardscope.pipeline.profiled`). The command owns the process: the programs are read with the
    collector paused (:mod:`shardscope.pipeline.gc_pause`). Without ``runs`` (no ``--what-if``,
    ``--profile`` nor ``--profile-dir``: nothing runs the CPU's executable or maps a profile onto it), a program checked
    on targets compiles its CPU plan :data:`~shardscope.engine.compilation.READ_ONLY`. The check is
    :func:`judged` with ``min_saving`` (``--min-saving``) and the targets ``unavailable`` beside ``targets``.
    """
    module, _ = import_file(path)
    programs, demos = marked_functions(module, path)
    if not programs and not demos:
        raise unmarked_file_error(module, path)
    inspections: list[Inspection] = []
    failed: list[FailedProgram] = []
    with paused(), naming_compiles(str(path)):
        if programs:
            for program in pick(programs, function, path):
                try:
                    inspection = _program(program, targets, runs)
                    # check chose the device count (no --devices, no target's): the file's count is the one meant
                    inspections.append(_over_the_devices_asked(inspection) if devices is None and not targets
                                       else inspection)
                except ShardscopeError as exc:
                    failed.append(FailedProgram(program.name, exc))
        else:
            for demo in pick(demos, function, path):
                try:
                    inspections.extend(_demo_plans(path, demo, devices, targets, profile))
                except ShardscopeError as exc:
                    failed.append(FailedProgram(demo.name, exc))
    return judged(FileCheck(inspections, tuple(failed)), min_saving, unavailable)


def _program(program: ProgramFunction, targets: Sequence[TargetDevices], runs: bool = True) -> Inspection:
    """A program's inspection (traced and compiled, not run), with its plan on each target."""
    checked = user_program(program.fn, program.spec.args, program.spec.kwargs, program.name, CLI_DEBUG)
    if not targets:
        return inspect_program(checked)
    # the command owns the process: the CPU's compile runs beside the slice's and gives its freed memory back
    return inspect_program(checked, Compiling(targets, cpu_options=None if runs else READ_ONLY,
                                              before_targets=release_freed_memory, beside=True))


def _over_the_devices_asked(inspection: Inspection) -> Inspection:
    """``inspection``, unless its program spans fewer devices than its file asks for
    (``jax.devices()[:16]`` where check started its default 8: :mod:`shardscope.engine.device_request`):
    then a :class:`~shardscope.errors.SettingsError` saying to start them (``--devices``). Such a
    check proves nothing, and would pass: the program is not sharded as written. A count the user
    gave (``--devices``, or a target's) is theirs: its plan keeps the note, and is checked."""
    request = inspection.device_request
    if request is None:
        return inspection
    where = request.file.rsplit("/", 1)[-1]
    raise SettingsError(
        f"{inspection.function} was traced over {request.spans} device{'s' if request.spans != 1 else ''}, "
        f"while {where} line {request.line} asks for {request.count} ({request.text}): check started "
        f"{request.started}, so the program is not sharded as written and its check would prove nothing.",
        f"run check with --devices {request.count}")


def _demo_plans(path: Path, demo: DemoFunction, devices: int | None,
                targets: Sequence[TargetDevices], profile: bool = False) -> list[Inspection]:
    """A demo's plans, each as an inspection named ``demo[plan]`` (traced and compiled, not run;
    with ``profile``, run once and under JAX's profiler for their measured times)."""
    # without --devices, a demo's own mesh (its mesh=, or one its param_specs name) is used
    count = devices or target_device_count(targets) or DEFAULT_DEVICES
    settings = Settings(path=path, function=demo.name, devices=count, demo_mesh=devices is None)
    settings = settings_on_targets(settings.for_demo(demo.default_mesh), targets)
    loaded = DemoFile(path=path, functions={demo.name: demo}, fingerprint="")
    if profile:  # run under the profiler: the analysis puts each plan's profile on its inspection
        settings = settings.with_(profile=True, repeats=1)
        analysis = analyze(settings, loaded=loaded, measure=True, compile=True, graphs=False, targets=targets)
        inspections = {name: plan.inspection for name, plan in analysis.plans.items()}
    else:  # read, nothing run: no analysis around the plans' inspections
        inspections = inspect_demo(settings, loaded, targets)
    return [replace(inspection, function=f"{demo.name}[{name}]") for name, inspection in inspections.items()]


def exit_status(inspections: Sequence[Inspection], failed: Sequence[FailedProgram] = (),
                unavailable: Sequence[UnavailableTarget] = ()) -> int:
    """The one exit rule of ``check``: 2 when a program failed to trace or compile, or a
    ``--target`` could not be compiled for; else 1 when any loop runs a collective it need not
    (deferrable or loop-invariant in the plan judged: a collective and the instruction it compiles
    to count once), or a step that is not jitted runs one once per call of a function where once
    per step would do; else 0.

    Programs checked against targets are judged on the targets' plans (:attr:`TargetPlan.fails_check`):
    each collective a target runs in a loop that need not hold it (by its verdict there, and with
    ``--min-saving`` saving at least that much), a partitioner's involuntary full
    rematerialization there, a step that does not fit in a target's memory. A finding every
    target's compiler already moves out is no reason to fail. A step of dispatches is not compiled
    for the targets: its calls are separate modules on any of them, so a reduction it runs once
    per call where once per step would do fails the check there too.
    """
    if failed or unavailable:
        return EXIT_FAILED
    if any(ins.targets for ins in inspections):
        staying = any(plan.fails_check for ins in inspections for plan in ins.targets)
        across = any(f.flagged for ins in inspections for f in ins.dispatch_findings)  # no compiler merges calls
        return EXIT_FLAGGED if staying or across else EXIT_CLEAN
    return EXIT_FLAGGED if any(ins.fails_check for ins in inspections) else EXIT_CLEAN
