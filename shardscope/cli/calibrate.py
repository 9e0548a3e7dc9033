"""``shardscope calibrate``: all-reduces of several sizes, the fitted alpha and bandwidth, the fit's error."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shardscope.cli.options import CommonOptions, positive
from shardscope.cli.parsing import AddParser
from shardscope.distributed.interrupts import run_interruptible
from shardscope.errors import SettingsError
from shardscope.config.settings import DEFAULT_DEVICES, DEFAULT_REPEATS, Settings, check_device_count

if TYPE_CHECKING:
    from shardscope.cli.launch import ProcessOptions

NAME = "calibrate"

CALIBRATION_COPIES = 3
"""Copies of the payload one calibration run holds per device: the host array, its device
buffer and the all-reduce's result."""


def register(add_parser: AddParser) -> None:
    """Add ``calibrate`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="fit alpha and bandwidth to all-reduces measured on this machine")
    parser.add_argument("-d", "--devices", type=positive, default=DEFAULT_DEVICES,
                        help=f"devices in the all-reduce (default {DEFAULT_DEVICES})")
    parser.add_argument("--sizes", metavar="S1,S2,...",
                        help="payload sizes per device (default 1KiB,16KiB,256KiB,1MiB,4MiB)")
    parser.add_argument("-r", "--repeats", type=positive, default=DEFAULT_REPEATS,
                        help=f"timed calls per size after warm-up (default {DEFAULT_REPEATS})")
    parser.set_defaults(run=run)  # then the shared options: --json, --no-cache, --debug, --processes, ...


@dataclass(frozen=True)
class CalibrateOptions:
    """The options of ``shardscope calibrate``; ``sizes`` as written (None: the default sizes)."""

    devices: int = DEFAULT_DEVICES
    sizes: str | None = None
    repeats: int = DEFAULT_REPEATS
    common: CommonOptions = CommonOptions()

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: tuple[str, ...]) -> CalibrateOptions:
        """The options as ``calibrate``'s subparser parsed them from ``argv``."""
        return cls(devices=args.devices, sizes=args.sizes, repeats=args.repeats,
                   common=CommonOptions.from_args(args, argv))

    @property
    def processes(self) -> ProcessOptions:
        """How its JAX starts: ``--processes``, ``--distributed``, ..."""
        return self.common.processes


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope calibrate``, in a thread that Ctrl+C and SIGTERM end at once."""
    options = CalibrateOptions.from_args(args, argv)
    return run_interruptible(lambda: run_calibration(options))


def run_calibration(options: CalibrateOptions) -> int:
    """Check the sizes and devices before JAX starts, measure, and print the fit (process 0 only)."""
    # what the command runs and prints, loaded when it runs: not for --help nor another command
    from shardscope.cli.launch import spawn_workers, start_jax
    from shardscope.costmodel.quantities import parse_size
    from shardscope.distributed.workers import is_leader
    from shardscope.pipeline.calibrate import DEFAULT_SIZES, calibrate
    from shardscope.render.calibrate import calibration_json, render_calibration
    from shardscope.render.console import stdout_console

    sizes = tuple(parse_size(s, "--sizes") for s in options.sizes.split(",")) if options.sizes else DEFAULT_SIZES
    if len(sizes) < 2:
        raise SettingsError("calibration needs at least two sizes to fit a line.", "e.g. --sizes 1KiB,1MiB")
    if options.devices < 2:
        raise SettingsError("calibration needs at least 2 devices.", "use --devices 2 or more")
    check_device_count(options.devices)  # before JAX starts: a thousand CPU devices take minutes to start
    check_sizes_fit(sizes, options.devices)
    settings = Settings(path=Path("."), devices=options.devices)
    if options.processes.spawns_workers:
        return spawn_workers(options.processes, settings)
    start_jax(options.processes, settings)

    def progress(done: int, total: int) -> None:
        if is_leader():
            print(f"calibrate: size {done}/{total} done", file=sys.stderr, flush=True)

    result = calibrate(options.devices, sizes, options.repeats, progress)
    if not is_leader():
        return 0
    if options.common.json:
        print(json.dumps(calibration_json(result)))
    else:
        render_calibration(result, stdout_console())
    return 0


def check_sizes_fit(sizes: tuple[int, ...], devices: int) -> None:
    """Refuse payload sizes whose buffers on every device cannot fit in memory, before JAX starts."""
    from shardscope.sources.examples import available_memory, human_bytes  # imports JAX (about 1 s)

    largest = max(sizes)
    needed = CALIBRATION_COPIES * devices * largest
    available = available_memory()
    if available is not None and needed > available:
        raise SettingsError(
            f"--sizes: {human_bytes(largest)} per device on {devices} devices needs about {human_bytes(needed)} "
            f"(the payload {CALIBRATION_COPIES} times on each device), and {human_bytes(available)} is available.",
            "use smaller --sizes, e.g. --sizes 1KiB,64KiB,1MiB,4MiB: the fit needs the trend, not big payloads",
        )
