"""``shardscope sweep``: every plan at every chunk size, with progress on stderr, as a table or JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass

from shardscope.cli.headless import load_demo, spawn_on_demo_mesh
from shardscope.cli.options import (JSON_HELP, DemoOptions, add_demo_options, add_on_option, add_process_options,
                                    add_profile_options, add_target_option, process_options, refuse_on_across_processes,
                                    refuse_targets_across_processes, require_profile_converter)
from shardscope.cli.parsing import AddParser
from shardscope.costmodel.quantities import parse_size
from shardscope.pipeline.sweep import parse_chunk_sizes, run_sweep
from shardscope.distributed.interrupts import run_interruptible
from shardscope.cli.launch import ProcessOptions
from shardscope.distributed.workers import is_leader
from shardscope.errors import SettingsError
from shardscope.targets.host import ensure_devices
from shardscope.targets.registry import checked_targets
from shardscope.render.console import stdout_console
from shardscope.render.json_values import finite
from shardscope.render.sweep import render_sweep, sweep_json

NAME = "sweep"


def register(add_parser: AddParser) -> None:
    """Add ``sweep`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="memory and run time of every plan at every chunk size, and a pick")
    add_demo_options(parser, chunk_size=False)
    parser.add_argument("--chunk-sizes", metavar="C1,C2,...",
                        help="chunk sizes to try (default: every divisor of the per-device batch)")
    parser.add_argument("--memory-budget", metavar="SIZE",
                        help="per-device memory the pick must fit in, e.g. 512MiB or 2GB")
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    add_target_option(parser)
    add_on_option(parser)
    add_profile_options(parser, directory=False)
    add_process_options(parser)
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class SweepOptions:
    """The options of ``shardscope sweep``; ``chunk_sizes`` and ``memory_budget`` as written,
    checked when it runs (after FILE)."""

    demo: DemoOptions
    processes: ProcessOptions
    chunk_sizes: str | None
    memory_budget: str | None
    json: bool
    targets: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: tuple[str, ...]) -> SweepOptions:
        """The options as ``sweep``'s subparser parsed them from ``argv``."""
        return cls(DemoOptions.from_args(args), process_options(args, argv), args.chunk_sizes, args.memory_budget,
                   args.json, tuple(args.target))


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope sweep``, in a thread that Ctrl+C and SIGTERM end at once."""
    options = SweepOptions.from_args(args, argv)
    refuse_on_across_processes(args.on, options.processes)
    return run_interruptible(lambda: sweep(options))


def sweep(options: SweepOptions) -> int:
    """Every plan at every chunk size, with progress on stderr; process 0 prints the table or JSON.

    With ``--target`` each point is compiled for the slice too, and ``--memory-budget`` is its
    memory per device there.
    """
    from shardscope.targets.plans import load_targets  # the engine (0.4 s): not for --help

    settings = options.demo.settings()
    require_profile_converter(options.demo)  # --profile with --profile-dir: one message, before JAX starts
    # the sweep's own options are checked before JAX starts too: a typo fails fast
    chunk_sizes = parse_chunk_sizes(options.chunk_sizes) if options.chunk_sizes else None
    budget_bytes = parse_size(options.memory_budget) if options.memory_budget else None
    slices = checked_targets(options.targets)  # a slice too large, libtpu missing: before JAX starts
    if len(slices) > 1:
        raise SettingsError("sweep takes one --target: the budget is checked against one slice's memory.",
                            "run one sweep per target")
    refuse_targets_across_processes(slices, options.processes)
    targets = load_targets(slices) if slices else ()
    loaded = load_demo(settings, options.processes, targets)
    if options.processes.spawns_workers:
        return spawn_on_demo_mesh(loaded, options.demo, options.processes)
    ensure_devices(loaded.settings.mesh.devices)

    def progress(done: int, total: int, chunk: int) -> None:
        if is_leader():
            print(f"sweep: chunk size {chunk} done ({done}/{total})", file=sys.stderr, flush=True)

    with contextlib.redirect_stdout(sys.stderr):  # what the demo prints while traced stays off stdout
        result = run_sweep(loaded.settings, chunk_sizes, budget_bytes, progress, loaded.demo_file,
                           targets[0] if targets else None)
    if not is_leader():
        return 0
    if options.json:
        print(json.dumps(finite(sweep_json(result)), allow_nan=False))
    else:
        render_sweep(result, stdout_console())
    return 0
