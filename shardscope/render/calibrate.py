"""The calibration as a rich table and as the ``calibrate --json`` object."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardscope.costmodel.interconnects import format_bandwidth, format_seconds

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.pipeline.calibrate import Calibration
    from shardscope.hardware.chips import Chip


def fit_sentence(c: "Calibration") -> str:
    """alpha, B and the error of the fit in one sentence."""
    bandwidth = "not resolvable (time does not grow with size)" if c.bandwidth_Bps is None else format_bandwidth(
        c.bandwidth_Bps)
    return (f"fit: alpha = {format_seconds(c.latency_s)} per ring step, B = {bandwidth}; "
            f"error of the fit: {c.rms_relative_error:.0%} RMS, {c.max_relative_error:.0%} at worst "
            f"over {len(c.points)} sizes.")


def render_calibration(c: "Calibration", console: "Console") -> None:
    """The measured and fitted time per all-reduce at each size, the fit, and the --link to use."""
    from rich.table import Table

    where = "in one process" if c.processes == 1 else f"over {c.processes} processes ({c.collectives_transport})"
    table = Table(title=f"all-reduce on {c.devices} CPU devices {where}", title_justify="left")
    for column in ("payload/device", "measured", "fitted", "error"):
        table.add_column(column, justify="right")
    for point, error in zip(c.points, c.relative_errors, strict=True):
        table.add_row(f"{point.payload_bytes:,} B", format_seconds(point.seconds),
                      format_seconds(c.predicted(point.payload_bytes)), f"{error:+.0%}")
    console.print(table)
    console.print(fit_sentence(c), highlight=False)
    console.print(f"project onto this machine: --link {c.link_option()}", highlight=False)
    if c.cpu is not None:
        console.print(cpu_sentence(c.cpu), highlight=False)


def cpu_sentence(chip: "Chip") -> str:
    """``this machine's CPU (one device): f32 matmul 45.1 GFLOP/s, bf16 3.2 GFLOP/s, memory 9.8 GB/s, ...``."""
    peaks = ", ".join(f"{dtype} matmul {flops / 1e9:.3g} GFLOP/s" for dtype, flops in chip.peak_flops.items()
                      if dtype != "default")
    bandwidth = f"{(chip.memory_bandwidth_Bps or 0) / 1e9:.3g} GB/s"
    return (f"this machine's CPU (one device, the step estimate's peaks): {peaks}, memory {bandwidth}, "
            f"{format_seconds(chip.call_overhead_s)} per call, {format_seconds(chip.iteration_overhead_s)} "
            "per loop iteration.")


def calibration_json(c: "Calibration") -> dict[str, Any]:
    """The ``calibrate --json`` object."""
    return {
        "devices": c.devices,
        "processes": c.processes,
        "collectives_transport": c.collectives_transport,
        "points": [{"payload_bytes": p.payload_bytes, "seconds": p.seconds,
                    "fitted_seconds": c.predicted(p.payload_bytes)} for p in c.points],
        "latency_s": c.latency_s,
        "bandwidth_Bps": c.bandwidth_Bps,
        "rms_relative_error": c.rms_relative_error,
        "max_relative_error": c.max_relative_error,
        "link": c.link_option(),
        "cpu": None if c.cpu is None else c.cpu.to_json(),
    }
