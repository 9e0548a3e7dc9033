"""``--profile`` and ``--profile-dir`` on inspected programs: each one's compiled plan with the
times a profile measured (:func:`shardscope.engine.hlo.measured.profile_onto`).

``--profile`` runs each inspected program on example arguments (filled as ``report`` fills
them, placed as the compiled program expects) under JAX's profiler; ``--profile-dir`` reads the
profile of the user's own run. Either way each program's plan is found in the profile by what
its module ran (:mod:`shardscope.engine.hlo.profile_match`), on the plan of the compiler that
ran it: the CPU's for a CPU run, a ``--target``'s whose compiler is the run's (its estimate then
stands beside the measurement), the plan compiled here on the chip with ``--on tpu``.

What cannot be put on a plan is said, never guessed: a profile that cannot be read, a module of
the plan's name that is another program (:class:`ProfileMismatch`), a run on another platform,
leave the plans as they are with the one message (:attr:`Profiled.errors`); a program the
profile does not hold keeps no times and says so (``Inspection.profile_note``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from shardscope.engine.hlo.measured import MeasuredPlan, profile_onto
from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.hlo.profile_match import ProfileMismatch
from shardscope.engine.hlo.roofline import StepEstimate, estimate_step
from shardscope.engine.hlo.work import module_work
from shardscope.engine.joined.inspection import Inspection
from shardscope.errors import ShardscopeError
from shardscope.hardware.catalogue import chip_of
from shardscope.hardware.tpu_generations import generation_of
from shardscope.measure.profile_capture import DEFAULT_CALLS, profile_each
from shardscope.measure.profile_read import Profile, ProfileError, read_profile
from shardscope.pipeline.program_files import dynamic_arguments
from shardscope.sources.examples import materialize
from shardscope.sources.programs import ProgramSpec

SEED = 0
"""The seed that fills example arguments given as shapes."""


@dataclass(frozen=True)
class Profiled:
    """The inspections with the profile's times on the plans it holds, and the messages for what
    it could not be put on (each one :class:`ProfileError`: the CLI prints them after the plans,
    exit status 2)."""

    inspections: list[Inspection]
    errors: list[ShardscopeError] = field(default_factory=list)
    profile: Profile | None = None


def measured_by_profiler(inspections: Sequence[Inspection], runs: int = DEFAULT_CALLS) -> Profiled:
    """``inspections`` with the times of their compiled programs run ``runs`` times under the profiler."""
    calls = {ins.function: call for ins in inspections if (call := _call_of(ins)) is not None}
    profiles = profile_each(calls, runs)
    out, errors = [], []
    for ins in inspections:
        if ins.function not in profiles:
            out.append(ins)
            continue
        one = measured_from([ins], profiles[ins.function])
        out.extend(one.inspections)
        errors.extend(one.errors)
    return Profiled(out, errors)


def read_or_error(location: str) -> Profile | ProfileError:
    """The profile at ``location``, or the error that says why it cannot be read (kept: the plans
    are shown without times, with this one message)."""
    try:
        return read_profile(location)
    except ProfileError as exc:
        return exc


def measured_from_dir(inspections: Sequence[Inspection], location: str | Profile | ProfileError) -> Profiled:
    """``inspections`` with the times of the profile at ``location`` (``--profile-dir``; or the
    profile already read, or the error reading it gave)."""
    found = read_or_error(location) if isinstance(location, str) else location
    if isinstance(found, ProfileError):
        note = f"no measured times: {found.message}"
        return Profiled([dataclasses.replace(ins, profile_note=note) for ins in inspections], [found])
    return measured_from(inspections, found)


def measured_from(inspections: Sequence[Inspection], profile: Profile) -> Profiled:
    """Each inspection whose plan the profile holds, with its times (on the plan of the compiler
    that ran it); the others with a note; one error for each plan the profile's module of its
    name is not, and one when the profile holds none of the plans."""
    out: list[Inspection] = []
    errors: list[ShardscopeError] = []
    absent: list[ProfileError] = []
    for ins in inspections:
        if ins.compiled is None:
            out.append(ins)
            continue
        try:
            out.append(dataclasses.replace(ins, measured=_measured(ins, profile)))
        except ProfileMismatch as exc:
            errors.append(exc)
            out.append(dataclasses.replace(ins, profile_note=f"no measured times: {exc.message}"))
        except ProfileError as exc:
            absent.append(exc)
            out.append(dataclasses.replace(ins, profile_note=f"not in the profile: {exc.message}"))
    errors = _merged(errors, [ins.compiled.module.name for ins in inspections if ins.compiled is not None
                              and ins.compiled.module is not None])
    compiled = sum(ins.compiled is not None for ins in inspections)
    if absent and len(absent) == compiled:
        errors.append(absent[0] if compiled == 1 else ProfileError(
            f"The profile at {profile.source} holds none of the programs checked: it holds "
            f"{', '.join(profile.modules) or 'no module'}.", absent[0].hint))
    return Profiled(out, errors, profile)


def _merged(errors: list[ShardscopeError], names: Sequence[str]) -> list[ShardscopeError]:
    """Mismatches that say one thing of several programs (the profile ran on 4 devices, each of
    them on 8), said once, the programs named together; others one after the other."""
    if len(errors) < 2:
        return errors
    shapes: dict[str, list[str]] = {}
    for error in errors:
        named = [n for n in names if n in error.message]
        shapes.setdefault(error.message.replace(named[0], "{}") if named else error.message, []).append(
            named[0] if named else "")
    merged: list[ShardscopeError] = []
    for shape, programs in shapes.items():
        first = next(e for e in errors if e.message == shape.replace("{}", programs[0]))
        text = shape.replace("{}", ", ".join(programs)) if len(programs) > 1 else first.message
        merged.append(type(first)(text, first.hint))
    return merged


def _measured(ins: Inspection, profile: Profile) -> MeasuredPlan:
    """The profile on the plan of ``ins`` its run executed: the plan of the profile's platform
    (the CPU's, a target's of that compiler, or the chip's with ``--on``), with the step's
    estimate on the profile's chip where one is known."""
    plans = [(ins.compiled, "")] + [(t.compiled, t.target) for t in ins.targets if t.compiled is not None]
    ran = [(plan, target) for plan, target in plans if plan is not None and plan.backend == profile.platform]
    if not ran:
        raise ProfileMismatch(platform_words(profile, ins.compiled.backend if ins.compiled else "cpu"),
                              platform_hint(profile))
    error: ProfileError | None = None
    for plan, target in ran:
        try:
            measured = profile_onto(plan, profile)
        except ProfileMismatch as exc:  # said over a plan the profile does not hold: the difference is the news
            error = error if isinstance(error, ProfileMismatch) else exc
            continue
        except ProfileError as exc:
            error = error or exc
            continue
        estimate = step_estimate(plan, profile)
        return dataclasses.replace(measured, on_target=target, estimate=estimate)
    assert error is not None
    raise error


def platform_words(profile: Profile, backend: str) -> str:
    """``The profile at RUN is of a run on TPU v5 Lite; this plan is XLA:CPU's ...``."""
    return (f"The profile at {profile.source} is of a run on {profile.machine()} ({profile.platform.upper()}), and "
            f"this plan is the one XLA:{backend.upper()} compiled here: another compiler's program, with other "
            "instructions")


def platform_hint(profile: Profile) -> str:
    """How to put a profile of another platform on the plan its run executed: on its chip, or
    from the run's own dump, or (a TPU's) compiled here for a slice like the run's."""
    on = {"tpu": "--on tpu", "gpu": "--on gpu"}.get(profile.platform, "")
    same = f"on a machine with that chip, check FILE {on} --profile-dir RUN; " if on else ""
    target = run_target(profile)
    like = (f"; or compile it here for the run's chips with --target {target} (the profile is put on that plan when "
            "its instructions are the run's: the same JAX and libtpu)") if target else ""
    return (f"{same}elsewhere, dump the run's compiled modules (XLA_FLAGS=--xla_dump_to=DUMP python train.py) and "
            f"check them with its profile: shardscope check --xla-dump DUMP --profile-dir {profile.source}{like}")


def run_target(profile: Profile) -> str:
    """``tpu:v5e:1x1``: the ``--target`` of the slice a TPU profile ran on, from the chip it names
    and the devices its program spans ("" when not known)."""
    generation = generation_of(profile.device_kind) if profile.platform == "tpu" else None
    devices = max((e.devices for e in profile.executions), default=0)
    if generation is not None and devices in generation.slices:
        return f"tpu:{generation.name}:{generation.slices[devices]}"
    return ""


def step_estimate(plan: CompiledPlan, profile: Profile) -> StepEstimate | None:
    """The estimate of ``plan``'s step on the chip the profile names (None on the CPU, or a chip
    without figures)."""
    chip = chip_of(profile.device_kind) if profile.platform != "cpu" else None  # a GPU's: unverified
    if chip is None or plan.module is None:
        return None
    return estimate_step(module_work(plan.module), chip)


def _call_of(ins: Inspection) -> Callable[[], Any] | None:  # Any: the program's output
    """The inspected compiled program as a call on filled, placed example arguments (None for a
    program that was not compiled whole: a step of dispatches)."""
    import jax  # the engine's: imported by the commands that profile

    if ins.call is None or ins.dispatches is not None:
        return None
    program, compiled = ins.call.program, ins.call.compiled
    spec = ProgramSpec(program.args, program.kwargs)
    arguments = dynamic_arguments(ins.function, spec, ins.call.traced.args_info)
    try:
        args, kwargs = jax.device_put(materialize(arguments, SEED), compiled.input_shardings)
    except Exception as exc:
        raise ShardscopeError(f"The example arguments of {ins.function} cannot be placed to profile it: {exc}",
                              f"shardscope check --debug shows JAX's error") from exc
    return functools.partial(compiled, *args, **kwargs)
