"""``shardscope check``: the lint of any shard_map program, collectives in loops that need not be
there; exit status 1 when a loop holds one, else 0 (with ``--target tpu:TOPOLOGY``: 1 only when
a target's compiler still keeps one in a loop). ``--what-if`` rewrites each flagged finding,
checks the rewrite, times it against the original and shows the change as a patch (the exit
status stays the original program's)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from shardscope.cli.options import CommonOptions, add_shared, check_profile_options, positive
from shardscope.cli.parsing import AddParser
from shardscope.cli.report import projection_target
from shardscope.distributed.interrupts import run_interruptible
from shardscope.cli.launch import DEFAULT_MAX_DEVICES
from shardscope.targets.platforms import platform_choice, run_on, tpu_chips_attached
from shardscope.errors import SettingsError, ShardscopeError, report_error
from shardscope.config.settings import DEFAULT_DEVICES, DEFAULT_REPEATS, check_device_count

# What the command runs and prints is imported where it runs (the functions below): `import
# shardscope.cli` then loads the parsers alone, for --help, a refusal and every other command.
if TYPE_CHECKING:
    from shardscope.costmodel.interconnects import Link
    from shardscope.measure.profile_read import Profile, ProfileError
    from shardscope.pipeline.what_if import ProgramWhatIf
    from shardscope.engine.hlo.plan_costs import MinSaving
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.pipeline.check import FailedProgram, FileCheck
    from shardscope.targets.base import TargetDevices

NAME = "check"

FORMATS = ("text", "json", "github")
"""What ``--format`` prints: the findings and the outcome, one JSON object, or GitHub annotations."""


def register(add_parser: AddParser) -> None:
    """Add ``check`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="lint your programs (shard_map, jit with shardings, steps of jitted calls): collectives in loops that need not be there")
    parser.add_argument("file", type=Path, nargs="?", help="a Python file with functions marked @shardscope.program "
                        "(or .demo), or a shipped demo's name (shardscope demos); not with --xla-dump")
    parser.add_argument("-f", "--function", help="check only this function (default: every one in the file); with "
                        "--xla-dump, the module to read (jit_step, or step)")
    parser.add_argument("--xla-dump", type=Path, metavar="PATH",
                        help="read the plan of a real run from the modules XLA compiled for it, nothing traced: the "
                             "folder XLA_FLAGS=--xla_dump_to=PATH wrote (its *after_optimizations.txt files; the "
                             "step's is the one with collectives) or one module's text file")
    parser.add_argument("-d", "--devices", type=positive,
                        help=f"CPU devices JAX starts with (default {DEFAULT_MAX_DEVICES}); a demo's mesh size "
                             f"(default {DEFAULT_DEVICES}); with --target, the target's device count")
    add_shared(parser, "--json")
    parser.add_argument("--format", choices=FORMATS, help="text (the default), json (as --json), or github: one "
                        "::error workflow command per finding, at your source line, for GitHub Actions annotations")
    add_shared(parser, "--target", "--on")
    parser.add_argument("--what-if", action="store_true",
                        help="rewrite each flagged finding as its fix, check it (compiled plan, outputs), time it "
                             "against the original and show the patch; the exit status stays the original's")
    parser.add_argument("-r", "--repeats", type=positive,
                        help=f"--what-if: timed rounds of each program after warm-up (default {DEFAULT_REPEATS})")
    parser.add_argument("--project", metavar="PRESET[:DEVICES]",
                        help="--what-if: project both programs' compiled communication onto an interconnect preset "
                             "(see `shardscope presets`) with DEVICES in the ring (default: each collective's group)")
    parser.add_argument("--link", metavar="BW,LATENCY",
                        help="--what-if: a link of your own for --project link[:DEVICES], e.g. 25GB/s,5us")
    parser.add_argument("--min-saving", metavar="TIME|PERCENT",
                        help="with --target: fail only on findings whose deferral saves at least this much per step "
                             "on the target's interconnect: a time (1ms, 50us) or a share of the step (1%%, of the "
                             "step estimate's serialized upper bound, which overlap may undercut; it needs a step "
                             "estimate); the default fails on every finding")
    parser.set_defaults(run=run)  # then the shared options it has not placed: --profile, --no-cache, ...


@dataclass(frozen=True)
class CheckOptions:
    """The options of ``shardscope check``, by keyword: ``function`` None checks every one in the
    file; ``common`` holds the shared ones (``--target``'s values, parsed when it runs, ``--json``
    (or ``--format json``), ``--debug``, which shows a failing program's traceback, the profile's);
    ``repeats``, ``project`` and ``link`` are ``--what-if``'s."""

    file: Path | None = None
    function: str | None = None
    devices: int | None = None
    common: CommonOptions = field(default_factory=CommonOptions)
    github: bool = False
    what_if: bool = False
    repeats: int = DEFAULT_REPEATS
    project: str | None = None
    link: str | None = None
    min_saving: str | None = None
    xla_dump: Path | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CheckOptions:
        """The options as ``check``'s subparser parsed them (``--format`` checked against the others)."""
        fmt = args.format or ("json" if args.json else "text")
        if args.json and fmt != "json":
            raise SettingsError(f"--json and --format {fmt} ask for two outputs.", "give one of them")
        if fmt == "github" and args.what_if:
            raise SettingsError("--format github prints one annotation per finding; --what-if's patches are not "
                                "annotations.", f"run shardscope check {args.file} --what-if without --format github")
        _refuse_with_dump(args)
        if args.repeats is not None and not args.what_if:
            raise SettingsError("-r/--repeats times --what-if's rewrites against the originals, and no --what-if was "
                                "given: check itself runs nothing.", f"shardscope check {args.file} --what-if -r {args.repeats}")
        return cls(file=args.file, function=args.function, devices=args.devices,
                   common=replace(CommonOptions.from_args(args), json=fmt == "json"), github=fmt == "github",
                   what_if=args.what_if, repeats=DEFAULT_REPEATS if args.repeats is None else args.repeats, project=args.project, link=args.link,
                   min_saving=args.min_saving, xla_dump=args.xla_dump)

    def saving_threshold(self) -> MinSaving | None:
        """``--min-saving`` read (checked before JAX starts); it needs ``--target``."""
        if self.min_saving is None:
            return None
        from shardscope.costmodel.savings import parse_min_saving

        threshold = parse_min_saving(self.min_saving)
        if not self.common.targets:
            raise SettingsError(
                f"--min-saving {self.min_saving} weighs what deferring a finding saves on a target's interconnect, "
                "and no --target was given.",
                f"shardscope check {self.file} --target gpu:h100:8 --min-saving {self.min_saving} "
                "(or tpu:v5e:2x4, ...)")
        return threshold

    def projection(self) -> tuple[Link, int | None] | None:
        """``--project``/``--link`` as a link and device count (checked before JAX starts)."""
        target = projection_target(self.project, self.link)
        if target is not None and not self.what_if:
            raise SettingsError("--project and --link project a rewrite's gain: they need --what-if.",
                                f"shardscope check {self.file} --what-if --project nvlink-h100")
        return target


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope check``, in a thread that Ctrl+C and SIGTERM end at once."""
    options = CheckOptions.from_args(args)
    return run_interruptible(lambda: annotated_check(options))


def annotated_check(options: CheckOptions) -> int:
    """:func:`check`; with ``--format github``, an error that stops it (a file that does not import,
    a bad option) is an annotation too, at the line it names, so that the pull request shows it.
    The error itself still reaches stderr and the exit status (2) as ever."""
    try:
        return check(options)
    except ShardscopeError as exc:
        if options.github:
            from shardscope.render.workflow_commands import stopped_command

            print(stopped_command(exc, options.file or options.xla_dump or Path(".")), flush=True)
        raise


def check(options: CheckOptions) -> int:
    """Check the file's programs; exit status 1 when a loop holds a collective it does not need, else 0.

    With ``--target``, 1 only when a target still runs such a collective in a loop. A program
    that fails to trace or compile is reported with its message (``--debug``: its traceback)
    after the others are checked, and the status is 2. With ``--xla-dump``, the plan of the
    dumped module (:func:`check_dump`).
    """
    if options.xla_dump is not None:
        return check_dump(options)
    if options.file is None:  # from_args refuses it; a caller building the options may not
        raise SettingsError("check needs a Python file (or a demo's name), or --xla-dump PATH.",
                            "shardscope check train.py, or shardscope check --xla-dump /tmp/xla_dump")
    from shardscope.cli.startup import start_up
    from shardscope.targets.host import ensure_devices, start_jax_quietly

    projection = options.projection()  # --what-if's --project: refused before JAX starts
    min_saving = options.saving_threshold()  # likewise
    started = start_up(options.file, options.common)  # FILE, the profile's options, --target: before JAX starts
    path = started.path

    chosen = platform_choice() is not None  # before JAX's import: a TPU VM's own default is no choice
    start_jax_quietly()  # the imports below load JAX: its CUDA plugin's start-up lines dropped
    profile = _profile_first(options, bool(started.slices) or chosen)  # its platform may decide where the program compiles
    from shardscope.pipeline.check import check_file  # imports JAX (about 3 s): not for --help nor a refusal
    from shardscope.targets.plans import target_device_count

    # libtpu's own refusals (a topology it does not know), before the file loads; with several
    # targets, those that cannot be compiled for are reported after the others' results
    targets, unavailable = started.loaded_targets()
    _refuse_other_device_count(options, targets)
    devices = max(options.devices or _profiled_devices(profile) or DEFAULT_MAX_DEVICES, target_device_count(targets) or 0)
    check_device_count(devices)  # before JAX starts: thousands hang it
    ensure_devices(devices)  # before the file builds its mesh
    with contextlib.redirect_stdout(sys.stderr):  # what the file prints stays off the report
        # --what-if and --profile run the CPU's executable; --profile-dir maps the run's profile onto it
        runs = options.what_if or options.common.profile or bool(options.common.profile_dir)
        # judged once: each target plan costed, its findings weighed against --min-saving (a share of the
        # step without a step estimate is refused here, before any output), the exit status
        checked = check_file(path, options.function, options.devices, targets, options.common.profile, runs=runs,
                             min_saving=min_saving, unavailable=unavailable)
        rewrites = _rewrites(checked, options, projection)
        checked = _measured(checked, options, profile)
    _print_outcome(options, path, checked, rewrites, targets)
    return checked.exit_status


def check_dump(options: CheckOptions) -> int:
    """``check --xla-dump PATH``: the plan of the step's module a real run compiled, read from
    its dump (nothing traced, no device started); the exit status is ``check``'s."""
    assert options.xla_dump is not None
    from shardscope.targets.host import start_jax_quietly

    check_profile_options(options.common.profile, options.common.profile_dir)  # the extra missing: before JAX starts
    start_jax_quietly()  # the plan's modules import JAX
    from shardscope.pipeline.xla_dump import dump_check

    checked = dump_check(options.xla_dump, options.function)
    for note in checked.notes:  # which compilation of several was read: said, never silent
        print(f"shardscope: {note}", file=sys.stderr, flush=True)
    checked = _measured(checked, options, None)  # the same run's profile, on the run's own plan
    _print_outcome(options, options.xla_dump, checked, None, ())
    return checked.exit_status


def _print_outcome(options: CheckOptions, path: Path, checked: FileCheck, rewrites: list[ProgramWhatIf] | None,
                   targets: Sequence[TargetDevices]) -> None:
    """The judged check in the format asked for, then each failed program's one message, each
    target that could not be compiled for and what the profile could not be put on (the plans are
    shown all the same)."""
    from rich.text import Text

    from shardscope.render.check import render, to_json  # imports the pipeline (JAX) too
    from shardscope.render.console import stdout_console
    from shardscope.render.github import workflow_commands
    from shardscope.render.workflow_commands import stopped_command

    debug = options.common.debug
    if options.common.json:
        data = to_json(path, checked, rewrites)
        data["profile_errors"] = [{"error": e.message, "hint": e.hint} for e in checked.profile_errors]
        print(json.dumps(data, allow_nan=False))
    elif options.github:
        for line in workflow_commands(path, checked):
            print(line)
        for error in checked.unavailable:
            print(stopped_command(error, path, title=f"shardscope: {error.target} was not compiled for"))
    else:
        render(checked, stdout_console(), rewrites, [str(t.target) for t in targets])
        stepped = [ins.function for ins in checked.inspections if ins.dispatches is not None]
        if targets and stepped:
            stdout_console().print(Text(
                f"{', '.join(stepped)}: not compiled for {', '.join(str(t.target) for t in targets)}: a step of dispatches is "
                "read as its calls on the CPU; no target's compiler merges separate calls.", style="dim"))
    sys.stdout.flush()  # the report and its "each one's error follows" before the errors, on a terminal too
    # each program that did not trace: its one message, after the others' report
    errors = [failure.error for failure in checked.failed] if debug else merged_errors(checked.failed)
    for failed_error in errors:
        report_error(failed_error, debug)
    for error in checked.unavailable:  # each target that could not be compiled for: after the others' results
        report_error(error, debug)
    for profile_error in checked.profile_errors:  # the profile: after the plans, which stand without its times
        report_error(profile_error, debug)


def merged_errors(failed: Sequence[FailedProgram]) -> list[ShardscopeError]:
    """The errors of the programs not checked, one message for those that failed alike: programs
    over the file's one mesh all run on another device count than the target has, and
    ``first runs on 8 devices; tpu:v5e:2x2 has 4.`` once per program said one thing N times."""
    groups: dict[object, list[FailedProgram]] = {}
    for failure in failed:
        rest = failure.error.message.removeprefix(f"{failure.function} ")
        same_words = rest.startswith(_RUNS_ON) and rest != failure.error.message
        groups.setdefault((type(failure.error), rest, failure.error.hint) if same_words else id(failure), []).append(failure)
    errors = []
    for group in groups.values():
        error = group[0].error
        if len(group) > 1:
            names = ", ".join(failure.function for failure in group)
            rest = error.message.removeprefix(f"{group[0].function} ").removeprefix("runs")
            error = type(error)(f"{names} run{rest}", error.hint, line=error.line)
        errors.append(error)
    return errors


_RUNS_ON = "runs on "
"""How a program's device-count error goes on after its name (:mod:`shardscope.targets.compile`)."""


def _rewrites(checked: FileCheck, options: CheckOptions,
              projection: tuple[Link, int | None] | None) -> list[ProgramWhatIf] | None:
    """``--what-if``'s rewrite of each flagged finding, checked and timed; None without it, and
    then the what-if is not loaded (16 modules the check does not need)."""
    if not options.what_if:
        return None
    from shardscope.pipeline.what_if import what_ifs  # the rewrites: only when --what-if asks for them

    return what_ifs(checked.inspections, options.repeats, *(projection or (None, None)))


def _refuse_with_dump(args: argparse.Namespace) -> None:
    """FILE, or ``--xla-dump`` and nothing that needs a program to trace, compile or run."""
    if args.xla_dump is None:
        return  # check() says a missing FILE
    if args.file is not None:
        raise SettingsError(f"--xla-dump reads the plan of the run that wrote {args.xla_dump}; {args.file} would be "
                            "traced again instead.", f"shardscope check --xla-dump {args.xla_dump} (no FILE)")
    needs_program = [flag for flag, given in (("--target", args.targets), ("--what-if", args.what_if),
                                              ("--devices", args.devices is not None),
                                              ("--min-saving", args.min_saving is not None),
                                              ("--project", args.project is not None), ("--link", args.link is not None),
                                              ("--on", getattr(args, "on", None) is not None),
                                              ("--profile", getattr(args, "profile", False))) if given]
    if needs_program:
        raise SettingsError(f"--xla-dump reads a module a run already compiled; {', '.join(needs_program)} "
                            f"compile{'s' if len(needs_program) == 1 else ''} or run{'s' if len(needs_program) == 1 else ''} "
                            "the program here.", f"shardscope check --xla-dump {args.xla_dump} without "
                                                 f"{', '.join(needs_program)}")


def _measured(checked: FileCheck, options: CheckOptions, profile: Profile | ProfileError | None) -> FileCheck:
    """``checked`` with a profile's times on its plans (``--profile``, ``--profile-dir``:
    ``profile`` is the one already read, or the error reading it gave), and the messages for what
    the profile could not be put on."""
    from shardscope.pipeline.profiled import measured_by_profiler, measured_from_dir  # imports JAX, as above

    inspections, profile_dir = checked.inspections, options.common.profile_dir
    if profile_dir:
        done = measured_from_dir(inspections, profile if profile is not None else profile_dir)
    elif options.common.profile and not any(ins.measured is not None for ins in inspections):  # a demo's plans ran profiled
        done = measured_by_profiler(inspections)
    else:
        return checked
    return replace(checked, inspections=done.inspections, profile_errors=tuple(done.errors))


def _profile_first(options: CheckOptions, chosen: bool) -> Profile | ProfileError | None:
    """``--profile-dir``'s profile, read before JAX's backend starts: a run on this machine's kind
    of accelerator (a TPU profile on a TPU VM) is checked on it, as ``--on tpu`` would (unless
    ``chosen``: ``--on``, ``JAX_PLATFORMS`` or ``--target`` chose otherwise). None without
    ``--profile-dir``; the error reading it gave, kept for after the plans."""
    if not options.common.profile_dir:
        return None
    from shardscope.measure.profile_read import ProfileError
    from shardscope.pipeline.profiled import read_or_error  # JAX's reader: JAX is imported by now
    from shardscope.targets.host import start_jax_quietly

    profile = read_or_error(options.common.profile_dir)
    if isinstance(profile, ProfileError) or profile.platform == "cpu" or chosen:
        return profile
    if profile.platform == "tpu" and tpu_chips_attached():
        run_on("tpu")  # the run's own compiler, on the chip the profile names
        print(f"shardscope: the profile is of a run on {profile.machine()}: checking on this machine's TPU "
              "(as --on tpu)", file=sys.stderr, flush=True)
        start_jax_quietly()
    return profile


def _profiled_devices(profile: Profile | ProfileError | None) -> int | None:
    """The devices a profiled run's program spans, when the check runs on its platform (a TPU
    run checked on the TPU): the mesh the file builds then has the run's device count."""
    from shardscope.measure.profile_read import Profile

    if isinstance(profile, Profile) and profile.platform != "cpu" and profile.executions:
        return max(e.devices for e in profile.executions)
    return None


def _refuse_other_device_count(options: CheckOptions, targets: Sequence[TargetDevices]) -> None:
    """``--devices N`` with a target of another device count, refused before JAX starts.

    A program file's mesh spans the devices JAX starts with and a demo's plans span ``N``: either
    way the program would not be the one compiled for the target, so ``N`` must be its count.
    """
    count = targets[0].count if targets else None
    if options.devices is None or count is None or options.devices == count:
        return
    target = targets[0].target
    raise SettingsError(f"--devices {options.devices} does not fit {target}, which has {count} devices.",
                        f"pass --devices {count} with --target {target}, or a topology with "
                        f"{options.devices} {target.device_noun}")
