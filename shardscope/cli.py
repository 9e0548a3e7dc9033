"""The ``shardscope`` command: the app, ``report`` and ``diff``.

Every error a user can cause prints one message (and a hint) on stderr and exits with status 2;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from shardscope.errors import ShardscopeError
from shardscope.settings import DEFAULT_AXIS, DEFAULT_DEVICES, DEFAULT_REPEATS, Settings

COMMANDS = ("report", "diff", "open", "check")
EXIT_USER_ERROR = 2
DEFAULT_MAX_DEVICES = 8


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _axis(text: str) -> str:
    if not text.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid axis name (use letters, digits, _)")
    return text


def _settings_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="a Python file with functions marked @shardscope.demo")
    parser.add_argument("-f", "--function", help="the demo function to analyse (default: the first in the file)")
    parser.add_argument("-d", "--devices", type=_positive, default=DEFAULT_DEVICES,
                        help=f"devices in the 1-D mesh (default {DEFAULT_DEVICES})")
    parser.add_argument("--axis", type=_axis, default=DEFAULT_AXIS, help=f"mesh axis name (default {DEFAULT_AXIS!r})")
    parser.add_argument("-c", "--chunk-size", type=_positive,
                        help="examples per chunk (default: the largest giving >= 2 chunks per device)")
    parser.add_argument("-r", "--repeats", type=_positive, default=DEFAULT_REPEATS,
                        help=f"timed runs per plan after warm-up (default {DEFAULT_REPEATS})")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of short messages")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``shardscope``."""
    parser = argparse.ArgumentParser(
        prog="shardscope",
        description="See the communication plan of a chunked VJP under jax.shard_map.",
        epilog="shardscope FILE opens the explorer; `shardscope report|diff FILE` run headless.",
    )
    from shardscope import __version__

    parser.add_argument("--version", action="version", version=f"shardscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{report,diff,check}")
    app = sub.add_parser("open", help="open the explorer (the default command)")
    _settings_options(app)
    app.add_argument("--max-devices", type=_positive, default=DEFAULT_MAX_DEVICES,
                     help="CPU devices to start JAX with; the sidebar offers meshes up to this size (default 8)")
    app.add_argument("--export-dir", type=Path, help="where `e` writes the diff (default: the working directory)")
    app.add_argument("--profile-startup", action="store_true",
                     help="log seconds to first paint and to first results on exit")
    report = sub.add_parser("report", help="print the analysis: collectives, loops, bytes, timings")
    _settings_options(report)
    report.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    diff = sub.add_parser("diff", help="the unified diff of the two plans' canonical jaxprs")
    _settings_options(diff)
    diff.add_argument("-o", "--output", type=Path, help="write the diff to this file (atomically)")
    diff.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    check = sub.add_parser("check", help="lint any shard_map program: collectives in loops that need not be there")
    check.add_argument("file", type=Path, help="a Python file with functions marked @shardscope.program (or .demo)")
    check.add_argument("-f", "--function", help="check only this function (default: every one in the file)")
    check.add_argument("-d", "--devices", type=_positive,
                       help=f"CPU devices JAX starts with (default {DEFAULT_MAX_DEVICES}); a demo's mesh size "
                            f"(default {DEFAULT_DEVICES})")
    check.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    check.add_argument("--debug", action="store_true", help="show tracebacks instead of short messages")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; a bare ``shardscope FILE`` means ``shardscope open FILE``."""
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        argv = ["open", *argv]
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().error("give a demo file: shardscope FILE, or shardscope report|diff FILE")
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    """The :class:`Settings` the options describe."""
    return Settings(
        path=args.file,
        function=args.function,
        devices=args.devices,
        axis=args.axis,
        chunk_size=args.chunk_size,
        repeats=args.repeats,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        return _run(args)
    except ShardscopeError as exc:
        if args.debug:
            raise
        print(f"shardscope: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    if args.command == "check":
        return _check(args)
    settings = settings_from(args)
    if args.command == "open":
        from shardscope.app import run_app

        return run_app(settings, max_devices=max(args.max_devices, args.devices),
                       export_dir=args.export_dir, profile_startup=args.profile_startup)

    from shardscope.demos import require_file
    from shardscope.devices import ensure_devices

    require_file(settings.path)  # before JAX starts: a typo fails fast
    # Start with enough devices that a count which does not divide N can be told what would.
    ensure_devices(max(settings.devices, DEFAULT_MAX_DEVICES))
    from shardscope.analysis import analyze

    # What the demo prints (at import, while tracing) must not mix into the report or the diff.
    with contextlib.redirect_stdout(sys.stderr):
        analysis = analyze(settings, measure=args.command == "report", graphs=False)
    if args.command == "diff":
        text = analysis.diff_text()
        if args.output is None:
            sys.stdout.write(text)
        else:
            from shardscope.exports import write_atomic

            path = write_atomic(args.output, text, overwrite=args.force)
            print(f"wrote {path}", file=sys.stderr)
        return 0

    if args.json:
        import json

        from shardscope.report import to_json

        print(json.dumps(to_json(analysis), allow_nan=False))
    else:
        from rich.console import Console

        from shardscope.report import render

        render(analysis, Console())
    return 0


def _check(args: argparse.Namespace) -> int:
    """``shardscope check``: exit 1 when a loop holds a collective it does not need, else 0."""
    from shardscope import check
    from shardscope.demos import require_file
    from shardscope.devices import ensure_devices

    require_file(args.file)
    ensure_devices(args.devices or DEFAULT_MAX_DEVICES)  # before the file builds its mesh
    with contextlib.redirect_stdout(sys.stderr):
        inspections = check.check_file(args.file, args.function, args.devices)
    if args.json:
        import json

        print(json.dumps(check.to_json(args.file, inspections), allow_nan=False))
    else:
        from rich.console import Console

        check.render(inspections, Console())
    return check.exit_code(inspections)
