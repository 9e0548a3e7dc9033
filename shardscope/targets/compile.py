"""Compile a traced program for a target (``--target tpu:v5e:16x16``, ``gpu:h100:8``): the one
place that lowers and compiles for every target.

A target (:mod:`shardscope.targets.base`: a TPU slice, GPUs, the CPU) gives its
devices; for a TPU slice or GPUs those are compile-only devices (libtpu, JAX's CUDA plugin), so
a target has a compiled module and its memory and cost analyses, never timings.

A program is traced once, over the CPU devices its file built its meshes from, and its meshes
are never rebuilt. JAX lowers that trace for the target's platform (``lowering_platforms=("tpu",)``):
the lowered module names devices only by their position in its device assignment (shardings,
replica groups, Shardy meshes, ``shard_map`` regions). The same module is then compiled for the
target's devices at those positions, laid out as ``jax.make_mesh`` lays a mesh of that shape
on the slice itself. The compiled module is the one the program compiles to when written
against a mesh of the target's own devices (tests/test_targets.py checks it on jit with Auto
and Explicit axes, ``shard_map`` and nesting). Rewriting the jaxpr's meshes instead would have
to rewrite every variable's type and every equation's mesh context, all JAX internals.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

from shardscope.engine.compilation import compile_lowered, limit_errors, module_digest, partitioner_messages
from shardscope.errors import SettingsError, TargetError, quote_error
from shardscope.targets import target_cache
from shardscope.targets.base import Target, TargetDevices
from shardscope.targets.count_hint import device_count_hint
from shardscope.config.mesh import Mesh

__all__ = ["OutOfMemory", "TargetCompilation", "compile_for_target", "target_mesh"]

if TYPE_CHECKING:
    import jax
    from jax._src.interpreters.pxla import MeshComputation, MeshExecutable

    Placement = dict[jax.Device, jax.Device]


def target_mesh(devices: TargetDevices, mesh: Mesh | None = None, axis: str = "s") -> "jax.sharding.Mesh":
    """A mesh over every device of the target: 1-D over ``axis``, or ``mesh``'s axes and sizes.

    ``mesh``'s sizes must multiply to the target's device count (:class:`SettingsError` if not).
    Devices are laid out as ``jax.make_mesh`` lays them on the slice (ICI neighbours along the
    mesh axes).
    """
    from jax.sharding import Mesh as JaxMesh

    spec = mesh or Mesh.one_axis(axis, devices.count)
    if spec.devices != devices.count:
        raise SettingsError(
            f"The mesh {spec} has {spec.devices} devices; {devices.target} has {devices.count}.",
            f"give mesh sizes that multiply to {devices.count}, e.g. {spec.names[0]}={devices.count}")
    return JaxMesh(devices.target.grid(devices.devices, spec.sizes), spec.names)


@dataclass(frozen=True)
class TargetCompilation:
    """What XLA's compiler for a target made of one program: plain values, nothing that runs.

    ``devices`` is how many of the target's devices the program spans and ``device_ids`` which
    one runs each of the program's device positions; ``memory`` is ``memory_analysis()`` in
    bytes per device (TPU arrays are padded to their tiled layouts); ``cost`` is
    ``cost_analysis()``, which costs a while loop as one iteration of its body.
    """

    target: Target
    device_kind: str
    devices: int
    device_ids: tuple[int, ...]
    hlo_text: str
    memory: dict[str, int]
    cost: dict[str, float]
    partitioner: tuple[str, ...] = ()
    """The partitioner's log messages of this compile (kept from the terminal)."""
    compiler_log: tuple[str, ...] = ()
    """The compiler's limit errors of this compile (kept from the terminal: XLA:GPU's scheduler's
    "The byte size of input/output arguments (...) exceeds the base limit (...)")."""


def compile_for_target(traced: "jax.stages.Traced", devices: TargetDevices, name: str = "the program") -> TargetCompilation:
    """Compile ``traced`` (``jax.jit(f).trace(...)``) for ``devices``' target.

    A program traced over CPU devices must span as many as the target has; its device at
    position i runs on the target's device at position i of a ``jax.make_mesh`` layout of the
    program's mesh shape. A program traced over the target's own devices compiles as it is.
    Raises :class:`TargetError` for a device count that does not fit and when XLA fails.
    """
    lowering = _lower(traced, devices.target, name)
    placement = _placement(lowering, devices, name, traced)
    device_ids = tuple(placement[device].id for device in _program_devices(lowering))
    key = _compile_key(lowering, devices, device_ids)
    with _COMPILED_LOCK:
        if key in _COMPILED:
            _COMPILED.move_to_end(key)
            return _COMPILED[key]
    stored_as = target_cache.digest(key, _versions(devices))
    compilation = _kept_on_disk(stored_as, devices, len(placement), device_ids, name)
    if compilation is None:
        compilation = _compiled(lowering, placement, devices, device_ids, name, stored_as)
    with _COMPILED_LOCK:
        _COMPILED[key] = compilation
        while len(_COMPILED) > KEPT_COMPILATIONS:
            _COMPILED.popitem(last=False)
    return compilation


