"""Compile a traced program for a TPU slice on a machine without TPUs (``--target tpu:v5e:16x16``).

libtpu (``pip install 'shardscope[tpu]'``) describes any TPU topology as compile-only devices
(``jax.experimental.topologies.get_topology_desc``): XLA's TPU compiler runs for them, nothing
executes on them, so a target has a compiled module and its memory and cost analyses, never
timings.

A program is traced once, over the CPU devices its file built its meshes from, and its meshes
are never rebuilt. JAX lowers that trace for the TPU platform (``lowering_platforms=("tpu",)``):
the lowered module names devices only by their position in its device assignment (shardings,
replica groups, Shardy meshes, ``shard_map`` regions). The same module is then compiled for the
target's devices at those positions, laid out as ``jax.make_mesh`` lays a mesh of that shape
on the slice itself. The compiled module is the one the program compiles to when written
against a mesh of the target's own devices (tests/test_targets.py checks it on jit with Auto
and Explicit axes, ``shard_map`` and nesting). Rewriting the jaxpr's meshes instead would have
to rewrite every variable's type and every equation's mesh context, all JAX internals.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, TypeGuard

from shardscope.errors import SettingsError, TargetError, quote_error
from shardscope.plans.mesh import Mesh

if TYPE_CHECKING:
    import jax
    import numpy as np
    from jax._src.interpreters.pxla import MeshComputation, MeshExecutable

    Placement = dict[jax.Device, jax.Device]

TPU_EXTRA = "pip install 'shardscope[tpu]'"
"""What installs libtpu next to the user's own jax (the ``tpu`` extra)."""

TOPOLOGY_EXAMPLES = ("v5e:2x2", "v5e:16x16", "v5p:2x2x2", "v4:2x2x2", "v6e:4x4")
"""Topology names libtpu accepts, for hints: a TPU generation, then chips per dimension."""

_TOPOLOGY_NAME = re.compile(r"^[A-Za-z0-9_ ]+[=_:][0-9x]+(_twisted|_untwisted)?$")
"""The form libtpu parses a topology name with (its own message quotes this pattern)."""

_CHIP_CONFIGS = {
    "TPU v4": "megacore",
    "TPU v5": "megachip_tccontrol",
    "TPU v5p": "megachip_tccontrol",
    "TPU v6 lite": "megachip_tccontrol",
    "TPU v6e": "megachip_tccontrol",
}
"""The chip configuration libtpu sets on live Cloud TPU hosts, per device kind (as JAX's own AOT
tests match it): without it a v4 topology lists each TensorCore as a device, two per chip,
where a v4 host shows one device per chip."""

_COMPILE_ONLY_ENV = {
    "TPU_ACCELERATOR_TYPE": "v5litepod-4",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}
"""What libtpu's start-up reads about the TPU host it runs on, for a machine that is none.

Without the first two it prints two warnings (and an error line with a source trace) straight
to file descriptor 2, which no log level silences; the compiled modules are the same with and
without them, whatever accelerator type is named (checked on v4, v5e, v5p, v6e). Without the
third, libtpu takes /tmp/libtpu_lockfile, which guards a host's chips: a second process (a
test worker, another shardscope) then fails to start it with "Internal error when accessing
libtpu multi-process lockfile"."""

_PLUGIN_START = threading.Lock()


@dataclass(frozen=True)
class Target:
    """A slice to compile for: ``tpu:v5e:16x16`` is platform ``tpu``, topology ``v5e:16x16``."""

    platform: str
    topology: str

    def text(self) -> str:
        """``tpu:v5e:16x16``: the form :func:`parse_target` reads."""
        return f"{self.platform}:{self.topology}"

    def __str__(self) -> str:
        return self.text()


def parse_target(text: str) -> Target:
    """``tpu:v5e:16x16`` -> ``Target("tpu", "v5e:16x16")``; :class:`SettingsError` for anything else.

    Checks the form only (no libtpu needed): whether libtpu knows the topology is
    :func:`load_target`'s to say.
    """
    platform, sep, topology = text.strip().partition(":")
    examples = ", ".join(f"tpu:{name}" for name in TOPOLOGY_EXAMPLES)
    if platform.lower() == "gpu":
        raise SettingsError(
            f"{text!r}: shardscope compiles for TPU slices only.",
            f"use a TPU target, e.g. {examples} (compiling for a GPU without one needs JAX's CUDA "
            "wheels and a description of the GPU: docs/tpu-targets.md)")
    if platform.lower() != "tpu" or not sep:
        raise SettingsError(f"{text!r} is not a target: expected tpu:TOPOLOGY.", f"for example {examples}")
    topology = topology.strip()
    if not _TOPOLOGY_NAME.match(topology):
        raise SettingsError(
            f"{topology!r} is not a TPU topology name: expected a generation and the chips per dimension.",
            f"for example {examples}")
    return Target("tpu", topology)


