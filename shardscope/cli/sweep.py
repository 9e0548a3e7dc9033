"""``shardscope sweep``: every plan at every chunk size, with progress on stderr, as a table or JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass

from shardscope.cli.options import CommonOptions, DemoOptions, add_demo_options, refuse_unused_timing
from shardscope.cli.parsing import AddParser
from shardscope.distributed.interrupts import run_interruptible
from shardscope.errors import SettingsError

# What the command runs and prints is imported where it runs: `import shardscope.cli` then loads
# the parsers alone, for --help, a refusal and every other command.

NAME = "sweep"


def register(add_parser: AddParser) -> None:
    """Add ``sweep`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="memory and run time of every plan at every chunk size, and a pick")
    add_demo_options(parser, chunk_size=False, timing_budget=False)  # every point timed exactly --repeats rounds
    parser.add_argument("--chunk-sizes", metavar="C1,C2,...",
                        help="chunk sizes to try (default: every divisor of the per-device batch)")
    parser.add_argument("--memory-budget", metavar="SIZE",
                        help="per-device memory the pick must fit in, e.g. 512MiB or 2GB")
    parser.set_defaults(run=run)  # then the shared options it has not placed: --json, --target, --processes, ...


@dataclass(frozen=True)
class SweepOptions:
    """The options of ``shardscope sweep``; ``chunk_sizes`` and ``memory_budget`` as written,
    checked when it runs (after FILE)."""

    demo: DemoOptions
    common: CommonOptions = CommonOptions()
    chunk_sizes: str | None = None
    memory_budget: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: tuple[str, ...]) -> SweepOptions:
        """The options as ``sweep``'s subparser parsed them from ``argv``; ``--timing-budget`` is refused."""
        refuse_unused_timing(args, "sweep times every plan at every chunk size exactly --repeats rounds; more rounds "
                                   "within a budget are report's and the explorer's, to settle one comparison.",
                             "leave --timing-budget out; -r N times every point N rounds")
        return cls(demo=DemoOptions.from_args(args), common=CommonOptions.from_args(args, argv),
                   chunk_sizes=args.chunk_sizes, memory_budget=args.memory_budget)


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope sweep``, in a thread that Ctrl+C and SIGTERM end at once."""
    options = SweepOptions.from_args(args, argv)
    return run_interruptible(lambda: sweep(options))


def sweep(options: SweepOptions) -> int:
    """Every plan at every chunk size, with progress on stderr; process 0 prints the table or JSON.

    With ``--target`` each point is compiled for the slice too, and ``--memory-budget`` is its
    memory per device there.
    """
    from shardscope.cli.startup import start_up

    common = options.common
    started = start_up(options.demo.file, common)
    from shardscope.cli.headless import load_demo, spawn_on_demo_mesh  # past FILE's refusals: the sweep's own
    from shardscope.costmodel.quantities import parse_size
    from shardscope.distributed.workers import is_leader
    from shardscope.pipeline.sweep import parse_chunk_sizes, run_sweep
    from shardscope.targets.host import ensure_devices

    # the sweep's own options are checked before JAX starts too: a typo fails fast
    chunk_sizes = parse_chunk_sizes(options.chunk_sizes) if options.chunk_sizes else None
    budget_bytes = parse_size(options.memory_budget) if options.memory_budget else None
    if started.unavailable:  # its one target's compiler missing
        raise started.unavailable[0]
    if len(started.slices) > 1:
        raise SettingsError("sweep takes one --target: the budget is checked against one slice's memory.",
                            "run one sweep per target")
    targets, _ = started.loaded_targets()  # one target: its refusal raised
    loaded = load_demo(options.demo.settings(started.path), common.processes, targets)
    if common.processes.spawns_workers:
        return spawn_on_demo_mesh(loaded, options.demo, common.processes)
    ensure_devices(loaded.settings.mesh.devices)

    def progress(done: int, total: int, chunk: int) -> None:
        if is_leader():
            print(f"sweep: chunk size {chunk} done ({done}/{total})", file=sys.stderr, flush=True)

    with contextlib.redirect_stdout(sys.stderr):  # what the demo prints while traced stays off stdout
        result = run_sweep(loaded.settings, chunk_sizes, budget_bytes, progress, loaded.demo_file,
                           targets[0] if targets else None)
    if not is_leader():
        return 0
    from shardscope.render.console import stdout_console
    from shardscope.render.json_values import finite
    from shardscope.render.sweep import render_sweep, sweep_json

    if common.json:
        print(json.dumps(finite(sweep_json(result)), allow_nan=False))
    else:
        render_sweep(result, stdout_console())
    return 0
