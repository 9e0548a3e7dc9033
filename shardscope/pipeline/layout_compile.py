"""One layout candidate, built, traced and compiled for a target, and read: what ``shardscope
layouts`` ranks.

A candidate's mesh is laid over this process's CPU devices (as many as the target has), handed
to the user's ``build(mesh, **options)``, and the step it returns is traced there and compiled
for the target through the one compile path (:func:`shardscope.targets.compile.compile_for_target`:
the target's device at each of the mesh's positions, laid out as ``jax.make_mesh`` lays a mesh
of that shape on the machine). Nothing runs, and nothing is compiled for the CPU. The compiled
module gives the compiler's own bytes per device (the fit), its collectives with their loops and
replica groups, and each instruction's work (the step estimate on the target's chip); the
interconnect's time is the cost model's (:mod:`shardscope.pipeline.layout_ranking`).

A candidate whose parameters and optimizer state alone (its arguments' bytes per device, read
from their shardings) exceed what the chip lets a program use is cut before it compiles: no
compiler can fit it. A ``build`` that raises is a row saying why, not the end of the sweep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Callable, Iterator

from shardscope.config.layout_candidates import Candidate
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.hlo.roofline import StepEstimate, estimate_step
from shardscope.engine.hlo.work import module_work
from shardscope.engine.traceable import traceable
from shardscope.errors import ShardscopeError, quote_error
from shardscope.hardware.fit import MemoryFit, compiler_limits, memory_fit, refusal_fit, size_words
from shardscope.targets.base import TargetDevices
from shardscope.targets.compile import OutOfMemory, compile_for_target
from shardscope.targets.plans import device_coords, machine_shape

if TYPE_CHECKING:
    import jax

    from shardscope.hardware.machines import Machine
    from shardscope.sources.layouts import LayoutFunction

COMPILED, REFUSED, CUT, FAILED = "compiled", "refused", "cut", "failed"
"""What became of a candidate: compiled for the target; refused by the target's compiler for
memory; cut before compiling (its arguments alone do not fit); failed (its build, trace or
compile raised)."""


@dataclass(frozen=True)
class CompiledCandidate:
    """A candidate as the target's compiler left it: plain values (a worker process sends it back).

    ``plan`` is the compiled module's plan (its parsed module dropped), ``step`` the compute and
    memory estimate on the target's chip (collectives not included), ``fit`` the compiler's bytes
    per device against what the chip lets a program use; ``device_coords`` and ``machine_shape``
    place the plan's replica groups on the machine (``machine`` holds the interconnect's model).
    ``argument_bytes`` is what its arguments take per device (logical sizes); ``per_step`` what one
    step processes (``unit``) and ``model_flops`` the model's flops per unit, where the layouts
    function says; ``reason`` says why it was cut or failed. ``compile_s`` and ``compile_cpu_s`` are
    the build, trace and compile, wall and CPU; ``hlo_text`` the compiled module when kept.
    """

    candidate: Candidate
    status: str
    reason: str = ""
    plan: CompiledPlan | None = None
    step: StepEstimate | None = None
    fit: MemoryFit | None = None
    device_coords: tuple[tuple[int, ...], ...] = ()
    machine_shape: tuple[int, ...] = ()
    machine: "Machine | None" = None
    argument_bytes: int | None = None
    per_step: float | None = None
    unit: str = "tokens"
    model_flops: float | None = None
    compile_s: float = 0.0
    compile_cpu_s: float = 0.0
    hlo_text: str = ""


def compile_candidate(function: "LayoutFunction", candidate: Candidate, target: TargetDevices,
                      keep_text: bool = False) -> CompiledCandidate:
    """``candidate`` of ``function`` compiled for ``target`` and read (see the module docstring);
    its errors become a row (:data:`FAILED`), except shardscope's own settings errors."""
    start, cpu = time.perf_counter(), time.process_time()
    try:
        made = _compiled(function, candidate, target, keep_text)
    except ShardscopeError as exc:
        made = CompiledCandidate(candidate, FAILED, exc.message, unit=function.spec.unit)
    except (Exception, SystemExit) as exc:  # the user's build or step raised: a row saying why
        made = CompiledCandidate(candidate, FAILED, quote_error(exc, 3),
                                 unit=function.spec.unit)
    return dataclasses.replace(made, compile_s=time.perf_counter() - start, compile_cpu_s=time.process_time() - cpu)


