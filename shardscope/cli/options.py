"""The options several commands share, each declared once, the types that check their values,
and the typed values built by keyword from argparse's namespace: :class:`CommonOptions` (the
shared options: ``--target``, ``--on``, ``--json``, ``--no-cache``, ``--debug``, the profile's, the
process options, :class:`~shardscope.cli.launch.ProcessOptions`) and :class:`DemoOptions` (which
demo function, on which mesh).

A shared option is one row of :data:`SHARED`: its words, argparse's keywords and the commands
that have it. Every command in the row gets it: after the command's own options, in the table's
order, unless the command places it among them (:func:`add_shared`, where ``--help`` has always
listed it). Its value is a field of :class:`CommonOptions`, which every command builds the same
way; adding one is this module and the module that reads the value.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Mapping, Sequence

from shardscope.cli.launch import DEFAULT_TIMEOUT_S, IN_PROCESS, ProcessOptions
from shardscope.cli.parsing import CommandParser
from shardscope.distributed.workers import WorkerRole
from shardscope.errors import SettingsError, ShardscopeError
from shardscope.config.mesh import Mesh, parse_axes
from shardscope.config.settings import (DEFAULT_AXIS, DEFAULT_DEVICES, DEFAULT_REPEATS, DEFAULT_TIMING_BUDGET_S, Settings,
                                        check_axis_name)
from shardscope.sources.bundled import SEED_DEMO, find_file
from shardscope.targets.platforms import ON_PLATFORMS

FILE_HELP = "a Python file with functions marked @shardscope.demo, or a shipped demo's name (shardscope demos)"
DEBUG_HELP = "show tracebacks instead of short messages"
JSON_HELP = "print exactly one JSON object on stdout"

SPAWNER_ONLY_OPTIONS = ("--processes", "--timeout")
"""The process options only the spawner reads: its workers' command lines go without them."""


def positive(text: str) -> int:
    """A whole number of at least 1 (``--devices``, ``--repeats``, ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def seconds(text: str) -> float:
    """A number of seconds, 0 or more (``--timing-budget``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more seconds")
    return value


def axis_name(text: str) -> str:
    """A mesh axis name XLA takes (``--axis``)."""
    try:
        return check_axis_name(text)
    except SettingsError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid axis name (use ASCII letters, digits, _)") from None


def mesh(text: str) -> Mesh:
    """``data=4,model=2`` (``--mesh``)."""
    try:
        return Mesh.parse(text)
    except ShardscopeError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message} ({exc.hint})") from None


def axes(text: str) -> tuple[str, ...]:
    """``data,model`` (``--batch-axes``)."""
    try:
        return parse_axes(text)
    except ShardscopeError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message} ({exc.hint})") from None


def worker_role(text: str) -> WorkerRole:
    """The internal ``--worker ADDRESS,PROCESSES,ID,PARENT_PID`` the spawner writes."""
    try:
        return WorkerRole.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not ADDRESS,PROCESSES,ID,PARENT_PID") from None


TARGET_HELP = ("also compile for this target: a TPU slice (tpu:v5e:2x2, tpu:v5e:16x16; needs pip install "
               "'shardscope[tpu]') or GPUs (gpu:h100:8, gpu:h100:2x8 for two hosts of 8, gpu:FILE.txtpb:8 for your own "
               "description; h100, h200, b200, a100 described; needs pip install 'shardscope[gpu]'); repeatable, "
               "nothing runs there: its columns have no timings")
ON_HELP = ("where the programs run and are timed: cpu (simulated CPU devices; the default, unless JAX_PLATFORMS "
           "names another), tpu or gpu (this machine's chips, as JAX starts them; the mesh must fit on them)")
NO_CACHE_HELP = ("compile every program afresh: neither read nor write the compilation cache "
                 "(~/.cache/shardscope/jax; SHARDSCOPE_NO_CACHE=1 does the same)")

