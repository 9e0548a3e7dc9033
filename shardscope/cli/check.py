"""``shardscope check``: the lint of any shard_map program, collectives in loops that need not be
there; exit status 1 when a loop holds one, else 0."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from shardscope.cli.options import JSON_HELP, add_debug_option, positive
from shardscope.cli.parsing import AddParser
from shardscope.distributed.interrupts import run_interruptible
from shardscope.distributed.launch import DEFAULT_MAX_DEVICES
from shardscope.pipeline.devices import ensure_devices
from shardscope.plans.settings import DEFAULT_DEVICES, check_device_count
from shardscope.render.console import stdout_console
from shardscope.sources.bundled import find_file
from shardscope.sources.loading import require_file

NAME = "check"


def register(add_parser: AddParser) -> None:
    """Add ``check`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="lint any shard_map program: collectives in loops that need not be there")
    parser.add_argument("file", type=Path, help="a Python file with functions marked @shardscope.program (or .demo), "
                        "or a shipped demo's name (shardscope demos)")
    parser.add_argument("-f", "--function", help="check only this function (default: every one in the file)")
    parser.add_argument("-d", "--devices", type=positive,
                        help=f"CPU devices JAX starts with (default {DEFAULT_MAX_DEVICES}); a demo's mesh size "
                             f"(default {DEFAULT_DEVICES})")
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    add_debug_option(parser)
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class CheckOptions:
    """The options of ``shardscope check``: ``function`` None checks every one in the file."""

    file: Path
    function: str | None
    devices: int | None
    json: bool

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CheckOptions:
        """The options as ``check``'s subparser parsed them."""
        return cls(args.file, args.function, args.devices, args.json)


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope check``, in a thread that Ctrl+C and SIGTERM end at once."""
    options = CheckOptions.from_args(args)
    return run_interruptible(lambda: check(options))


def check(options: CheckOptions) -> int:
    """Check the file's programs; exit status 1 when a loop holds a collective it does not need, else 0."""
    from shardscope.pipeline.check import check_file, exit_code  # imports JAX (about 1 s): not for --help
    from shardscope.render.check import render, to_json  # imports the pipeline (JAX) too

    path = require_file(find_file(options.file))  # FILE may name a shipped demo
    devices = options.devices or DEFAULT_MAX_DEVICES
    check_device_count(devices)  # before JAX starts: thousands hang it
    ensure_devices(devices)  # before the file builds its mesh
    with contextlib.redirect_stdout(sys.stderr):  # what the file prints stays off the report
        inspections = check_file(path, options.function, options.devices)
    if options.json:
        print(json.dumps(to_json(path, inspections), allow_nan=False))
    else:
        render(inspections, stdout_console())
    return exit_code(inspections)
