"""``shardscope calibrate``: all-reduces of several sizes, the fitted alpha and bandwidth, the fit's error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardscope.launch import spawn_workers, start_jax
from shardscope.settings import Settings, check_device_count


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``shardscope calibrate``: all-reduces of several sizes, the fitted alpha and B, the fit's error."""
    from shardscope.calibrate import DEFAULT_SIZES, calibrate
    from shardscope.calibrate_view import calibration_json, render_calibration
    from shardscope.errors import SettingsError
    from shardscope.sweep import parse_size

    sizes = tuple(parse_size(s) for s in args.sizes.split(",")) if args.sizes else DEFAULT_SIZES
    if len(sizes) < 2:
        raise SettingsError("calibration needs at least two sizes to fit a line.", "e.g. --sizes 1KiB,1MiB")
    if args.devices < 2:
        raise SettingsError("calibration needs at least 2 devices.", "use --devices 2 or more")
    check_device_count(args.devices)  # before JAX starts: a thousand CPU devices take minutes to start
    if args.processes > 1 and args.worker is None:
        return spawn_workers(args, Settings(path=Path("."), devices=args.devices), parser)
    settings = Settings(path=Path("."), devices=args.devices)
    start_jax(args, settings)
    from shardscope.distributed import is_leader

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
        from shardscope.output import stdout_console

        render_calibration(result, stdout_console())
    return 0