def _compiled(lowering: "MeshComputation", placement: "Placement", devices: TargetDevices,
              device_ids: tuple[int, ...], name: str, stored_as: str) -> TargetCompilation:
    """XLA's compile of ``lowering`` for the target, kept on disk under ``stored_as`` (its
    refusal for memory too: :class:`OutOfMemory`)."""
    try:
        with devices.target.compiling():
            executable = compile_lowered(_retargeted(lowering, placement), devices.target.text(),
                                         quiet=devices.target.quiet_log())
    except Exception as exc:
        if _OUT_OF_MEMORY in str(exc):
            target_cache.store(stored_as, {"refused": str(exc), "quoted": quote_error(exc)})
            raise _out_of_memory(name, devices, quote_error(exc), str(exc)) from exc
        raise TargetError(f"XLA failed to compile {name} for {devices.target}: {quote_error(exc)}",
                          "--debug shows XLA's whole message") from exc
    compilation = TargetCompilation(
        target=devices.target,
        device_kind=devices.device_kind,
        devices=len(placement),
        device_ids=device_ids,
        hlo_text=executable.as_text(),
        memory=_memory(executable),
        cost=_cost(executable),
        partitioner=partitioner_messages(executable),
        compiler_log=limit_errors(executable),
    )
    target_cache.store(stored_as, {"hlo_text": compilation.hlo_text, "memory": compilation.memory,
                                   "cost": compilation.cost, "partitioner": list(compilation.partitioner),
                                   "compiler_log": list(compilation.compiler_log)})
    return compilation


def _kept_on_disk(stored_as: str, devices: TargetDevices, count: int, device_ids: tuple[int, ...],
                  name: str) -> TargetCompilation | None:
    """The compile kept under ``stored_as`` (:mod:`shardscope.targets.target_cache`), its refusal
    for memory raised again; None when none is kept."""
    record = target_cache.load(stored_as)
    if record is None:
        return None
    if isinstance(record.get("refused"), str):
        raise _out_of_memory(name, devices, str(record.get("quoted", "")), str(record["refused"]))
    try:
        return TargetCompilation(
            target=devices.target, device_kind=devices.device_kind, devices=count, device_ids=device_ids,
            hlo_text=str(record["hlo_text"]),
            memory={str(k): int(v) for k, v in dict(record["memory"]).items()},  # type: ignore[call-overload]  # JSON
            cost={str(k): float(v) for k, v in dict(record["cost"]).items()},  # type: ignore[call-overload]  # JSON
            partitioner=tuple(str(m) for m in record.get("partitioner") or ()),  # type: ignore[attr-defined]  # JSON
            compiler_log=tuple(str(m) for m in record.get("compiler_log") or ()))  # type: ignore[attr-defined]  # JSON
    except (KeyError, TypeError, ValueError):  # a record of another shape: compiled afresh
        return None


def _out_of_memory(name: str, devices: TargetDevices, quoted: str, message: str) -> "OutOfMemory":
    """The refusal of ``name`` for memory: the compiler's ``message``, ``quoted`` in the error's words."""
    return OutOfMemory(f"{name} does not fit in the memory of {devices.target}'s devices: {quoted}",
                       "shard it over more devices, rematerialize (jax.checkpoint) or use smaller batches",
                       compiler_message=message)


def _versions(devices: TargetDevices) -> tuple[str, ...]:
    """What made a compile besides its key: jax's version and the target's compiler's."""
    import jax

    client = getattr(devices.devices[0], "client", None)
    return (jax.__version__, str(getattr(client, "platform_version", "")), str(getattr(client, "platform", "")))


_OUT_OF_MEMORY = "RESOURCE_EXHAUSTED"
"""How XLA:TPU's refusal of a step for memory begins ("RESOURCE_EXHAUSTED: Ran out of memory on HBM ...")."""


class OutOfMemory(TargetError):
    """The target's compiler refused the program for memory; ``compiler_message`` is its own words
    (what the program needed and what the chip has)."""

    def __init__(self, message: str, hint: str = "", *, compiler_message: str = "") -> None:
        super().__init__(message, hint)
        self.compiler_message = compiler_message


KEPT_COMPILATIONS = 32
"""Target compiles this process keeps (the least recently used go first). A module compiled
for a TPU slice or for GPUs is not read back from JAX's persistent cache (its compile-only
client cannot load an executable), so a second run of the same program on the same target in
one process (the app's ``r``, a program the app runs again after another) takes it from here.
A :class:`TargetCompilation` holds plain values only."""