DEMO_COMMANDS = ("open", "report", "sweep", "diff")
"""The commands of a demo function's plans: FILE and :class:`DemoOptions` (:func:`add_demo_options`)."""
COMPILING = (*DEMO_COMMANDS, "check", "layouts", "calibrate")
"""The commands that compile: ``--no-cache`` (the CLI starts the cache before their JAX does)."""
SPAWNING = ("report", "sweep", "calibrate")
"""The commands that run in ``--processes P`` local workers or as one process of a cluster."""


@dataclass(frozen=True)
class SharedOption:
    """An option several commands share, declared once: the words that give it, argparse's
    keywords (``dest`` is its field of :class:`CommonOptions`) and the commands that have it."""

    flags: tuple[str, ...]
    commands: tuple[str, ...]
    keywords: Mapping[str, object] = field(default_factory=dict)


SHARED = (
    SharedOption(("--json",), ("report", "sweep", "check", "layouts", "calibrate"),
                 {"action": "store_true", "help": JSON_HELP}),
    SharedOption(("--target",), ("report", "sweep", "check"),  # parsed when the command runs
                 {"dest": "targets", "action": "append", "default": [], "metavar": "TARGET", "help": TARGET_HELP}),
    SharedOption(("--on",), ("open", "report", "sweep", "check"),  # the CLI records it before JAX starts
                 {"choices": ON_PLATFORMS, "metavar": "{" + ",".join(ON_PLATFORMS) + "}", "help": ON_HELP}),
    SharedOption(("--profile",), ("open", "report", "sweep", "check"),
                 {"action": "store_true",
                  "help": "run each program under JAX's profiler (on the platform --on names) and show each "
                          "collective's measured time per call and per run, the compute it overlapped, and the "
                          "step's measured time (medians over the calls after the first)"}),
    SharedOption(("--profile-dir",), ("open", "report", "check"),  # not sweep's: many programs, none the user ran
                 {"metavar": "DIR",
                  "help": "put the profile of your own run on the plan it executed: the folder given to "
                          "jax.profiler.start_trace (its newest run), a plugins/profile/<run> folder (one "
                          ".xplane.pb per host, read together) or one .xplane.pb; local or gs:// (gcsfs: "
                          "shardscope[profile])"}),
    SharedOption(("--no-cache",), COMPILING, {"action": "store_true", "help": NO_CACHE_HELP}),
    SharedOption(("--debug",), (*COMPILING, "presets", "demos"),  # the CLI reads it when an error reaches it
                 {"action": "store_true", "help": DEBUG_HELP}),
    SharedOption((SPAWNER_ONLY_OPTIONS[0],), SPAWNING,
                 {"type": positive, "default": 1, "metavar": "P",
                  "help": "run in P local processes joined by jax.distributed (CPU collectives over gloo), "
                          "each with DEVICES/P devices; process 0 prints (default 1: in-process)"}),
    SharedOption(("--distributed",), SPAWNING,
                 {"action": "store_true",
                  "help": "on a cluster: join with jax.distributed.initialize() and its auto-detection "
                          "(SLURM, Open MPI, Kubernetes, TPU); start one shardscope per process"}),
    SharedOption((SPAWNER_ONLY_OPTIONS[1],), SPAWNING,
                 {"type": positive, "metavar": "SECONDS",  # None: not given (refused without --processes)
                  "help": f"with --processes: end every worker after this long (default {DEFAULT_TIMEOUT_S}); "
                          "refused without it"}),
    SharedOption(("--worker",), SPAWNING, {"type": worker_role, "help": argparse.SUPPRESS}),  # written by the spawner
)
"""The options several commands share, in the order a command lists those it does not place itself."""


def add_shared(parser: CommandParser, *flags: str) -> None:
    """The shared options ``flags`` name, here among the command's own options (where its
    ``--help`` lists them); each must be one of the command's in :data:`SHARED`."""
    for flag in flags:
        (option,) = (option for option in SHARED if flag in option.flags)
        if parser.command not in option.commands:
            raise ValueError(f"{flag} is not an option of {parser.command}: add it to its row of SHARED")
        parser.add_argument(*option.flags, **option.keywords)


