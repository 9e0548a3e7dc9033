"""``shardscope presets``: the interconnect presets ``--project`` knows, with their numbers and sources."""

from __future__ import annotations


def run(as_json: bool) -> int:
    """``shardscope presets``: every interconnect preset with its numbers and their source."""
    from shardscope.costmodel.interconnects import PRESETS, format_bandwidth, format_seconds

    if as_json:
        import json

        print(json.dumps([link.to_json() for link in PRESETS]))
        return 0
    from rich.table import Table

    from shardscope.render.console import stdout_console

    table = Table(title="interconnect presets (--project PRESET:DEVICES)", title_justify="left")
    for column in ("name", "bandwidth (one way)", "latency (per step)", "what", "source"):
        table.add_column(column, overflow="fold")
    for link in PRESETS:
        table.add_row(link.name, format_bandwidth(link.bandwidth_Bps), format_seconds(link.latency_s),
                      link.description, link.source)
    stdout_console().print(table)
    return 0
