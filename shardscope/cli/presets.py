"""``shardscope presets``: the interconnect presets ``--project`` knows, with their numbers and
sources; ``--targets``: the interconnect of each ``--target`` machine (a TPU generation's ICI
torus, a GPU node's NVLink and network), likewise."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from shardscope.cli.options import add_debug_option
from shardscope.cli.parsing import AddParser
from shardscope.costmodel.fabrics import NODE_FABRICS, TORUS_FABRICS, NodeFabric, TorusFabric
from shardscope.costmodel.interconnects import PRESETS, format_bandwidth, format_seconds
from shardscope.distributed.interrupts import run_interruptible
from shardscope.render.console import stdout_console

NAME = "presets"


def register(add_parser: AddParser) -> None:
    """Add ``presets`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="list the interconnect presets --project knows, with sources")
    parser.add_argument("--json", action="store_true", help="print a JSON list of the presets")
    parser.add_argument("--targets", action="store_true",
                        help="list the interconnects of the --target machines instead (TPU ICI per generation, "
                             "GPU NVLink and network), with sources")
    add_debug_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope presets``, in a thread that Ctrl+C and SIGTERM end at once."""
    as_json: bool = args.json
    if args.targets:
        return run_interruptible(lambda: show_fabrics(as_json))
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
    stdout_console(rows_whole=True).print(table)  # a reference: each row, URLs and all, copied whole
    return 0


def show_fabrics(as_json: bool) -> int:
    """Every target interconnect shardscope models, with its numbers and their source."""
    if as_json:
        fabrics: list[tuple[str, TorusFabric | NodeFabric]] = [*TORUS_FABRICS.items(), *NODE_FABRICS.items()]
        print(json.dumps([fabric_json(name, fabric) for name, fabric in fabrics]))
        return 0
    table = Table(title="target interconnects (--target)", title_justify="left")
    for column in ("target", "bandwidth (one way)", "latency", "what", "source"):
        table.add_column(column, overflow="fold")
    for name, torus in TORUS_FABRICS.items():
        table.add_row(f"tpu:{name}:...", f"{format_bandwidth(torus.link_Bps)} per link",
                      f"{format_seconds(torus.hop_latency_s)} per hop", f"ICI torus; wraparound: {torus.wraparound}",
                      torus.source)
    for name, node in NODE_FABRICS.items():
        table.add_row(f"gpu:{name}:HOSTSxDEVICES",
                      f"{format_bandwidth(node.nvlink_Bps)} NVLink, {format_bandwidth(node.network_Bps)} network",
                      f"{format_seconds(node.nvlink_latency_s)} / {format_seconds(node.network_latency_s)} per step",
                      "NVLink in a host, network between hosts", node.source)
    stdout_console(rows_whole=True).print(table)  # a reference: each row, URLs and all, copied whole
    return 0


def fabric_json(name: str, fabric: TorusFabric | NodeFabric) -> dict[str, object]:
    """One ``presets --targets --json`` row: the target form, the figures (one way; latency per
    hop or per NCCL step) and their source."""
    if isinstance(fabric, TorusFabric):
        return {"target": f"tpu:{name}:...", "kind": "ICI torus", "bandwidth_Bps": fabric.link_Bps,
                "bandwidth_is": "one way per link", "latency_s": fabric.hop_latency_s, "latency_is": "per hop",
                "wraparound": fabric.wraparound, "source": fabric.source}
    return {"target": f"gpu:{name}:HOSTSxDEVICES", "kind": "NVLink in a host, network between hosts",
            "bandwidth_Bps": fabric.nvlink_Bps, "network_Bps": fabric.network_Bps, "bandwidth_is": "one way per GPU",
            "latency_s": fabric.nvlink_latency_s, "network_latency_s": fabric.network_latency_s,
            "latency_is": "per NCCL step", "source": fabric.source}
