"""The settings of one analysis: which function, on how many devices, in chunks of what size."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

DEFAULT_DEVICES = 2
DEFAULT_AXIS = "s"
DEFAULT_REPEATS = 20


@dataclass(frozen=True)
class Settings:
    """What the user picked. ``None`` means "the default for this demo".

    ``function=None`` is the first demo in the file; ``chunk_size=None`` is the largest chunk
    size that still gives at least two chunks per device.
    """

    path: Path
    function: str | None = None
    devices: int = DEFAULT_DEVICES
    axis: str = DEFAULT_AXIS
    chunk_size: int | None = None
    repeats: int = DEFAULT_REPEATS

    def with_(self, **changes) -> "Settings":
        """A copy with some fields changed."""
        return replace(self, **changes)


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def default_chunk_size(per_device_batch: int) -> int:
    """The largest chunk size that gives at least two chunks per device (1 chunk if none does)."""
    candidates = [c for c in divisors(per_device_batch) if per_device_batch // c >= 2]
    return max(candidates) if candidates else per_device_batch
