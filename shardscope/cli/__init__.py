"""The ``shardscope`` command: one parser, built once, whose subcommands the modules of this
package register (``open`` in :mod:`~shardscope.cli.explorer`, the others in the module of their
name), each with the function that runs it.

How JAX starts (in-process, ``--processes``, ``--distributed``) is
:mod:`shardscope.cli.launch`. Every error a user can cause prints one message (and a
hint) on stderr and exits with status 2; ``--debug`` shows the traceback instead (status 2 still).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
from dataclasses import dataclass
from typing import Sequence

try:  # Ctrl+C while the commands' modules load (a second on a loaded machine), before any handler is set
    from shardscope import __version__
    from shardscope.cli import calibrate, check, demos, diff, explorer, layouts, presets, report, sweep
    from shardscope.cli.explorer import AppOptions, ExplorerOptions
    from shardscope.cli.leaving import leave_process
    from shardscope.cli.options import add_unplaced
    from shardscope.cli.parsing import CommandParser, CommandRun, glue_dash_values
    from shardscope.distributed.compile_cache import start_compilation_cache
    from shardscope.errors import ShardscopeError, report_error
    from shardscope.targets.platforms import quiet_start_up_warnings, run_on
    from shardscope.config.settings import Settings
    from shardscope.sources.bundled import SEED_DEMO
except KeyboardInterrupt:
    from shardscope.distributed.interrupts import leave

    leave(signal.SIGINT)  # one line, status 130, nothing written: never a traceback

__all__ = ["COMMANDS", "main", "open_options", "parse"]

COMMAND_MODULES = (explorer, report, sweep, layouts, calibrate, presets, diff, check, demos)
"""The commands, in the order ``--help`` lists them."""
COMMANDS = tuple(module.NAME for module in COMMAND_MODULES)


@dataclass(frozen=True)
class CommandLine:
    """The ``shardscope`` parser and the subparser of each command."""

    parser: CommandParser
    commands: tuple[CommandParser, ...]


@functools.cache
def command_line() -> CommandLine:
    """The parser of ``shardscope``, built once: each command module registers its subparser."""
    parser = CommandParser(
        prog="shardscope",
        description="See the communication plan of a sharded JAX program: every collective the compiler runs, the loops around it, and whether they need it there.",
        epilog="shardscope FILE is short for shardscope open FILE (the explorer); shardscope alone opens the "
        f"shipped {SEED_DEMO} demo. report, diff, sweep, layouts and check run headless. FILE may be a shipped demo's "
        "name (shardscope demos lists them).",
    )
    parser.add_argument("--version", action="version", version=f"shardscope {__version__}")
    subcommands = parser.add_subparsers(metavar="{" + ",".join(COMMANDS) + "}", parser_class=CommandParser)
    commands: list[CommandParser] = []

    def add_parser(name: str, help: str) -> CommandParser:  # noqa: A002 - argparse's own keyword
        command = subcommands.add_parser(name, help=help, description=help)  # the line --help lists, atop its own
        commands.append(command)
        return command

    for module in COMMAND_MODULES:
        module.register(add_parser)
        add_unplaced(commands[-1])  # the shared options it has and did not place among its own
    return CommandLine(parser, tuple(commands))


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, tuple[str, ...]]:
    """Parse ``argv``; a bare ``shardscope FILE`` means ``shardscope open FILE`` (and ``shardscope``
    alone opens the seed demo). Returns the namespace and the words parsed (the command first)."""
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["open", *argv]
    line = command_line()
    words = tuple(glue_dash_values(argv, line.commands))
    return line.parser.parse_args(words), words


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    The headless commands run in a worker thread: Ctrl+C and SIGTERM end them at once with
    status 130 / 143 and nothing written (:mod:`shardscope.distributed.interrupts`). The commands
    that compile (those with ``--no-cache``) use JAX's persistent compilation cache
    (:mod:`shardscope.distributed.compile_cache`), started here, before their JAX is, and so is
    the platform of ``--on`` (:mod:`shardscope.targets.platforms`).

    With no ``argv`` (the process's own command line: the ``shardscope`` script, ``python -m
    shardscope``) the process ends here once the command is done, without JAX's teardown of its
    CPU devices (:mod:`shardscope.cli.leaving`); given ``argv``, it returns.
    """
    status = _command(sys.argv[1:] if argv is None else argv)
    if argv is None:
        leave_process(status)
    return status


def _command(argv: list[str]) -> int:
    args, words = parse(argv)
    run: CommandRun = args.run
    quiet_start_up_warnings()  # a TPU VM's hugepages warning at every import of JAX
    run_on(getattr(args, "on", None))  # before JAX starts: the platform the programs run on
    if "no_cache" in args:
        start_compilation_cache(enabled=not args.no_cache)
    try:
        return run(args, words)
    except ShardscopeError as exc:  # --debug: the traceback instead of the message, the status the same
        report_error(exc, args.debug)
        wants_json = (getattr(args, "format", None) or ("json" if getattr(args, "json", False) else "text")) == "json"
        if wants_json and getattr(args, "worker", None) is None:  # a --processes worker's mistake is its spawner's to print
            # one JSON object on stdout, whatever stopped the command (docs/reference/json.md)
            print(json.dumps({"exit_code": exc.exit_status, "error": exc.message, "hint": exc.hint}))
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `shardscope report ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        run_on(None)  # the command's --on ends with it (main() run in a process that goes on: a test)


def open_options(argv: list[str]) -> tuple[Settings, AppOptions]:
    """The settings and the :func:`~shardscope.app.make_app` options of ``shardscope open ARGV``.

    Needs no JAX: the app starts JAX in its first worker, with the device count set before the
    file is imported. A device count over the cap is refused here, before JAX starts.
    """
    args, _ = parse(["open", *argv])
    run_on(args.on)  # --on, as main() records it: the app's first worker starts JAX on that platform
    return ExplorerOptions.from_args(args).app_options()
