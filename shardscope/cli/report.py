"""``shardscope report``: the analysis of a demo function's plans (collectives, loops, bytes,
timings) as text or one JSON object, optionally projected onto an interconnect and compiled for
TPU slices (``--target``) beside the CPU."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardscope.cli.options import CommonOptions, DemoOptions, add_demo_options, add_shared
from shardscope.cli.parsing import AddParser
from shardscope.distributed.interrupts import run_interruptible
from shardscope.errors import report_error

# What the command runs and prints is imported where it runs: `import shardscope.cli` then loads
# the parsers alone, for --help, a refusal and every other command.
if TYPE_CHECKING:
    from shardscope.costmodel.interconnects import Link

NAME = "report"


def register(add_parser: AddParser) -> None:
    """Add ``report`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="print the analysis: collectives, loops, bytes, timings")
    add_demo_options(parser)
    add_shared(parser, "--json")
    parser.add_argument("--project", metavar="PRESET[:DEVICES]",
                        help="project each plan's communication onto an interconnect preset "
                             "(see `shardscope presets`) with DEVICES in the ring (default: --devices); with --target, "
                             "each target's compiled collectives too (default there: the topology's ICI preset)")
    parser.add_argument("--link", metavar="BW,LATENCY",
                        help="a link of your own for --project link[:DEVICES], e.g. 25GB/s,5us "
                             "(alone, it implies --project link)")
    parser.set_defaults(run=run)  # then the shared options it has not placed: --target, --on, --processes, ...


@dataclass(frozen=True)
class ReportOptions:
    """The options of ``shardscope report``; ``project`` and ``link`` are checked when it runs."""

    demo: DemoOptions
    common: CommonOptions = CommonOptions()
    project: str | None = None
    link: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: tuple[str, ...]) -> ReportOptions:
        """The options as ``report``'s subparser parsed them from ``argv``."""
        return cls(demo=DemoOptions.from_args(args), common=CommonOptions.from_args(args, argv), project=args.project,
                   link=args.link)


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope report``, in a thread that Ctrl+C and SIGTERM end at once."""
    options = ReportOptions.from_args(args, argv)
    return run_interruptible(lambda: report(options))


def report(options: ReportOptions) -> int:
    """Analyse, then print the report (process 0 only, under ``--processes``/``--distributed``)."""
    from shardscope.cli.startup import start_up

    common = options.common
    started = start_up(options.demo.file, common)
    target = projection_target(options.project, options.link)  # fails before JAX starts
    # libtpu missing, a topology it does not know: one message before the demo loads; with
    # several targets, those that cannot be compiled for are reported after the others' results
    loaded_targets, unavailable = started.loaded_targets()
    from shardscope.cli.headless import analyse, load_demo, spawn_on_demo_mesh  # past the refusals: the analysis
    from shardscope.distributed.workers import is_leader
    from shardscope.pipeline.projections import project, project_targets
    from shardscope.render.console import stdout_console
    from shardscope.render.report import render, to_json

    loaded = load_demo(options.demo.settings(started.path), common.processes, loaded_targets)
    if common.processes.spawns_workers:
        return spawn_on_demo_mesh(loaded, options.demo, common.processes)
    analysis = analyse(loaded, measure=True, targets=loaded_targets)
    if not is_leader():
        return 0
    projection = None if target is None else project(analysis, *target)
    on_targets = project_targets(analysis, *(target or (None, None)))
    if common.json:
        data = to_json(analysis, projection, on_targets, unavailable)
        data["profile_errors"] = [{"error": e.message, "hint": e.hint} for e in analysis.profile_errors]
        print(json.dumps(data, allow_nan=False))
    else:
        render(analysis, stdout_console(), projection, on_targets)
    sys.stdout.flush()
    for error in unavailable:  # each target that could not be compiled for: after the others' results
        report_error(error, common.debug)
    for profile_error in analysis.profile_errors:  # the profile: the plans stand without its times
        report_error(profile_error, common.debug)
    return 2 if unavailable or analysis.profile_errors else 0


def projection_target(project: str | None, link: str | None) -> tuple[Link, int | None] | None:
    """``(Link, devices or None)`` from ``--project``/``--link``, or None when neither is given."""
    if project is None and not link:
        return None
    from shardscope.costmodel.interconnects import CUSTOM_LINK_NAME, parse_link, parse_project

    custom = parse_link(link) if link else None
    if project is None:
        return None if custom is None else (custom, None)
    return parse_project(project if project else CUSTOM_LINK_NAME, custom)
