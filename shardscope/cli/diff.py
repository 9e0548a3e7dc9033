"""``shardscope diff``: the unified diff of the plans' canonical jaxprs, on stdout or into a file
written atomically (never over an existing one without ``--force``)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from shardscope.cli.options import CommonOptions, DemoOptions, add_demo_options, refuse_unused_timing
from shardscope.cli.parsing import AddParser
from shardscope.distributed.interrupts import run_interruptible

# What the command runs and prints is imported where it runs: `import shardscope.cli` then loads
# the parsers alone, for --help, a refusal and every other command.

NAME = "diff"


def register(add_parser: AddParser) -> None:
    """Add ``diff`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="the unified diff of the two plans' canonical jaxprs")
    add_demo_options(parser, repeats=False, timing_budget=False)  # nothing is run, nothing timed
    parser.add_argument("-o", "--output", help="write the diff to this file (atomically); - for standard output")
    parser.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class DiffOptions:
    """The options of ``shardscope diff``: ``output`` None or ``-`` is standard output."""

    demo: DemoOptions
    common: CommonOptions = CommonOptions()
    output: str | None = None
    force: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DiffOptions:
        """The options as ``diff``'s subparser parsed them; ``-r`` and ``--timing-budget`` are refused."""
        refuse_unused_timing(args, "diff traces the plans and compares their jaxprs; it runs and times none of them.",
                             f"leave them out; shardscope report {args.file} -r N times the plans", repeats=False)
        return cls(demo=DemoOptions.from_args(args), common=CommonOptions.from_args(args), output=args.output,
                   force=args.force)


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope diff``, in a thread that Ctrl+C and SIGTERM end at once (nothing written)."""
    options = DiffOptions.from_args(args)
    return run_interruptible(lambda: diff(options))


def diff(options: DiffOptions) -> int:
    """Trace the plans (no timings) and write their diff."""
    from shardscope.cli.startup import start_up

    started = start_up(options.demo.file, options.common)
    from shardscope.cli.headless import analyse, load_demo  # past FILE's refusals: the analysis
    from shardscope.render.text import diff_text

    loaded = load_demo(options.demo.settings(started.path), options.common.processes)
    return write_diff(diff_text(analyse(loaded, measure=False)), options.output, options.force)


def write_diff(text: str, output: str | None, force: bool) -> int:
    """``text`` on stdout (``output`` None or ``-``), else into ``output`` atomically."""
    if output is None or output == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))  # as write_atomic does
        sys.stdout.buffer.flush()
        return 0
    from shardscope.render.exports import write_atomic

    path = write_atomic(output, text, overwrite=force)
    print(f"wrote {path}", file=sys.stderr)
    return 0