def add_unplaced(parser: CommandParser) -> None:
    """Every shared option of the command that it did not place itself, after its own options."""
    given = {word for action in parser.options for word in action.option_strings}
    add_shared(parser, *(option.flags[0] for option in SHARED
                         if parser.command in option.commands and not given.intersection(option.flags)))


def require_profile_converter(options: DemoOptions) -> None:
    """``--profile`` and ``--profile-dir`` both given: one message, before JAX starts."""
    check_profile_options(options.profile, options.profile_dir)


def check_profile_options(profile: bool, profile_dir: str | None) -> None:
    """``--profile`` and ``--profile-dir`` together are refused (JAX's own reader reads a profile:
    nothing else is needed but gcsfs for a ``gs://`` folder, which its reading checks)."""
    if profile and profile_dir:
        raise SettingsError("--profile runs the programs under the profiler and --profile-dir reads a profile "
                            "you captured: give one of them.", "drop --profile to read the profile in DIR")


def refuse_on_across_processes(on: str | None, processes: ProcessOptions) -> None:
    """``--on tpu``/``gpu`` runs on this machine's chips in one process: :class:`SettingsError` with
    ``--processes`` (its workers are CPU processes joined over gloo)."""
    if on not in (None, "cpu") and processes.spawns_workers:
        raise SettingsError(f"--on {on} runs on this machine's chips in one process: it does not go with --processes.",
                            "--processes P simulates P workers on CPU devices; leave it out to time on the chips")


def refuse_targets_across_processes(targets: Sequence[object], processes: ProcessOptions) -> None:
    """``--target`` compiles in this process: :class:`SettingsError` with ``--processes`` or ``--distributed``."""
    if targets and (processes.spawns_workers or processes.distributed or processes.worker is not None):
        raise SettingsError("--target compiles for the target in one process: it does not go with --processes "
                            "or --distributed.", "leave --processes and --distributed out when you give --target")


def add_demo_options(parser: CommandParser, chunk_size: bool = True, seed_default: bool = False,
                     repeats: bool = True, timing_budget: bool = True) -> None:
    """FILE and the options of :class:`DemoOptions` (and ``--no-cache``, ``--debug``), for ``open``,
    ``report``, ``sweep`` and ``diff``; without ``chunk_size`` (the sweep tries every one) it is None.

    A command that times no run (``diff``: without ``repeats``) or times exactly ``--repeats``
    rounds (``sweep``: without ``timing_budget``) still reads the options it does not use, out of
    its ``--help``, so that :func:`refuse_unused_timing` can say why they do not apply instead of
    argparse's "unrecognized arguments"."""
    if seed_default:
        parser.add_argument("file", type=Path, nargs="?", default=Path(SEED_DEMO),
                            help=f"{FILE_HELP}; default {SEED_DEMO}, the seed case")
    else:
        parser.add_argument("file", type=Path, help=FILE_HELP)
    parser.add_argument("-f", "--function", help="the demo function to analyse (default: the first in the file)")
    parser.add_argument("-d", "--devices", type=positive,
                        help=f"devices in the 1-D mesh (default: the demo's own mesh, else {DEFAULT_DEVICES})")
    parser.add_argument("--axis", type=axis_name, help=f"mesh axis name (default {DEFAULT_AXIS!r})")
    parser.add_argument("--mesh", type=mesh, metavar="AXES",
                        help="a mesh of named axes, e.g. data=4,model=2 (replaces --devices/--axis; "
                             "default: the demo's own mesh, else s=2)")
    parser.add_argument("--batch-axes", type=axes, metavar="AXES",
                        help="the mesh axes the batch is split over, e.g. data (default: every axis)")
    if chunk_size:
        parser.add_argument("-c", "--chunk-size", type=positive,
                            help="examples per chunk (default: the largest giving >= 2 chunks per device)")
    else:
        parser.set_defaults(chunk_size=None)
    if not repeats:
        parser.add_argument("-r", "--repeats", type=positive, help=argparse.SUPPRESS)
    elif timing_budget:
        parser.add_argument("-r", "--repeats", type=positive,
                            help=f"timed rounds per plan after warm-up (default: at least {DEFAULT_REPEATS}, and more "
                                 "within --timing-budget; given, exactly this many unless --timing-budget is given too)")
    else:
        parser.add_argument("-r", "--repeats", type=positive,
                            help=f"timed rounds of every plan at every chunk size after warm-up (default {DEFAULT_REPEATS})")
    parser.add_argument("--timing-budget", type=seconds, metavar="SECONDS",
                        help=argparse.SUPPRESS if not (repeats and timing_budget) else
                        "seconds of more rounds past --repeats while a comparison of two plans is not settled: its "
                        "95%% confidence interval of the median ratio holds 1 and is wider than +-5%% (default "
                        f"{DEFAULT_TIMING_BUDGET_S:g}; 0 when --repeats is given)")
    add_shared(parser, "--no-cache", "--debug")


