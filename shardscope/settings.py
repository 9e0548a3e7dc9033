"""The settings of one analysis: which function, on which mesh, in chunks of what size."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from shardscope.mesh import Mesh

DEFAULT_DEVICES = 2
DEFAULT_AXIS = "s"
DEFAULT_REPEATS = 20


@dataclass(frozen=True)
class Settings:
    """What the user picked. ``None`` means "the default for this demo".

    ``mesh`` is the truth; ``devices`` and ``axis`` are the 1-D shorthand (``--devices N --axis s``
    is the mesh ``s=N``): given without a mesh they build it, and with a mesh they mirror it
    (``devices`` its size, ``axis`` its axis names joined by commas). ``batch_axes=None`` splits
    the batch over every mesh axis. ``function=None`` is the first demo in the file;
    ``chunk_size=None`` is the largest chunk size that still gives at least two chunks per device.
    """

    path: Path
    function: str | None = None
    devices: int = DEFAULT_DEVICES
    axis: str = DEFAULT_AXIS
    chunk_size: int | None = None
    repeats: int = DEFAULT_REPEATS
    mesh: Mesh | None = field(default=None)
    batch_axes: tuple[str, ...] | None = None

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
        """A copy with some fields changed; changing ``devices`` or ``axis`` rebuilds a 1-D mesh."""
        if ("devices" in changes or "axis" in changes) and "mesh" not in changes:
            changes["mesh"] = Mesh.one_axis(changes.get("axis", self.mesh.names[0]), changes.get("devices", self.devices))
            changes.setdefault("batch_axes", None)
        return replace(self, **changes)


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def default_chunk_size(per_device_batch: int) -> int:
    """The largest chunk size that gives at least two chunks per device (1 chunk if none does)."""
    candidates = [c for c in divisors(per_device_batch) if per_device_batch // c >= 2]
    return max(candidates) if candidates else per_device_batch
