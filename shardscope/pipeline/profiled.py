"""``--profile`` and ``--profile-dir`` on inspected programs: each one's compiled plan with the
times a profile measured (:func:`shardscope.engine.hlo.measured.profile_onto`).

``--profile`` runs each inspected program on example arguments (filled as ``report`` fills
them, placed as the compiled program expects) under JAX's profiler; ``--profile-dir`` reads the
profile of the user's own run. Either way the plan of each program is found in the profile by
its module; a program the profile does not hold keeps no times, and a profile that holds none
of them is one error naming the modules it holds.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

from shardscope.engine.hlo.measured import profile_onto
from shardscope.engine.inspection import Inspection
from shardscope.errors import ShardscopeError
from shardscope.measure.profile_capture import DEFAULT_CALLS, profile_each
from shardscope.measure.profile_read import Profile, ProfileError, read_profile
from shardscope.pipeline.program_files import dynamic_arguments
from shardscope.sources.examples import materialize
from shardscope.sources.programs import ProgramSpec

SEED = 0
"""The seed that fills example arguments given as shapes."""


def measured_by_profiler(inspections: Sequence[Inspection], runs: int = DEFAULT_CALLS) -> list[Inspection]:
    """``inspections`` with the times of their compiled programs run ``runs`` times under the profiler."""
    calls = {ins.function: call for ins in inspections if (call := _call_of(ins)) is not None}
    profiles = profile_each(calls, runs)
    return [ins if ins.function not in profiles else measured_from([ins], profiles[ins.function])[0]
            for ins in inspections]


def measured_from_dir(inspections: Sequence[Inspection], location: str) -> list[Inspection]:
    """``inspections`` with the times of the profile at ``location`` (``--profile-dir``)."""
    return measured_from(inspections, read_profile(location))


def measured_from(inspections: Sequence[Inspection], profile: Profile) -> list[Inspection]:
    """Each inspection whose plan the profile holds, with its times; a ProfileError when none is there."""
    out, errors = [], []
    for ins in inspections:
        if ins.compiled is None:
            out.append(ins)
            continue
        try:
            out.append(dataclasses.replace(ins, measured=profile_onto(ins.compiled, profile)))
        except ProfileError as exc:
            errors.append(exc)
            out.append(ins)
    if errors and len(errors) == sum(ins.compiled is not None for ins in inspections):
        raise errors[0]
    return out


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