@dataclass(frozen=True)
class CommonOptions:
    """The values of the shared options (:data:`SHARED`), built by keyword from argparse's
    namespace: a command without one of them has its default here."""

    targets: tuple[str, ...] = ()
    """``--target``, as written (read when the command starts: :mod:`shardscope.cli.startup`)."""
    on: str | None = None
    json: bool = False
    profile: bool = False
    profile_dir: str | None = None
    no_cache: bool = False
    debug: bool = False
    processes: ProcessOptions = IN_PROCESS
    """``--processes``, ``--distributed``, ``--timeout`` and ``--worker``, with the command line
    a worker runs."""

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: Sequence[str] = ()) -> CommonOptions:
        """The shared options a command's subparser parsed from ``argv`` (the command line, which
        ``--processes`` workers run again)."""
        given = vars(args)
        values: dict[str, object] = {name: _frozen(given[name]) for name in (f.name for f in fields(cls))
                                     if name in given}
        if "processes" in given:
            values["processes"] = process_options(args, argv)
        return cls(**values)  # type: ignore[arg-type]  # each value as its option's type made it


def _frozen(value: object) -> object:
    """A repeatable option's list as a tuple (the options are frozen values)."""
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class DemoOptions:
    """Which demo function, on which mesh, in chunks of what size, timed how often: FILE and the
    options :func:`add_demo_options` adds. ``None`` is "the default for this demo"."""

    file: Path
    function: str | None
    devices: int | None
    axis: str | None
    mesh: Mesh | None
    batch_axes: tuple[str, ...] | None
    chunk_size: int | None
    repeats: int
    profile: bool = False
    profile_dir: str | None = None
    timing_budget_s: float = DEFAULT_TIMING_BUDGET_S

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoOptions:
        """The options as parsed by a subparser that :func:`add_demo_options` set up (and
        :func:`add_profile_options`, on the commands that have it)."""
        return cls(file=args.file, function=args.function, devices=args.devices, axis=args.axis, mesh=args.mesh,
                   batch_axes=args.batch_axes, chunk_size=args.chunk_size,
                   repeats=DEFAULT_REPEATS if args.repeats is None else args.repeats,
                   profile=getattr(args, "profile", False), profile_dir=getattr(args, "profile_dir", None),
                   timing_budget_s=timing_budget(args.repeats, args.timing_budget))

    def settings(self, path: Path | None = None) -> Settings:
        """The :class:`Settings` the options describe, of ``path`` (FILE as the command's start-up
        found it) or FILE (which may name a shipped demo).

        Raises :class:`~shardscope.errors.DemoFileError` when FILE is neither a path nor a shipped demo,
        and :class:`SettingsError` when ``--mesh`` is given with a ``--devices`` it does not span or
        with ``--axis`` (the 1-D shorthand's: the mesh names its own axes).
        """
        self.refuse_mesh_with_shorthand()
        devices = DEFAULT_DEVICES if self.devices is None else self.devices
        axis = self.axis or DEFAULT_AXIS
        return Settings(
            path=find_file(self.file) if path is None else path,
            function=self.function,
            devices=devices,
            axis=axis,
            chunk_size=self.chunk_size,
            repeats=self.repeats,
            mesh=self.mesh if self.mesh is not None else Mesh.one_axis(axis, devices),
            batch_axes=self.batch_axes,
            demo_mesh=self.mesh is None and self.devices is None and self.axis is None,
            profile=self.profile,
            profile_dir=self.profile_dir,
            timing_budget_s=self.timing_budget_s,
        )

    def refuse_mesh_with_shorthand(self) -> None:
        """``--mesh`` replaces ``--devices N --axis s``: a ``--devices`` other than the mesh's own
        count, or an ``--axis``, given with it would be ignored, so it is refused (before JAX starts)."""
        if self.mesh is None:
            return
        spec = self.mesh.text()
        if self.devices is not None and self.devices != self.mesh.devices:
            raise SettingsError(
                f"--mesh {spec} spans {self.mesh.devices} device{'s' if self.mesh.devices != 1 else ''}, and --devices "
                f"asks for {self.devices}: the mesh decides the device count, so --devices would be ignored.",
                f"leave --devices out (the mesh's axes multiply to {self.mesh.devices}), or give a --mesh whose axes "
                f"multiply to {self.devices}")
        if self.axis is not None:
            raise SettingsError(f"--axis {self.axis} names the axis of the 1-D mesh --devices makes; --mesh {spec} names "
                                "its own axes, so --axis would be ignored.",
                                f"leave --axis out: the mesh's axes are {', '.join(self.mesh.names)}")


