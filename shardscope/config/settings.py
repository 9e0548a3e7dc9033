"""The settings of one analysis: which function, on which mesh, in chunks of what size."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from shardscope.errors import SettingsError
from shardscope.config.mesh import Mesh

DEFAULT_DEVICES = 2
DEFAULT_AXIS = "s"
DEFAULT_REPEATS = 20
DEFAULT_TIMING_BUDGET_S = 3.0
"""The seconds the commands and the explorer may spend on rounds past ``repeats`` while a
comparison of two programs is not settled (:func:`shardscope.measure.speedup.settled`)."""
MAX_DEVICES = 4096
"""The most simulated CPU devices shardscope starts: a v4 pod's 4,096 chips, and v5p's 8x8x16
(1,024) that issue 51 measures at. XLA gives every CPU device its own threads and buffers, and
starting them grows faster than their count (measured on this 2-core machine, jax 0.10.2:
1,024 in 1.8 s and 280 MB, 4,096 in 16 s and 590 MB, 8,192 in 72 s and 1 GB); 100,000
exhausted 20 GB and aborted."""


@dataclass(frozen=True)
class Settings:
    """What the user picked. ``None`` means "the default for this demo".

    ``mesh`` is the truth; ``devices`` and ``axis`` are the 1-D shorthand (``--devices N --axis s``
    is the mesh ``s=N``): given without a mesh they build it, and with a mesh they mirror it
    (``devices`` its size, ``axis`` its axis names joined by commas). ``batch_axes=None`` splits
    the batch over every mesh axis. ``function=None`` is the first demo in the file;
    ``chunk_size=None`` is the largest chunk size that still gives at least two chunks per device.
    ``demo_mesh`` says the user gave no mesh: :meth:`for_demo` then puts the demo's own mesh
    (``@shardscope.demo(mesh=...)``, or one derived from its ``param_specs``) in place of the
    default ``s=2``. ``what_if`` puts each program's verified what-if rewrites beside it
    (:mod:`shardscope.pipeline.what_if_programs`; a program file only). ``targets`` are the TPU
    slices (``tpu:v5e:2x2``) every program is also compiled for, as typed in the app's sidebar
    or given to ``shardscope FILE --target``; the headless commands pass loaded targets instead.
    """

    path: Path
    function: str | None = None
    devices: int = DEFAULT_DEVICES
    axis: str = DEFAULT_AXIS
    chunk_size: int | None = None
    repeats: int = DEFAULT_REPEATS
    mesh: Mesh = field(default=None)  # type: ignore[assignment]  # None: built from devices and axis by __post_init__, so never None after
    batch_axes: tuple[str, ...] | None = None
    demo_mesh: bool = False
    what_if: bool = False  # a program file's programs with shardscope's verified rewrites beside them
    targets: tuple[str, ...] = ()  # TPU slices to compile for as well (``tpu:v5e:2x2``): the app's target field
    profile: bool = False  # run the programs under JAX's profiler too (--profile): measured times on each plan
    profile_dir: str | None = None  # a profile the user captured (--profile-dir), put on each plan
    timing_budget_s: float = 0.0  # seconds of more rounds past ``repeats`` while a comparison is unsettled; 0: none

    def __post_init__(self) -> None:
        mesh = self.mesh if self.mesh is not None else Mesh.one_axis(self.axis, self.devices)
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "devices", mesh.devices)
        object.__setattr__(self, "axis", ",".join(mesh.names))
        if self.batch_axes is not None:
            object.__setattr__(self, "batch_axes", tuple(self.batch_axes))

    @property
    def split_axes(self) -> tuple[str, ...]:
        """The mesh axes the batch is split over (every axis unless ``batch_axes`` says otherwise)."""
        return self.mesh.names if self.batch_axes is None else self.batch_axes

    def with_(self, **changes) -> "Settings":
        """A copy with some fields changed; changing ``devices`` or ``axis`` rebuilds a 1-D mesh.

        A mesh given this way is the user's (``demo_mesh`` becomes False) unless ``demo_mesh`` is
        among the changes.
        """
        if ("devices" in changes or "axis" in changes) and "mesh" not in changes:
            changes["mesh"] = Mesh.one_axis(changes.get("axis", self.mesh.names[0]), changes.get("devices", self.devices))
            changes.setdefault("batch_axes", None)
        if "mesh" in changes:
            changes.setdefault("demo_mesh", False)
        return replace(self, **changes)

    def for_demo(self, demo_mesh: Mesh | None) -> "Settings":
        """These settings on ``demo_mesh`` (a demo's own mesh) when the user gave none.

        Without a demo mesh the default 1-D mesh stands. ``demo_mesh`` stays True, so the next
        demo function picked gets its own mesh too; a mesh the user gave is never replaced.
        """
        if not self.demo_mesh:
            return self
        mesh = demo_mesh or Mesh.one_axis(DEFAULT_AXIS, DEFAULT_DEVICES)
        return replace(self, mesh=mesh)


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def default_chunk_size(per_device_batch: int) -> int:
    """The largest chunk size that gives at least two chunks per device (1 chunk if none does)."""
    candidates = [c for c in divisors(per_device_batch) if per_device_batch // c >= 2]
    return max(candidates) if candidates else per_device_batch


def check_device_count(devices: int, batch: int | None = None, available: int = MAX_DEVICES) -> None:
    """Raise :class:`SettingsError` unless ``devices`` is at most ``available`` and divides ``batch``.

    Needs no JAX: the CLI calls it before the backend starts (starting 20,000 CPU devices hangs).
    The hint lists every device count that would work.
    """
    if devices < 1 or devices > available:
        valid = [d for d in divisors(batch) if d <= available] if batch else []
        limit = "shardscope simulates" if available == MAX_DEVICES else "are available"
        raise SettingsError(
            f"{devices:,} devices asked for, but at most {available:,} {limit}.",
            f"use a device count that divides the batch {batch}: {', '.join(map(str, valid))}"
            if valid else f"pick 1 to {available:,} devices",
        )
    if batch is not None and batch % devices:
        valid = [d for d in divisors(batch) if d <= available]
        raise SettingsError(
            f"The batch N={batch} does not split over {devices} devices.",
            f"use a device count that divides {batch}: {', '.join(map(str, valid))}",
        )


def check_target_size(target: str, count: int, unit: str, example: str) -> None:
    """:class:`SettingsError` when ``target`` has more than :data:`MAX_DEVICES` devices (``count``
    of them, called ``unit``): a program is traced over as many simulated CPU devices as the
    target has, so such a target could never be used. The parsers of TPU and GPU names call it
    before libtpu spends seconds (22 s for a million chips) listing the devices; the app calls it
    on the devices a slice has once loaded (two cores per chip on some generations)."""
    if count > MAX_DEVICES:
        raise SettingsError(
            f"{target} has {count:,} {unit}; shardscope traces a program over as many simulated CPU "
            f"devices as the target has, and at most {MAX_DEVICES:,}.",
            f"pick a target of at most {MAX_DEVICES:,} {unit}, e.g. {example}")


def check_axis_name(axis: str) -> str:
    """``axis`` if it is an ASCII Python identifier, else :class:`SettingsError`.

    XLA aborts the whole process (a fatal check, not an exception) on a non-ASCII axis name such
    as ``ñ``, so this check comes before any tracing, in the CLI and in the app alike.
    """
    if not (axis.isascii() and axis.isidentifier()):
        raise SettingsError(
            f"The mesh axis name {axis!r} is not a valid name.",
            "use ASCII letters, digits and _, not starting with a digit (for example s)",
        )
    return axis