_COMPILED: "OrderedDict[tuple[object, ...], TargetCompilation]" = OrderedDict()
_COMPILED_LOCK = threading.Lock()


def _compile_key(lowering: "MeshComputation", devices: TargetDevices,
                 device_ids: tuple[int, ...]) -> tuple[object, ...]:
    """What decides a target's compile of ``lowering``: the module with its source locations
    (the partitioner's messages and the compiled module's metadata name them), the shardings and
    layouts it is compiled with, XLA's options, the target and the devices that run it."""
    args = lowering.compile_args
    return (
        module_digest(lowering, debug_info=True),
        tuple(repr(args.get(k)) for k in ("in_shardings", "out_shardings", "in_layouts", "out_layouts")),
        repr(lowering._compiler_options_kvs),
        devices.target, devices.device_kind, device_ids,
    )


_HOST_CALLBACK_ERROR = "the platform for the specified backend"
"""How JAX's lowering refuses a host callback for a platform other than its devices' own."""


def _lower(traced: "jax.stages.Traced", target: Target, name: str) -> "MeshComputation":
    """JAX's lowering of ``traced`` for ``target``'s platform, over the devices it was traced on.

    A host callback (``jax.debug.print``, ``jax.debug.callback``, ``pure_callback``,
    ``io_callback``) is lowered against the backend of the devices, the CPU's here: JAX refuses
    it for another platform, and the message says so.
    """
    from shardscope.engine.hlo.compiled import (
        jax_traced,  # the engine: 0.5 s of imports the sidebar's parse_target must not pay
    )

    try:
        return jax_traced(traced).lower(lowering_platforms=(target.lowering_platform,))._lowering  # nnx.jit's Traced holds JAX's
    except Exception as exc:
        if _HOST_CALLBACK_ERROR in str(exc):
            raise TargetError(
                f"{name} calls back to Python (jax.debug.print, jax.debug.callback, pure_callback or "
                f"io_callback), which shardscope cannot compile for {target} from its trace on CPU devices.",
                "leave the callback out of the program you check against a target") from exc
        raise TargetError(f"JAX failed to lower {name} for {target}: {quote_error(exc)}",
                          "--debug shows JAX's whole message") from exc


def _program_devices(lowering: "MeshComputation") -> "tuple[jax.Device, ...]":
    """The devices of ``lowering``'s device assignment, by position (jax types the list as
    optional; a jit's lowering always has one)."""
    assert lowering._device_list is not None
    return tuple(lowering._device_list)


def _placement(lowering: "MeshComputation", devices: TargetDevices, name: str,
               traced: "jax.stages.Traced") -> "Placement":
    """The target device that runs each device position of ``lowering``'s device assignment."""
    program_devices = _program_devices(lowering)
    if set(program_devices) <= set(devices.devices):
        return {device: device for device in program_devices}
    if len(program_devices) != devices.count:
        raise _other_device_count(name, program_devices, devices, traced)
    grid = devices.target.grid(devices.devices, _mesh_shape(lowering, program_devices))
    return dict(zip(program_devices, grid.flat))


def _other_device_count(name: str, program_devices: tuple["jax.Device", ...], devices: TargetDevices,
                        traced: "jax.stages.Traced") -> TargetError:
    """A program over another number of devices than the target has, with the way to trace it over
    as many: start that many CPU devices (in a process whose JAX runs on chips, beside them), or
    change the line of the file that takes the count."""
    from shardscope.engine.hlo.compiled import jax_traced  # loaded by _lower already: see there

    count, spans = devices.count, f"{len(program_devices)} device" + ("s" if len(program_devices) != 1 else "")
    first = program_devices[0]
    if first.platform != "cpu":  # a notebook on a TPU VM: its JAX runs on the chip
        return TargetError(
            f"{name} runs on {spans} ({first.device_kind}: this process's JAX runs on its chips); {devices.target} "
            f"has {count}.",
            f"trace it over {count} CPU devices beside the chips: jax.config.update('jax_num_cpu_devices', {count}) "
            f"right after import jax, before JAX starts, and its mesh over jax.devices('cpu')[:{count}]")
    return TargetError(f"{name} runs on {spans}; {devices.target} has {count}.",
                       device_count_hint(jax_traced(traced), len(program_devices), devices))