def _compiled(function: "LayoutFunction", candidate: Candidate, target: TargetDevices,
              keep_text: bool) -> CompiledCandidate:
    mesh = candidate_mesh(candidate, function.spec.axis_types)
    options = dict(candidate.options)
    step, args = _built(function, mesh, options)
    machine = target.target.machine(target.device_kind)
    chip = None if machine is None else machine.chip
    arguments = argument_bytes(args)
    said = CompiledCandidate(candidate, COMPILED, unit=function.spec.unit, per_step=function.per_step(mesh, options),
                             model_flops=function.model_flops(mesh, options), machine=machine,
                             argument_bytes=arguments)
    capacity = None if chip is None else chip.capacity_bytes
    if chip is not None and capacity is not None and arguments > capacity:
        return dataclasses.replace(
            said, status=CUT, fit=MemoryFit(chip.name, arguments, capacity),
            reason=f"its arguments alone (parameters and optimizer state) take {size_words(arguments)} per device, "
                   f"more than the {size_words(capacity)} a {chip.name} chip lets a program use: not compiled")
    program = traceable(step, tuple(args), {})
    with _mesh_set(mesh, function.spec.explicit):
        traced = program.function.trace(*program.args)
    try:
        compilation = compile_for_target(traced, target, candidate.label)
    except OutOfMemory as exc:
        refused = refusal_fit(exc.compiler_message, chip, target.device_kind)
        return dataclasses.replace(said, status=REFUSED, fit=refused,
                                   reason=refused.message if refused is not None else exc.message)
    plan = compiled_plan(compilation.hlo_text, mesh=mesh, backend=target.target.platform,
                         input_names=program.input_names)
    assert plan.module is not None  # parsed from the text
    work = module_work(plan.module)
    fit = memory_fit(compilation.memory, chip, target.device_kind, compiler_limits(compilation.compiler_log),
                     "" if machine is None else machine.memory_words, target.target.platform)
    return dataclasses.replace(
        said, plan=dataclasses.replace(plan, module=None), step=None if chip is None else estimate_step(work, chip),
        fit=fit, device_coords=device_coords(target, compilation.device_ids), machine_shape=machine_shape(target),
        hlo_text=compilation.hlo_text if keep_text else "")


def _built(function: "LayoutFunction", mesh: "jax.sharding.Mesh", options: dict[str, object]
           ) -> "tuple[Callable, tuple[object, ...]]":
    """The user's ``(step, args)``; a ``TypeError`` in words when ``build`` returns something else."""
    with _mesh_set(mesh, function.spec.explicit):
        built = function.build(mesh, options)
    if not (isinstance(built, (tuple, list)) and len(built) == 2 and callable(built[0])):
        raise TypeError(f"{function.name} returned {type(built).__name__}: a layouts function returns (step, args), "
                        "the step and a tuple of its example arguments")
    step, args = built
    return step, tuple(args) if isinstance(args, (tuple, list)) else (args,)


def candidate_mesh(candidate: Candidate, axis_types: tuple[str, ...]) -> "jax.sharding.Mesh":
    """The candidate's mesh over this process's first CPU devices, with the function's axis types."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, Mesh

    names = tuple(name for name, _ in candidate.sizes)
    shape = tuple(size for _, size in candidate.sizes)
    devices = np.array(jax.devices("cpu")[:candidate.devices], dtype=object).reshape(shape)
    types = tuple(getattr(AxisType, kind) for kind in axis_types) or (AxisType.Auto,) * len(names)
    return Mesh(devices, names, axis_types=types)


@contextlib.contextmanager
def _mesh_set(mesh: "jax.sharding.Mesh", explicit: bool) -> Iterator[None]:
    """``jax.set_mesh(mesh)`` around the block for a mesh with Explicit axes (nothing otherwise)."""
    if not explicit:
        yield
        return
    import jax

    with jax.set_mesh(mesh):
        yield


def argument_bytes(args: object) -> int:
    """Bytes per device of ``args``' leaves: each one's shard under its sharding (a leaf without
    one, whole), at its logical size (a TPU pads to tiles: at least this much)."""
    import jax
    import numpy as np

    total = 0
    for leaf in jax.tree.leaves(args):
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is None or dtype is None:
            continue
        sharding = getattr(leaf, "sharding", None)
        shard = sharding.shard_shape(tuple(shape)) if sharding is not None else tuple(shape)
        total += prod(shard) * np.dtype(dtype).itemsize
    return int(total)


def hide_own_frames() -> list[str]:
    """Leave shardscope's own frames out of the source locations JAX records from here on (every
    module of the package but its shipped demos, the command's entry script and the interpreter's
    frozen modules), for a process a ``layouts`` command owns.

    A candidate's compile is kept on disk under its lowered module with its source locations
    (:mod:`shardscope.targets.target_cache`), and those hold the whole Python stack of the trace:
    a candidate traced in a worker process and the same candidate traced in the command's own
    process would be two modules, and neither would read the other's compile back. Without
    shardscope's frames the stack starts at the user's step, the same wherever it is traced.
    Returns the paths it added, for :func:`show_own_frames` (a ``layouts`` run inside another
    process, a test's or a notebook's, gives them back when it ends).
    """
    import sys
    from pathlib import Path

    from jax._src import source_info_util  # JAX's own list of the paths whose frames are not the user's

    package = Path(__file__).resolve().parent.parent
    hidden = [f"{path}{os.sep}" if path.is_dir() else str(path) for path in sorted(package.iterdir())
              if path.name != "demo_files" and (path.suffix == ".py" or (path / "__init__.py").exists())]
    entry = getattr(sys.modules.get("__main__"), "__file__", None)
    if entry:
        hidden.append(str(Path(entry).resolve()))
    hidden.append("<frozen ")  # the interpreter's frozen modules (runpy, for python -m): the main thread's stack only
    added = [path for path in hidden if path not in source_info_util._exclude_paths]
    for path in added:
        source_info_util.register_exclusion(path)
    return added


def show_own_frames(added: list[str]) -> None:
    """Give JAX back the source locations :func:`hide_own_frames` took (``added``: what it
    returned): the plans shardscope writes name their chunk loop by its frames again."""
    from jax._src import source_info_util

    for path in added:
        if path in source_info_util._exclude_paths:
            source_info_util._exclude_paths.remove(path)
    source_info_util._exclude_path_regex.cache_clear()
    source_info_util.is_user_filename.cache_clear()
