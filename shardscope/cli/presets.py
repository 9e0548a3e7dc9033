"""``shardscope presets``: the interconnect presets ``--project`` knows, with their numbers and
sources; ``--targets``: the interconnect of each ``--target`` machine (a TPU generation's ICI
torus, a GPU node's NVLink and network), likewise."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from shardscope.cli.parsing import AddParser
from shardscope.distributed.interrupts import run_interruptible

# What the command runs and prints is imported where it runs: `import shardscope.cli` then loads
# the parsers alone, for --help, a refusal and every other command.
if TYPE_CHECKING:
    from shardscope.hardware.fabrics import Fabric, NodeFabric, TorusFabric

NAME = "presets"


def register(add_parser: AddParser) -> None:
    """Add ``presets`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="list the interconnect presets --project knows, with sources")
    parser.add_argument("--json", action="store_true", help="print a JSON list of the presets")
    parser.add_argument("--targets", action="store_true",
                        help="list the interconnects of the --target machines instead (TPU ICI per generation, "
                             "GPU NVLink and network), with sources")
    parser.set_defaults(run=run)  # then --debug, shared


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope presets``, in a thread that Ctrl+C and SIGTERM end at once."""
    as_json: bool = args.json
    if args.targets:
        return run_interruptible(lambda: show_fabrics(as_json))
    return run_interruptible(lambda: show_presets(as_json))


def show_presets(as_json: bool) -> int:
    """Every interconnect preset with its numbers and their source, as a table or a JSON list."""
    from rich.table import Table

    from shardscope.costmodel.interconnects import PRESETS, format_bandwidth, format_seconds
    from shardscope.render.console import stdout_console

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


def target_fabrics() -> list[tuple[str, Fabric]]:
    """Every machine record's interconnect, by the ``--target`` form it is for."""
    from shardscope.hardware import tpu_generations
    from shardscope.hardware.gpu_nodes import GPU_NODES

    return ([(f"tpu:{g.name}:...", g.ici) for g in tpu_generations.TPU_GENERATIONS]
            + [(f"gpu:{node.name}:HOSTSxDEVICES", node.fabric) for node in GPU_NODES])


def show_fabrics(as_json: bool) -> int:
    """Every target interconnect shardscope models, with its numbers and their source."""
    from rich.table import Table

    from shardscope.costmodel.interconnects import format_bandwidth, format_seconds
    from shardscope.hardware.fabrics import TorusFabric
    from shardscope.render.console import stdout_console

    if as_json:
        print(json.dumps([fabric_json(target, fabric) for target, fabric in target_fabrics()]))
        return 0
    table = Table(title="target interconnects (--target)", title_justify="left")
    for column in ("target", "bandwidth (one way)", "latency", "what", "source"):
        table.add_column(column, overflow="fold")
    for target, fabric in target_fabrics():
        if isinstance(fabric, TorusFabric):
            table.add_row(target, f"{format_bandwidth(fabric.link_Bps)} per link",
                          f"{format_seconds(fabric.hop_latency_s)} per hop",
                          f"ICI torus; wraparound: {fabric.wraparound}", fabric.source)
        else:
            table.add_row(target, f"{format_bandwidth(fabric.nvlink_Bps)} NVLink, "
                                  f"{format_bandwidth(fabric.nic_Bps)} per network port (one per GPU)",
                          "NCCL's per protocol and step", fabric.kind, fabric.source)
    stdout_console(rows_whole=True).print(table)  # a reference: each row, URLs and all, copied whole
    return 0


def fabric_json(target: str, fabric: TorusFabric | NodeFabric) -> dict[str, object]:
    """One ``presets --targets --json`` row: the target form, the figures (one way; latency per
    hop, or NCCL's per protocol) and their source."""
    from shardscope.hardware.fabrics import TorusFabric
    from shardscope.hardware.nccl import send_latency_s

    if isinstance(fabric, TorusFabric):
        return {"target": target, "kind": fabric.kind, "bandwidth_Bps": fabric.link_Bps,
                "bandwidth_is": "one way per link", "latency_s": fabric.hop_latency_s, "latency_is": "per hop",
                "wraparound": fabric.wraparound, "source": fabric.source}
    return {"target": target, "kind": fabric.kind, "bandwidth_Bps": fabric.nvlink_Bps, "network_Bps": fabric.nic_Bps,
            "bandwidth_is": "one way per GPU; network_Bps per port (one per GPU), as NCCL reaches it",
            "latency_s": send_latency_s(across_hosts=False), "network_latency_s": send_latency_s(across_hosts=True),
            "latency_is": "per NCCL ring step with its Simple protocol (LL and LL128: see the source)",
            "net_overhead_s": fabric.net_overhead_s, "source": fabric.source}