def _mesh_shape(lowering: "MeshComputation", program_devices: tuple["jax.Device", ...]) -> tuple[int, ...]:
    """The shape of the program's mesh over its device assignment (1-D when it names none)."""
    from jax.sharding import Mesh as JaxMesh
    from jax.sharding import NamedSharding

    args = lowering.compile_args
    candidates = [args.get("context_mesh")]
    for key in ("in_shardings", "out_shardings", "intermediate_shardings"):
        candidates += [s.mesh for s in args.get(key) or () if isinstance(s, NamedSharding)]
    for mesh in candidates:
        if isinstance(mesh, JaxMesh) and mesh.size and tuple(mesh.devices.flat) == program_devices:
            return tuple(mesh.devices.shape)
    return (len(program_devices),)


def _retargeted(lowering: "MeshComputation", placement: "Placement") -> "MeshComputation":
    """``lowering`` with its device assignment, backend and shardings moved to the target.

    The lowered module itself stays as JAX made it: it holds positions, not devices.
    """
    from jax._src.interpreters import pxla
    from jax._src.lib import xla_client

    order = tuple(placement[device] for device in _program_devices(lowering))
    args = dict(lowering.compile_args)
    args["backend"] = order[0].client
    for key in ("in_shardings", "out_shardings", "intermediate_shardings"):
        if args.get(key) is not None:
            args[key] = tuple(_moved_sharding(sharding, placement) for sharding in args[key])
    if _is_concrete_mesh(args.get("context_mesh")):
        args["context_mesh"] = _moved_mesh(args["context_mesh"], placement)
    return pxla.MeshComputation(
        lowering._name, lowering._hlo, lowering.const_args, lowering._donated_invars, lowering._platforms,
        lowering._compiler_options_kvs, xla_client.DeviceList(order), **args)


def _moved_sharding(sharding: "jax.sharding.Sharding", placement: "Placement") -> "jax.sharding.Sharding":
    """The same sharding over the placed devices (unspecified shardings stay as they are).

    A ``NamedSharding`` moves with its mesh; a ``GSPMDSharding`` (what jit gives a result laid
    out by a ``with_sharding_constraint`` under a mesh context, as flax's ``nnx.jit`` steps over
    ``nnx.with_partitioning`` models return) and a ``SingleDeviceSharding`` keep their HLO
    sharding over the devices placed at their devices' positions."""
    from jax._src.sharding_impls import GSPMDSharding  # jax exports no name for the class jit returns
    from jax.sharding import NamedSharding, Sharding, SingleDeviceSharding

    if isinstance(sharding, NamedSharding) and _is_concrete_mesh(sharding.mesh):
        return NamedSharding(_moved_mesh(sharding.mesh, placement), sharding.spec, memory_kind=sharding.memory_kind)
    if isinstance(sharding, GSPMDSharding):
        devices = tuple(placement[device] for device in sharding._device_assignment)
        return GSPMDSharding(devices, sharding._hlo_sharding, memory_kind=sharding.memory_kind)
    if isinstance(sharding, SingleDeviceSharding):
        (device,) = sharding.device_set
        return SingleDeviceSharding(placement[device], memory_kind=sharding.memory_kind)
    if isinstance(sharding, Sharding) and not isinstance(sharding, NamedSharding):
        raise TargetError(f"shardscope cannot move a {type(sharding).__name__} to a target.",
                          "give the program's inputs and outputs NamedShardings over its mesh")
    return sharding


def _is_concrete_mesh(mesh: object) -> "TypeGuard[jax.sharding.Mesh]":
    from jax.sharding import Mesh as JaxMesh

    return isinstance(mesh, JaxMesh) and mesh.size > 0


def _moved_mesh(mesh: "jax.sharding.Mesh", placement: "Placement") -> "jax.sharding.Mesh":
    """``mesh`` with each device replaced by the one placed at its position."""
    import numpy as np
    from jax.sharding import Mesh as JaxMesh

    moved = np.array([placement[device] for device in mesh.devices.flat], dtype=object).reshape(mesh.devices.shape)
    return JaxMesh(moved, mesh.axis_names, axis_types=mesh.axis_types)


def _memory(executable: "MeshExecutable") -> dict[str, int]:
    """``memory_analysis()`` as plain ints: every byte count the compiler reports."""
    stats = executable.memory_analysis()
    if stats is None:
        return {}
    fields = (name for name in dir(stats) if not name.startswith("_"))
    return {name: int(value) for name in fields
            if isinstance(value := getattr(stats, name), int) and not isinstance(value, bool)}


def _cost(executable: "MeshExecutable") -> dict[str, float]:
    """``cost_analysis()`` as plain floats (TPU keys: ``flops``, ``optimal_seconds``, ``utilization*``...),
    by key: libtpu hands them over in another order in every process, and ``--json`` is compared
    between runs byte for byte."""
    try:
        cost = executable.cost_analysis()
    except NotImplementedError:  # the GPU's compile-only executable has none
        return {}
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return {str(key): float(value) for key, value in sorted((cost or {}).items(), key=lambda item: str(item[0]))}
