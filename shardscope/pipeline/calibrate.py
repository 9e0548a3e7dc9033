"""Fit the alpha-beta model to all-reduces measured on this machine, and say how well it fits; and
measure its CPU's peak compute and memory bandwidth (:mod:`shardscope.pipeline.cpu_peaks`).

Each size runs :data:`ALL_REDUCES_PER_CALL` dependent all-reduces inside one compiled loop, so
dispatch is paid once per call, not once per all-reduce. A least-squares line through
``(S, seconds per all-reduce)`` gives ``t = a + b·S``; with the ring formula
``t = 2(n-1)·alpha + 2(n-1)/n · S/B``: ``alpha = a / (2(n-1))`` and ``B = 2(n-1)/(n·b)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from shardscope.collective_kinds import ALL_REDUCE
from shardscope.hardware.chips import Chip
from shardscope.pipeline.cpu_peaks import measure_cpu_chip
from shardscope.distributed.workers import collectives_transport
from shardscope.engine.compilation import compile_lowered
from shardscope.errors import SettingsError
from shardscope.measure import timing

ALL_REDUCES_PER_CALL = 16
DEFAULT_SIZES = (1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20)
"""Payload bytes per device: 1 KiB to 4 MiB."""


@dataclass(frozen=True)
class AllReducePoint:
    """One payload size and the median seconds one all-reduce of it took."""

    payload_bytes: int
    seconds: float


@dataclass(frozen=True)
class Calibration:
    """The fitted link of this machine and the fit's error."""

    devices: int
    processes: int
    collectives_transport: str
    points: tuple[AllReducePoint, ...]
    latency_s: float
    bandwidth_Bps: float | None  # None when time does not grow with size (bandwidth not resolvable)
    cpu: Chip | None = None
    """This machine's CPU: its peak compute and memory bandwidth, measured (the step estimate's chip)."""

    def predicted(self, payload_bytes: int) -> float:
        """Seconds the fitted model gives for one all-reduce of ``payload_bytes``."""
        n = self.devices
        bandwidth = 0.0 if self.bandwidth_Bps is None else 2 * (n - 1) / n * payload_bytes / self.bandwidth_Bps
        return 2 * (n - 1) * self.latency_s + bandwidth

    @property
    def relative_errors(self) -> list[float]:
        """``(predicted - measured) / measured`` at each size."""
        return [(self.predicted(p.payload_bytes) - p.seconds) / p.seconds for p in self.points]

    @property
    def max_relative_error(self) -> float:
        """The largest absolute relative error of the fit over the measured sizes."""
        return max(abs(e) for e in self.relative_errors)

    @property
    def rms_relative_error(self) -> float:
        """The root-mean-square relative error of the fit."""
        errors = self.relative_errors
        return (sum(e * e for e in errors) / len(errors)) ** 0.5

    def link_option(self) -> str:
        """The ``--link BW,LATENCY`` value that projects onto this machine."""
        bandwidth = "1e30" if self.bandwidth_Bps is None else f"{self.bandwidth_Bps:.4g}"
        return f"{bandwidth},{self.latency_s:.4g}"


def fit(devices: int, points: list[AllReducePoint]) -> tuple[float, float | None]:
    """``(alpha, B)`` of the relative least-squares line through ``points`` (``B`` None if slope <= 0)."""
    import numpy as np

    if devices < 2:
        raise SettingsError("calibration needs at least 2 devices.", "use --devices 2 or more")
    sizes = np.array([p.payload_bytes for p in points], dtype=float)
    times = np.array([p.seconds for p in points], dtype=float)
    # weights 1/t: minimise relative errors, so the small sizes (latency) count as much as the large
    slope, intercept = np.polyfit(sizes, times, 1, w=1 / times)
    n = devices
    alpha = max(float(intercept), 0.0) / (2 * (n - 1))
    bandwidth = None if slope <= 0 else 2 * (n - 1) / (n * float(slope))
    return alpha, bandwidth


def measure_all_reduces(devices: int, sizes: tuple[int, ...], repeats: int,
                        progress: Callable[[int, int], None] | None = None) -> list[AllReducePoint]:
    """Median seconds per all-reduce over ``devices`` devices for each payload size."""
    import jax
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:devices]), ("s",))

    def local(x):
        def body(carry, _):
            total = lax.psum(carry, "s")
            return lax.pcast(total * (1.0 / devices), "s", to="varying"), None

        out, _ = lax.scan(body, x, None, length=ALL_REDUCES_PER_CALL)
        return out

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("s"), out_specs=P("s"), check_vma=True))
    points = []
    for i, size in enumerate(sizes):
        elements = max(1, size // 4)
        x = jax.device_put(np.ones((devices * elements,), np.float32), NamedSharding(mesh, P("s")))
        compiled = compile_lowered(fn.lower(x))
        times = timing.time_interleaved({ALL_REDUCE: compiled}, (x,), repeats)[ALL_REDUCE]
        points.append(AllReducePoint(elements * 4, times.median / ALL_REDUCES_PER_CALL))
        if progress is not None:
            progress(i + 1, len(sizes))
    return points


def calibrate(devices: int, sizes: tuple[int, ...] = DEFAULT_SIZES, repeats: int = 20,
              progress: Callable[[int, int], None] | None = None) -> Calibration:
    """Measure all-reduces of every size and fit alpha and B to them."""
    import jax

    points = measure_all_reduces(devices, sizes, repeats, progress)
    alpha, bandwidth = fit(devices, points)
    return Calibration(devices, jax.process_count(), collectives_transport(), tuple(points), alpha, bandwidth,
                       measure_cpu_chip(repeats))
