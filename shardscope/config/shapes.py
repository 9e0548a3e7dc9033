"""The sizes that follow from a demo's batch and the settings: pure arithmetic, no JAX.

The sidebar checks a choice with :func:`resolve_shapes` before any run starts, and the core
uses the same function, so the two never disagree on what divides what.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.errors import SettingsError
from shardscope.config.mesh import Mesh
from shardscope.config.settings import MAX_DEVICES, Settings, default_chunk_size, divisors


@dataclass(frozen=True)
class Shapes:
    """The sizes that follow from a demo and the settings.

    ``devices`` is the whole mesh; ``batch_shards`` how many pieces the batch is split into (the
    product of the batch axes' sizes); devices that differ only along the other axes hold the
    same piece of the batch.
    """

    batch: int
    devices: int
    per_device_batch: int
    chunk_size: int
    chunks_per_device: int
    mesh: Mesh | None = None
    batch_axes: tuple[str, ...] = ()

    @property
    def batch_shards(self) -> int:
        """How many pieces the batch is split into."""
        return self.batch // self.per_device_batch


def resolve_shapes(batch: int, settings: Settings, available_devices: int) -> Shapes:
    """Check the settings against the batch and fill in the default chunk size."""
    mesh = settings.mesh
    devices = mesh.devices
    if not 1 <= devices <= available_devices:
        raise SettingsError(
            f"{devices} devices asked for (the mesh {mesh.text()}), but {available_devices} are available.",
            f"pick a mesh of 1 to {available_devices} devices",
        )
    batch_axes = mesh.check_axes(settings.split_axes, "--batch-axes")
    shards = mesh.size_of(batch_axes)
    if batch % shards:
        over = "devices" if len(mesh.axes) == 1 else f"pieces (axes {','.join(batch_axes)} of {mesh.text()})"
        raise SettingsError(f"The batch N={batch} does not split over {shards} {over}.",
                            _dividing_counts(batch, available_devices))
    per_device = batch // shards
    chunk = default_chunk_size(per_device) if settings.chunk_size is None else settings.chunk_size
    if chunk <= 0 or per_device % chunk:
        raise SettingsError(
            f"Chunk size {chunk} does not divide the per-device batch "
            f"{per_device} (N={batch} over {shards} devices).",
            f"valid chunk sizes: {', '.join(map(str, divisors(per_device)))}",
        )
    return Shapes(batch, devices, per_device, chunk, per_device // chunk, mesh, batch_axes)


def _dividing_counts(batch: int, available_devices: int) -> str:
    """The hint of a device count that does not divide ``batch``: every count that does, those
    over the ``available_devices`` started told apart (``--devices`` starts them: ``check linear
    -d 3`` started 3, and 4 works as well as 2)."""
    here = [d for d in divisors(batch) if d <= available_devices]
    more = [d for d in divisors(batch) if available_devices < d <= MAX_DEVICES]
    hint = f"use a device count that divides {batch}: {', '.join(map(str, here))}"
    if more:
        hint += f", or with more devices started (--devices; the app's --max-devices) {', '.join(map(str, more))}"
    return hint