@dataclass(frozen=True)
class TargetDevices:
    """The compile-only devices of a target's topology, in the topology's own order."""

    target: Target
    devices: tuple["jax.Device", ...]

    @property
    def count(self) -> int:
        """How many devices (chips; cores on a v7x) the slice has."""
        return len(self.devices)

    @property
    def device_kind(self) -> str:
        """``TPU v5 lite``: what JAX calls the slice's chips."""
        return self.devices[0].device_kind


def load_target(target: Target) -> TargetDevices:
    """The devices of ``target``'s topology, from libtpu (started once per process, quietly).

    Raises :class:`TargetError` when libtpu is missing or does not fit the installed jax, and
    when libtpu does not know the topology (its own reason quoted).
    """
    return _load_topology(target.topology)


@functools.lru_cache(maxsize=None)
def _load_topology(topology: str) -> TargetDevices:
    target = Target("tpu", topology)
    _require_libtpu()
    with _compile_only_start():
        devices = _topology_devices(target, {})
        chip_config = _CHIP_CONFIGS.get(devices[0].device_kind)
        if chip_config is not None:
            devices = _topology_devices(target, {"chip_config_name": chip_config})
    return TargetDevices(target, tuple(devices))


def _topology_devices(target: Target, options: dict[str, str]) -> list:
    """libtpu's compile-only devices for ``target``'s topology, with its errors in words."""
    from jax.experimental import topologies

    try:
        return list(topologies.get_topology_desc(platform="tpu", topology_name=target.topology, **options).devices)
    except Exception as exc:  # JaxRuntimeError INVALID_ARGUMENT for names libtpu does not know
        examples = ", ".join(f"tpu:{name}" for name in TOPOLOGY_EXAMPLES)
        if "INVALID_ARGUMENT" in str(exc):
            raise TargetError(f"libtpu does not know the topology {target.topology!r}: {quote_error(exc)}",
                              f"for example {examples}") from None
        import jax

        raise TargetError(
            f"libtpu failed to describe {target}: {quote_error(exc)}",
            f"libtpu must be the version jax {jax.__version__} asks for: {TPU_EXTRA} "
            f"(or pip install 'jax[tpu]=={jax.__version__}')") from exc


def _require_libtpu() -> None:
    """:class:`TargetError` (exit 2) unless a libtpu is installed (the package or ``TPU_LIBRARY_PATH``)."""
    path = os.environ.get("TPU_LIBRARY_PATH")
    try:
        installed = importlib.util.find_spec("libtpu") is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as none
        installed = False
    if installed or (path and os.path.isfile(path)):
        return
    raise TargetError("Compiling for a TPU target needs libtpu, which is not installed.",
                      f"{TPU_EXTRA} (it installs the libtpu that fits your jax)")


@contextlib.contextmanager
def _compile_only_start() -> Iterator[None]:
    """libtpu started as a compiler only: quiet, and beside other processes that started it.

    The variables are set only while libtpu starts, only where they are unset, and only on a
    machine without TPU chips: on a TPU host they describe the real slice, the lockfile guards
    its chips, and JAX's own TPU backend reads them. Errors still surface: they are exceptions,
    not the lines these variables silence.
    """
    with _PLUGIN_START:
        added = {} if _tpu_chips_attached() else {k: v for k, v in _COMPILE_ONLY_ENV.items() if k not in os.environ}
        os.environ.update(added)
        try:
            yield
        finally:
            for name in added:
                os.environ.pop(name, None)


def _tpu_chips_attached() -> bool:
    """True when this machine has TPU chips, by the PCI check JAX itself makes at import."""
    try:
        from jax._src import hardware_utils
    except ImportError:  # a jax without it: assume a TPU host, and leave libtpu's environment alone
        return True
    return hardware_utils.num_available_tpu_chips_and_device_id()[0] > 0


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
    return JaxMesh(device_grid(devices.devices, spec.sizes), spec.names)