def refuse_unused_timing(args: argparse.Namespace, why: str, hint: str, repeats: bool = True) -> None:
    """:class:`SettingsError` when ``--timing-budget`` (or, without ``repeats``, ``-r/--repeats``)
    was given to a command that does not use it: ``why`` says what the command times instead."""
    given = [flag for flag, value in (("-r/--repeats", None if repeats else args.repeats),
                                      ("--timing-budget", args.timing_budget)) if value is not None]
    if given:
        raise SettingsError(f"{' and '.join(given)} {'do' if len(given) > 1 else 'does'} nothing here: {why}", hint)


def timing_budget(repeats: int | None, budget_s: float | None) -> float:
    """The seconds of more rounds: ``--timing-budget`` when given; else none when ``--repeats``
    asks for a count (exactly that many), else the default."""
    if budget_s is not None:
        return budget_s
    return 0.0 if repeats is not None else DEFAULT_TIMING_BUDGET_S


def process_options(args: argparse.Namespace, argv: Sequence[str]) -> ProcessOptions:
    """The process options of a subparser that :func:`add_process_options` set up; ``argv`` is the
    command line as parsed, which the workers run without the spawner's own options.

    ``--timeout`` ends ``--processes`` workers, and nothing else: given without them (one
    process, or ``--distributed``, whose processes a cluster's launcher starts) it is refused.
    """
    if args.timeout is not None and args.processes < 2:
        none = ("--distributed's processes are the cluster launcher's" if args.distributed
                else "one process (--processes 1, the default) starts none")
        raise SettingsError(f"--timeout {args.timeout} ends the worker processes --processes P starts, and {none}: "
                            "it would do nothing.",
                            "leave --timeout out; the cluster's launcher limits its processes' time (srun --time, ...)"
                            if args.distributed else
                            "leave --timeout out, or give --processes 2 or more with it (to limit the command itself: "
                            "timeout 600 shardscope ...)")
    return ProcessOptions(processes=args.processes, distributed=args.distributed,
                          timeout_s=DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout,
                          worker=args.worker, worker_argv=tuple(without_spawner_options(argv)))


def without_spawner_options(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--processes P`` and ``--timeout S``, in every form argparse reads them
    (``--processes=2``, the abbreviation ``--proc 2``); the other words stay as they are, in order.

    argparse itself finds them: a parser that knows only these two options leaves every other
    word to ``parse_known_args``'s list of the words it did not read.
    """
    spawner = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    for option in SPAWNER_ONLY_OPTIONS:
        spawner.add_argument(option)
    _, rest = spawner.parse_known_args(list(argv))
    return rest
