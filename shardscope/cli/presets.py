"""``shardscope presets``: the interconnect presets ``--project`` knows, with their numbers and sources."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from shardscope.cli.options import add_debug_option
from shardscope.cli.parsing import AddParser
from shardscope.costmodel.interconnects import PRESETS, format_bandwidth, format_seconds
from shardscope.distributed.interrupts import run_interruptible
from shardscope.render.console import stdout_console

NAME = "presets"


def register(add_parser: AddParser) -> None:
    """Add ``presets`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="list the interconnect presets --project knows, with sources")
    parser.add_argument("--json", action="store_true", help="print a JSON list of the presets")
    add_debug_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope presets``, in a thread that Ctrl+C and SIGTERM end at once."""
    as_json: bool = args.json
    return run_interruptible(lambda: show_presets(as_json))


def show_presets(as_json: bool) -> int:
    """Every interconnect preset with its numbers and their source, as a table or a JSON list."""
    if as_json:
        print(json.dumps([link.to_json() for link in PRESETS]))
        return 0
    table = Table(title="interconnect presets (--project PRESET:DEVICES)", title_justify="left")
    for column in ("name", "bandwidth (one way)", "latency (per step)", "what", "source"):
        table.add_column(column, overflow="fold")
    for link in PRESETS:
        table.add_row(link.name, format_bandwidth(link.bandwidth_Bps), format_seconds(link.latency_s),
                      link.description, link.source)
    stdout_console().print(table)
    return 0
