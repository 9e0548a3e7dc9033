"""``shardscope calibrate``: all-reduces of several sizes, the fitted alpha and bandwidth, the fit's error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardscope.distributed.launch import spawn_workers, start_jax
from shardscope.plans.settings import Settings, check_device_count


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``shardscope calibrate``: all-reduces of several sizes, the fitted alpha and B, the fit's error."""
    from shardscope.costmodel.calibrate import DEFAULT_SIZES, calibrate
    from shardscope.render.calibrate import calibration_json, render_calibration
    from shardscope.errors import SettingsError
    from shardscope.costmodel.quantities import parse_size

    sizes = tuple(parse_size(s, "--sizes") for s in args.sizes.split(",")) if args.sizes else DEFAULT_SIZES
    if len(sizes) < 2:
        raise SettingsError("calibration needs at least two sizes to fit a line.", "e.g. --sizes 1KiB,1MiB")
    if args.devices < 2:
        raise SettingsError("calibration needs at least 2 devices.", "use --devices 2 or more")
    check_device_count(args.devices)  # before JAX starts: a thousand CPU devices take minutes to start
    check_sizes_fit(sizes, args.devices)
    if args.processes > 1 and args.worker is None:
        return spawn_workers(args, Settings(path=Path("."), devices=args.devices), parser)
    settings = Settings(path=Path("."), devices=args.devices)
    start_jax(args, settings)
    from shardscope.distributed.workers import is_leader

    def progress(done: int, total: int) -> None:
        if is_leader():
            print(f"calibrate: size {done}/{total} done", file=sys.stderr, flush=True)

    result = calibrate(args.devices, sizes, args.repeats, progress)
    if not is_leader():
        return 0
    if args.json:
        import json

        print(json.dumps(calibration_json(result)))
    else:
        from shardscope.render.console import stdout_console

        render_calibration(result, stdout_console())
    return 0


CALIBRATION_COPIES = 3
"""Copies of the payload one calibration run holds per device: the host array, its device
buffer and the all-reduce's result."""


def check_sizes_fit(sizes: tuple[int, ...], devices: int) -> None:
    """Refuse payload sizes whose buffers on every device cannot fit in memory, before JAX starts."""
    from shardscope.errors import SettingsError
    from shardscope.sources.examples import available_memory, human_bytes

    largest = max(sizes)
    needed = CALIBRATION_COPIES * devices * largest
    available = available_memory()
    if available is not None and needed > available:
        raise SettingsError(
            f"--sizes: {human_bytes(largest)} per device on {devices} devices needs about {human_bytes(needed)} "
            f"(the payload {CALIBRATION_COPIES} times on each device), and {human_bytes(available)} is available.",
            "use smaller --sizes, e.g. --sizes 1KiB,64KiB,1MiB,4MiB: the fit needs the trend, not big payloads",
        )