def device_grid(devices: tuple["jax.Device", ...], shape: tuple[int, ...]) -> "np.ndarray":
    """``devices`` as an array of ``shape`` (numpy, dtype object), in ``jax.make_mesh``'s layout.

    ``mesh_utils.create_device_mesh`` orders a TPU slice's chips so that mesh neighbours are ICI
    neighbours; for a shape it has no layout for, the topology's own order is kept.
    """
    import numpy as np
    from jax.experimental import mesh_utils

    try:
        return mesh_utils.create_device_mesh(shape, devices=list(devices))
    except (AssertionError, ValueError, NotImplementedError):
        return np.array(devices, dtype=object).reshape(shape)


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


def compile_for_target(traced: "jax.stages.Traced", devices: TargetDevices, name: str = "the program") -> TargetCompilation:
    """Compile ``traced`` (``jax.jit(f).trace(...)``) for ``devices``' slice.

    A program traced over CPU devices must span as many as the target has; its device at
    position i runs on the target's device at position i of a ``jax.make_mesh`` layout of the
    program's mesh shape. A program traced over the target's own devices compiles as it is.
    Raises :class:`TargetError` for a device count that does not fit and when XLA fails.
    """
    lowering = _lower_for_tpu(traced, devices.target, name)
    placement = _placement(lowering, devices, name)
    try:
        executable = _retargeted(lowering, placement).compile()
    except Exception as exc:
        raise TargetError(f"XLA failed to compile {name} for {devices.target}: {quote_error(exc)}",
                          "--debug shows XLA's whole message") from exc
    return TargetCompilation(
        target=devices.target,
        device_kind=devices.device_kind,
        devices=len(placement),
        device_ids=tuple(placement[device].id for device in _program_devices(lowering)),
        hlo_text=executable.as_text(),
        memory=_memory(executable),
        cost=_cost(executable),
    )


_HOST_CALLBACK_ERROR = "the platform for the specified backend"
"""How JAX's lowering refuses a host callback for a platform other than its devices' own."""


def _lower_for_tpu(traced: "jax.stages.Traced", target: Target, name: str) -> "MeshComputation":
    """JAX's lowering of ``traced`` for the TPU platform, over the devices it was traced on.

    A host callback (``jax.debug.print``, ``jax.debug.callback``, ``pure_callback``,
    ``io_callback``) is lowered against the backend of the devices, the CPU's here: JAX refuses
    it for the TPU platform, and the message says so.
    """
    from shardscope.engine.hlo.compiled import jax_traced  # the engine: 0.5 s of imports the sidebar's parse_target must not pay

    try:
        return jax_traced(traced).lower(lowering_platforms=("tpu",))._lowering  # nnx.jit's Traced holds JAX's
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


def _placement(lowering: "MeshComputation", devices: TargetDevices, name: str) -> "Placement":
    """The target device that runs each device position of ``lowering``'s device assignment."""
    program_devices = _program_devices(lowering)
    if set(program_devices) <= set(devices.devices):
        return {device: device for device in program_devices}
    if len(program_devices) != devices.count:
        spans = f"{len(program_devices)} device" + ("s" if len(program_devices) != 1 else "")
        raise TargetError(
            f"{name} runs on {spans}; {devices.target} has {devices.count}.",
            f"pick a topology with {len(program_devices)} chips, or build the program's mesh over "
            f"{devices.count} devices: jax.devices()[:{devices.count}] in the file, or start {devices.count} CPU "
            f"devices (shardscope check --devices {devices.count}; the app: --max-devices {devices.count})")
    grid = device_grid(devices.devices, _mesh_shape(lowering, program_devices))
    return dict(zip(program_devices, grid.flat))


def _mesh_shape(lowering: "MeshComputation", program_devices: tuple["jax.Device", ...]) -> tuple[int, ...]:
    """The shape of the program's mesh over its device assignment (1-D when it names none)."""
    from jax.sharding import Mesh as JaxMesh, NamedSharding

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
    """A ``NamedSharding`` over the placed devices (unspecified shardings stay as they are)."""
    from jax.sharding import NamedSharding, Sharding

    if isinstance(sharding, NamedSharding) and _is_concrete_mesh(sharding.mesh):
        return NamedSharding(_moved_mesh(sharding.mesh, placement), sharding.spec, memory_kind=sharding.memory_kind)
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
    """``cost_analysis()`` as plain floats (TPU keys: ``flops``, ``optimal_seconds``, ``utilization*``...)."""
    cost = executable.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return {str(key): float(value) for key, value in (cost or {}).items()}
