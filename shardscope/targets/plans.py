"""The targets of ``--target tpu:TOPOLOGY``: loaded once, the mesh laid over them, and each
program's :class:`~shardscope.engine.hlo.target_plan.TargetPlan` beside its CPU plan.

A program is traced once; its trace is compiled for the CPU (where it runs and is timed) and
for each target (where nothing runs: :mod:`shardscope.targets.compile`). The target's module
is read by the same engine as the CPU's, paired with the same jaxpr, and compared with the CPU's
compiled plan collective by collective (:func:`shardscope.engine.hlo.target_plan.compare_plans`).

Why ``check --target`` still compiles for the CPU, where nothing will run (issue 51). The target's
plan is named without the CPU's module: its collectives pair with the jaxpr through the target
module's own metadata (:func:`~shardscope.engine.hlo.compiled.plan_of` reads the target's text), and
what it reads of the CPU's executable (the mesh the groups name, the arguments kept, their
shardings) is JAX's, the same in the slice's lowering. What needs the CPU's compile is everything
the check shows beside that plan: the CPU's plan itself, each CPU collective's placement on the
target (left its loop, combined, pipelined, removed), runs per call and memory on the CPU; without
it every target check would print otherwise. It runs before the targets' compiles, or beside
them in ``check`` (:func:`shardscope.pipeline.one_program.compile_program` says why): XLA's
partitioner prints its messages on the process's one descriptor 2, and two compiles at once tell
theirs apart by the thread that wrote each line (:class:`shardscope.engine.compile_log.SharedCapture`).
It is ~6-12% of the check's CPU time, most of it XLA:CPU's code generation for an
executable nothing runs (``perf`` at 1,024 chips: the fusion emitters and LLVM ~60%, the HLO passes
~6%; :data:`~shardscope.engine.compilation.READ_ONLY` leaves LLVM's part unoptimized; the other
XLA:CPU options tried either cost as much (no emitter verification, LLVM's cheap passes, one
codegen split) or change the module's text (no fusion emitters)).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

from shardscope.hardware.fit import compiler_limits, memory_fit, refusal_fit
from shardscope.engine.hlo.roofline import estimate_step
from shardscope.engine.hlo.compiled import plan_of
from shardscope.engine.hlo.costing import costed
from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.hlo.paired import paired_collectives
from shardscope.engine.hlo.target_plan import TargetComparison, TargetPlan, compare_plans
from shardscope.engine.hlo.work import module_work
from shardscope.errors import SettingsError, TargetError
from shardscope.targets.base import Target, TargetDevices
from shardscope.targets.compile import OutOfMemory, TargetCompilation, compile_for_target
from shardscope.targets.registry import UnavailableTarget, load_target, parse_target
from shardscope.config.mesh import Mesh
from shardscope.config.settings import Settings

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced

    from shardscope.engine.joined.inspection import Inspection


def parse_targets(texts: Sequence[str]) -> tuple[Target, ...]:
    """``--target`` values as targets, each once, in the order given (no libtpu needed)."""
    return tuple(dict.fromkeys(parse_target(text) for text in texts))


def load_targets(targets: Sequence[Target]) -> tuple[TargetDevices, ...]:
    """The devices of each target (libtpu started once); they must all have as many devices,
    since one analysis lays one mesh over each of them (:class:`SettingsError` if not)."""
    loaded = tuple(load_target(target) for target in targets)
    _require_one_count(loaded)
    return loaded


def load_available_targets(targets: Sequence[Target], unavailable: Sequence[UnavailableTarget] = ()
                           ) -> tuple[tuple[TargetDevices, ...], tuple[UnavailableTarget, ...]]:
    """:func:`load_targets` for a command that reports what it could not compile for after the
    rest: the devices of each target its compiler knows, and ``unavailable`` (those refused
    before, :func:`~shardscope.targets.registry.installed_targets`) with an
    :class:`UnavailableTarget` for each it refused here (libtpu's own "does not know the
    topology"). Raises the first refusal when no target is left."""
    loaded, refused = [], list(unavailable)
    for target in targets:
        try:
            loaded.append(load_target(target))
        except TargetError as exc:
            if len(targets) + len(unavailable) == 1:
                raise
            refused.append(UnavailableTarget(target, exc))
    if refused and not loaded:
        raise refused[0]
    _require_one_count(loaded)
    return tuple(loaded), tuple(refused)


def _require_one_count(loaded: Sequence[TargetDevices]) -> None:
    """:class:`SettingsError` unless every target has as many devices."""
    counts = {devices.count for devices in loaded}
    if len(counts) > 1:
        listed = ", ".join(f"{devices.target} has {devices.count}" for devices in loaded)
        raise SettingsError(f"The targets have different device counts ({listed}): one mesh cannot cover them all.",
                            "run once per device count, e.g. shardscope report ... --target tpu:v5e:2x2, then "
                            "--target tpu:v5e:2x4")


def target_device_count(targets: Sequence[TargetDevices]) -> int | None:
    """How many devices every target has (None without targets)."""
    return targets[0].count if targets else None


def settings_on_targets(settings: Settings, targets: Sequence[TargetDevices]) -> Settings:
    """``settings`` with their mesh laid over the targets' devices.

    A mesh the user gave (``--mesh``, ``--devices``) must have as many devices as the targets;
    without one, a demo's own mesh of that size is kept, a 1-D one (or the default) is
    stretched over every device of the target, and any other is refused with a hint.
    """
    count = target_device_count(targets)
    mesh = settings.mesh
    if count is None or mesh.devices == count:
        return settings
    if settings.demo_mesh and len(mesh.names) == 1:
        return settings.with_(mesh=Mesh.one_axis(mesh.names[0], count))
    target = targets[0].target
    example = ",".join(f"{name}={count if i == 0 else 1}" for i, name in enumerate(mesh.names))
    raise SettingsError(f"The mesh {mesh.text()} has {mesh.devices} devices; {target} has {count}.",
                        f"give no mesh (no --mesh or --devices; in the app, an empty named mesh) for a 1-D mesh "
                        f"over the {count} devices of {target}, or mesh sizes that multiply to {count}, e.g. {example}")


def device_coords(devices: TargetDevices, device_ids: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """The coordinates on the machine (``device.coords``) of the device at each program position;
    empty when the target's devices have none."""
    by_id = {device.id: device for device in devices.devices}
    coords = [getattr(by_id[i], "coords", None) if i in by_id else None for i in device_ids]
    if any(c is None for c in coords):
        return ()
    return tuple(tuple(int(x) for x in c) for c in coords if c is not None)


def machine_shape(devices: TargetDevices) -> tuple[int, ...]:
    """Devices along each coordinate of the whole target (the largest coordinate plus one); empty
    when its devices have no coordinates."""
    coords = device_coords(devices, [device.id for device in devices.devices])
    return tuple(max(c[axis] for c in coords) + 1 for axis in range(len(coords[0]))) if coords else ()


Relabel = Callable[["Inspection"], "Inspection"]


def compile_for_targets(traced: "Traced", targets: Sequence[TargetDevices], name: str,
                        stop: Callable[[], bool] = lambda: False
                        ) -> tuple[tuple[TargetCompilation | OutOfMemory, float], ...]:
    """``traced`` compiled for each target, with the seconds each took (for :func:`target_plans`);
    a target whose compiler refused the step for memory gives its refusal instead (a finding).
    ``stop`` is asked before each target: once it says so, the targets left are not compiled
    (the CPU's compile beside them failed, and its error is what the user gets).

    A caller that compiles for the CPU too does this after it or beside it (see
    :func:`shardscope.pipeline.one_program.compile_program`). Raises
    :class:`~shardscope.errors.TargetError` as :func:`~shardscope.targets.compile.compile_for_target` does.
    """
    compilations = []
    for devices in targets:
        if stop():
            break
        start = time.perf_counter()
        compilation: TargetCompilation | OutOfMemory
        try:
            compilation = compile_for_target(traced, devices, name)
        except OutOfMemory as exc:
            compilation = exc
        compilations.append((compilation, time.perf_counter() - start))
    return tuple(compilations)


def target_plans(traced: "Traced", compiled: "Compiled", inspection: "Inspection", targets: Sequence[TargetDevices],
                 name: str, input_names: Sequence[str], output_names: Sequence[str],
                 relabel: Relabel = lambda inspection: inspection,
                 compilations: Sequence[tuple[TargetCompilation | OutOfMemory, float]] = ()) -> tuple[TargetPlan, ...]:
    """The plan of ``traced`` on each target, compared with ``inspection``'s CPU compiled plan.

    ``compiled`` is the CPU's compile of the same trace (it names the mesh the groups span);
    ``inspection`` holds the jaxpr view and the CPU plan (as ``relabel`` names them: a demo's
    plans name their own collectives and loops); the target's plan is named the same way.
    ``compilations`` are the targets' compiles already made (:func:`compile_for_targets`, in the
    order of ``targets``); without them each target is compiled here. Raises
    :class:`~shardscope.errors.TargetError` when a target cannot compile the program.
    """
    from shardscope.measure.timing import memory

    cpu = inspection.compiled
    assert cpu is not None  # the CPU compile ``compiled`` was planned
    cpu_memory = memory(compiled)
    plans = []
    made = compilations or compile_for_targets(traced, targets, name)
    for devices, (compilation, compile_s) in zip(targets, made, strict=True):
        machine = devices.target.machine(devices.device_kind)
        chip = None if machine is None else machine.chip
        if isinstance(compilation, OutOfMemory):  # a finding, not a failure: the CPU's plan and the other targets stand
            plans.append(_refused(devices, compilation, cpu_memory, compile_s))
            continue
        plan = plan_of(traced, compiled, text=compilation.hlo_text, input_names=input_names,
                       output_names=output_names, backend=devices.target.platform, program=inspection.program,
                       jaxpr_collectives=inspection.collectives, messages=compilation.partitioner)
        named = relabel(replace(inspection, compiled=plan))
        assert named.compiled is not None  # relabelled from ``plan``
        work = module_work(plan.module) if plan.module is not None else None
        plans.append(costed(TargetPlan(  # judged and costed once, here: every rendering reads the values
            target=devices.target.text(), topology=devices.target.topology, device_kind=compilation.device_kind,
            devices=compilation.devices, compiled=named.compiled,
            paired=paired_collectives(named.collectives, named.compiled),
            comparison=compare_plans(cpu, named.compiled, devices.target.topology),
            memory=compilation.memory, cost=compilation.cost, compile_s=compile_s, cpu_memory=cpu_memory,
            compiler=devices.target.compiler, device_coords=device_coords(devices, compilation.device_ids),
            machine_shape=machine_shape(devices),
            fit=memory_fit(compilation.memory, chip, devices.device_kind, compiler_limits(compilation.compiler_log),
                           "" if machine is None else machine.memory_words, devices.target.platform),
            step=estimate_step(work, chip) if work is not None and chip is not None else None,
            machine=machine,
        )))
    return tuple(plans)


def _refused(devices: TargetDevices, exc: OutOfMemory, cpu_memory: dict[str, int],
             compile_s: float) -> TargetPlan:
    """The plan of a step the target's compiler refused for memory: what it needed (from the
    compiler's message), no collectives, nothing placed."""
    machine = devices.target.machine(devices.device_kind)
    fit = refusal_fit(exc.compiler_message, None if machine is None else machine.chip, devices.device_kind)
    empty = CompiledPlan(backend=devices.target.platform, collectives=(), loops=())
    return costed(TargetPlan(
        target=devices.target.text(), topology=devices.target.topology, device_kind=devices.device_kind,
        devices=devices.count, compiled=empty, paired=(),
        comparison=TargetComparison(devices.target.topology, (), (), ()),
        memory={}, cost={}, compile_s=compile_s, cpu_memory=cpu_memory, compiler=devices.target.compiler,
        fit=fit, step=None, machine=machine,
    ))
