"""The ``shardscope`` command: its options, the app, ``report``, ``diff`` and ``check``.

``sweep``, ``calibrate`` and ``presets`` run in their own modules (``*_command``); how JAX
starts (in-process, ``--processes``, ``--distributed``) is :mod:`shardscope.distributed.launch`.

Every error a user can cause prints one message (and a hint) on stderr and exits with status 2;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from shardscope.sources.bundled import SEED_DEMO, find_file, listing
from shardscope.pipeline.devices import ensure_devices
from shardscope.errors import SettingsError, ShardscopeError, print_error
from shardscope.distributed.launch import DEFAULT_MAX_DEVICES, DEFAULT_TIMEOUT_S, spawn_workers, spawns_workers, start_jax
from shardscope.plans.settings import (
    DEFAULT_AXIS,
    DEFAULT_DEVICES,
    DEFAULT_REPEATS,
    MAX_DEVICES,
    Settings,
    check_axis_name,
    check_device_count,
)

COMMANDS = ("open", "report", "sweep", "calibrate", "presets", "diff", "check", "demos")
EXIT_USER_ERROR = 2


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _axis(text: str) -> str:
    try:
        return check_axis_name(text)
    except SettingsError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid axis name (use ASCII letters, digits, _)") from None


def _mesh(text: str):
    from shardscope.plans.mesh import Mesh

    try:
        return Mesh.parse(text)
    except ShardscopeError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message} ({exc.hint})") from None


def _axes(text: str) -> tuple[str, ...]:
    from shardscope.plans.mesh import parse_axes

    try:
        return parse_axes(text)
    except ShardscopeError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message} ({exc.hint})") from None


FILE_HELP = "a Python file with functions marked @shardscope.demo, or a shipped demo's name (shardscope demos)"


def _settings_options(parser: argparse.ArgumentParser, chunk_size: bool = True, seed_default: bool = False) -> None:
    if seed_default:
        parser.add_argument("file", type=Path, nargs="?", default=Path(SEED_DEMO),
                            help=f"{FILE_HELP}; default {SEED_DEMO}, the seed case")
    else:
        parser.add_argument("file", type=Path, help=FILE_HELP)
    parser.add_argument("-f", "--function", help="the demo function to analyse (default: the first in the file)")
    parser.add_argument("-d", "--devices", type=_positive,
                        help=f"devices in the 1-D mesh (default: the demo's own mesh, else {DEFAULT_DEVICES})")
    parser.add_argument("--axis", type=_axis, help=f"mesh axis name (default {DEFAULT_AXIS!r})")
    parser.add_argument("--mesh", type=_mesh, metavar="AXES",
                        help="a mesh of named axes, e.g. data=4,model=2 (replaces --devices/--axis; "
                             "default: the demo's own mesh, else s=2)")
    parser.add_argument("--batch-axes", type=_axes, metavar="AXES",
                        help="the mesh axes the batch is split over, e.g. data (default: every axis)")
    if chunk_size:
        parser.add_argument("-c", "--chunk-size", type=_positive,
                            help="examples per chunk (default: the largest giving >= 2 chunks per device)")
    parser.add_argument("-r", "--repeats", type=_positive, default=DEFAULT_REPEATS,
                        help=f"timed runs per plan after warm-up (default {DEFAULT_REPEATS})")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of short messages")


def _projection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", metavar="PRESET[:DEVICES]",
                        help="project each plan's communication onto an interconnect preset "
                             "(see `shardscope presets`) with DEVICES in the ring (default: --devices)")
    parser.add_argument("--link", metavar="BW,LATENCY",
                        help="a link of your own for --project link[:DEVICES], e.g. 25GB/s,5us "
                             "(alone, it implies --project link)")


def _process_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=_positive, default=1, metavar="P",
                        help="run in P local processes joined by jax.distributed (CPU collectives over gloo), "
                             "each with DEVICES/P devices; process 0 prints (default 1: in-process)")
    parser.add_argument("--distributed", action="store_true",
                        help="on a cluster: join with jax.distributed.initialize() and its auto-detection "
                             "(SLURM, Open MPI, Kubernetes, TPU); start one shardscope per process")
    parser.add_argument("--timeout", type=_positive, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"with --processes: end every worker after this long (default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # written by the spawner: ADDRESS,P,ID,PARENT


def projection_target(args: argparse.Namespace):
    """``(Link, devices or None)`` from ``--project``/``--link``, or None when neither is given."""
    from shardscope.costmodel.interconnects import CUSTOM_LINK_NAME, parse_link, parse_project

    custom = parse_link(args.link) if getattr(args, "link", None) else None
    spec = getattr(args, "project", None)
    if spec is None:
        return None if custom is None else (custom, None)
    return parse_project(spec if spec else CUSTOM_LINK_NAME, custom)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``shardscope``."""
    parser = argparse.ArgumentParser(
        prog="shardscope",
        description="See the communication plan of a chunked VJP under jax.shard_map.",
        epilog="shardscope FILE is short for shardscope open FILE (the explorer); shardscope alone opens the "
        f"shipped {SEED_DEMO} demo. report, diff, sweep and check run headless. FILE may be a shipped demo's "
        "name (shardscope demos lists them).",
    )
    from shardscope import __version__

    parser.add_argument("--version", action="version", version=f"shardscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    app = sub.add_parser("open", help="open the explorer (the default command)")
    _settings_options(app, seed_default=True)
    app.add_argument("--max-devices", type=_positive, default=DEFAULT_MAX_DEVICES,
                     help="CPU devices to start JAX with; the sidebar offers meshes up to this size "
                          f"(default 8, at most {MAX_DEVICES})")
    app.add_argument("--export-dir", type=Path, help="where `e` writes the diff (default: the working directory)")
    app.add_argument("--profile-startup", action="store_true",
                     help="log seconds to first paint and to first results on exit")
    report = sub.add_parser("report", help="print the analysis: collectives, loops, bytes, timings")
    _settings_options(report)
    report.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    _projection_options(report)
    _process_options(report)
    sweep = sub.add_parser("sweep", help="memory and run time of every plan at every chunk size, and a pick")
    _settings_options(sweep, chunk_size=False)
    sweep.add_argument("--chunk-sizes", metavar="C1,C2,...",
                       help="chunk sizes to try (default: every divisor of the per-device batch)")
    sweep.add_argument("--memory-budget", metavar="SIZE",
                       help="per-device memory the pick must fit in, e.g. 512MiB or 2GB")
    sweep.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    _process_options(sweep)
    calibrate = sub.add_parser("calibrate", help="fit alpha and bandwidth to all-reduces measured on this machine")
    calibrate.add_argument("-d", "--devices", type=_positive, default=DEFAULT_DEVICES,
                           help=f"devices in the all-reduce (default {DEFAULT_DEVICES})")
    calibrate.add_argument("--sizes", metavar="S1,S2,...",
                           help="payload sizes per device (default 1KiB,16KiB,256KiB,1MiB,4MiB)")
    calibrate.add_argument("-r", "--repeats", type=_positive, default=DEFAULT_REPEATS,
                           help=f"timed calls per size after warm-up (default {DEFAULT_REPEATS})")
    calibrate.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    calibrate.add_argument("--debug", action="store_true", help="show tracebacks instead of short messages")
    _process_options(calibrate)
    presets = sub.add_parser("presets", help="list the interconnect presets --project knows, with sources")
    presets.add_argument("--json", action="store_true", help="print a JSON list of the presets")
    presets.add_argument("--debug", action="store_true", help="show tracebacks instead of short messages")
    diff = sub.add_parser("diff", help="the unified diff of the two plans' canonical jaxprs")
    _settings_options(diff)
    diff.add_argument("-o", "--output", help="write the diff to this file (atomically); - for standard output")
    diff.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    check = sub.add_parser("check", help="lint any shard_map program: collectives in loops that need not be there")
    check.add_argument("file", type=Path, help="a Python file with functions marked @shardscope.program (or .demo), "
                       "or a shipped demo's name (shardscope demos)")
    check.add_argument("-f", "--function", help="check only this function (default: every one in the file)")
    check.add_argument("-d", "--devices", type=_positive,
                       help=f"CPU devices JAX starts with (default {DEFAULT_MAX_DEVICES}); a demo's mesh size "
                            f"(default {DEFAULT_DEVICES})")
    check.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    check.add_argument("--debug", action="store_true", help="show tracebacks instead of short messages")
    demos = sub.add_parser("demos", help="list the shipped demos, with what each shows and where they are")
    demos.add_argument("--debug", action="store_true", help="show tracebacks instead of short messages")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; a bare ``shardscope FILE`` means ``shardscope open FILE`` (and ``shardscope``
    alone opens the seed demo)."""
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["open", *argv]
    parser = build_parser()
    return parser.parse_args(glue_dash_values(argv, parser))


def glue_dash_values(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--link -25GB/s,5us`` as ``--link=-25GB/s,5us``.

    argparse reads a value that starts with ``-`` (and is not a plain negative number) as
    another option, and says "expected one argument"; glued to its option, the value reaches
    the option's own check, which says what is wrong with it (a negative bandwidth). A word that
    is one of shardscope's options is left alone: ``--link --json`` is a missing value.
    """
    takes_value, known = set(), {"--"}
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for sub in commands.choices.values():
        for action in sub._actions:
            known.update(action.option_strings)
            if action.option_strings and action.nargs is None:
                takes_value.update(action.option_strings)
    glued, i = [], 0
    while i < len(argv):
        word = argv[i]
        following = argv[i + 1] if i + 1 < len(argv) else None
        if word in takes_value and following and following.startswith("-") and following != "-" \
                and following.split("=", 1)[0] not in known:
            glued.append(f"{word}={following}")
            i += 2
            continue
        glued.append(word)
        i += 1
    return glued


def settings_from(args: argparse.Namespace) -> Settings:
    """The :class:`Settings` the options describe (FILE may name a shipped demo)."""
    return Settings(
        path=find_file(args.file),
        function=args.function,
        devices=DEFAULT_DEVICES if args.devices is None else args.devices,
        axis=args.axis or DEFAULT_AXIS,
        chunk_size=getattr(args, "chunk_size", None),
        repeats=args.repeats,
        mesh=args.mesh,
        batch_axes=args.batch_axes,
        demo_mesh=args.mesh is None and args.devices is None and args.axis is None,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    ``report`` and ``diff`` run in a worker thread: Ctrl+C and SIGTERM end them at once with
    status 130 / 143 and nothing written (:mod:`shardscope.distributed.interrupts`).
    """
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "demos":
            print(listing())
            return 0
        if args.command == "open":
            return _open(args)
        from shardscope.distributed.interrupts import run_interruptible

        return run_interruptible(lambda: _run(args))
    except ShardscopeError as exc:
        if args.debug:
            raise
        print_error(exc)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `shardscope report ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def open_options(argv: list[str]) -> tuple[Settings, dict]:
    """The settings and the :func:`~shardscope.app.make_app` options of ``shardscope open ARGV``.

    Needs no JAX: the app starts JAX in its first worker, with the device count set before the
    file is imported. A device count over the cap is refused here, before JAX starts.
    """
    args = parse(["open", *argv])
    return _app_options(args)


def _app_options(args: argparse.Namespace) -> tuple[Settings, dict]:
    settings = settings_from(args)
    max_devices = max(args.max_devices, settings.mesh.devices)
    check_device_count(max_devices)  # the app starts this many CPU devices: refuse thousands now
    return settings, {"max_devices": max_devices, "export_dir": args.export_dir,
                      "profile_startup": args.profile_startup}


def _open(args: argparse.Namespace) -> int:
    settings, options = _app_options(args)
    from shardscope.app import run_app

    return run_app(settings, **options)


def _run(args: argparse.Namespace) -> int:
    if args.command == "check":
        return _check(args)
    if args.command == "presets":
        from shardscope.cli import presets

        return presets.run(args.json)
    if args.command == "calibrate":
        from shardscope.cli import calibrate

        return calibrate.run(args, build_parser())
    settings = settings_from(args)
    from shardscope.sources.loading import require_file

    target = projection_target(args) if args.command == "report" else None  # fails before JAX starts
    if args.command == "sweep":  # check the sweep's own options before JAX starts too
        from shardscope.cli import sweep

        sweep.check_options(args)
    require_file(settings.path)  # before JAX starts: a typo fails fast
    start_jax(args, settings)  # the device count is set before the file is imported
    demo_file, settings = _load_checked(settings)  # loaded once: what it prints at import, once
    if spawns_workers(args):
        args.mesh = settings.mesh  # the demo's own mesh, if it has one: the workers run on it too
        return spawn_workers(args, settings, build_parser(), _batch(demo_file, settings))
    ensure_devices(settings.mesh.devices)
    if args.command == "sweep":
        return sweep.run(args, settings, demo_file)
    from shardscope.pipeline.run import analyze
    from shardscope.distributed.workers import is_leader

    # What the demo prints (at import, while tracing) must not mix into the report or the diff.
    with contextlib.redirect_stdout(sys.stderr):
        analysis = analyze(settings, loaded=demo_file, measure=args.command == "report", graphs=False)
    if not is_leader():
        return 0
    if args.command == "diff":
        from shardscope.render.text import diff_text

        return _write_diff(diff_text(analysis), args.output, args.force)

    projection = None
    if target is not None:
        from shardscope.costmodel.projection import project

        projection = project(analysis, *target)
    if args.json:
        import json

        from shardscope.render.report import to_json

        print(json.dumps(to_json(analysis, projection), allow_nan=False))
    else:
        from shardscope.render.console import stdout_console
        from shardscope.render.report import render

        render(analysis, stdout_console(), projection)
    return 0


def _load_checked(settings: Settings):
    """Import the demo file and check the device count against its batch.

    JAX's device count is already set (:func:`~shardscope.distributed.launch.start_jax`): a file that builds
    arrays when imported gets the devices asked for. The backend has not started unless the file
    started it, so a count that does not divide the batch is refused before anything else is
    allocated. Returns the loaded :class:`~shardscope.sources.demos.DemoFile`, for the analysis to use
    rather than import the file a second time, and the settings on the demo's own mesh when the
    user gave none.
    """
    from shardscope.sources.loading import load_demo_file
    from shardscope.pipeline.devices import request_devices
    from shardscope.sources.examples import batch_size

    with contextlib.redirect_stdout(sys.stderr):
        demo_file = load_demo_file(settings.path)
    demo_fn = demo_file.get(settings.function)
    settings = settings.for_demo(demo_fn.default_mesh)
    if len(settings.mesh.names) == 1:  # a 1-D mesh splits the batch over every device
        # the hint lists every count that works
        check_device_count(settings.mesh.devices, batch_size(demo_fn.spec.x))
    else:
        check_device_count(settings.mesh.devices)
    request_devices(settings.mesh.devices)  # a demo's own mesh may need more than were asked for
    return demo_file, settings


def _batch(demo_file: Any, settings: Settings) -> int | None:
    """The demo's batch N, which the device counts suggested for ``--processes`` must split."""
    from shardscope.sources.examples import batch_size

    try:
        return batch_size(demo_file.get(settings.function).spec.x)
    except ShardscopeError:
        return None


def _write_diff(text: str, output: str | None, force: bool) -> int:
    if output is None or output == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))  # as write_atomic does
        sys.stdout.buffer.flush()
        return 0
    from shardscope.render.exports import write_atomic

    path = write_atomic(output, text, overwrite=force)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _check(args: argparse.Namespace) -> int:
    """``shardscope check``: exit 1 when a loop holds a collective it does not need, else 0."""
    from shardscope.pipeline import check
    from shardscope.render import check as check_output
    from shardscope.sources.loading import require_file

    path = require_file(find_file(args.file))  # FILE may name a shipped demo
    check_device_count(args.devices or DEFAULT_MAX_DEVICES)  # before JAX starts: thousands hang it
    ensure_devices(args.devices or DEFAULT_MAX_DEVICES)  # before the file builds its mesh
    with contextlib.redirect_stdout(sys.stderr):
        inspections = check.check_file(path, args.function, args.devices)
    if args.json:
        import json

        print(json.dumps(check_output.to_json(path, inspections), allow_nan=False))
    else:
        from shardscope.render.console import stdout_console

        check_output.render(inspections, stdout_console())
    return check.exit_code(inspections)
