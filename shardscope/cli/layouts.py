"""``shardscope layouts``: rank a program's layouts on a target before renting it.

Every assignment of the target's devices to the mesh axes a ``@shardscope.layouts`` function
names (``--axis tensor=1,4,8,16`` restricts one), times its options (``--option`` restricts
one), compiled for the target with nothing run, in worker processes (``--workers``), with
progress and the time left on stderr; then the ranking (fits, step time, throughput per chip,
MFU, top collectives) and a pick with one sentence of why, or ``--json``. Ctrl+C keeps the rows
done.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from shardscope.cli.options import CommonOptions, positive
from shardscope.cli.parsing import AddParser
from shardscope.distributed.interrupts import run_interruptible
from shardscope.errors import SettingsError

# What the command runs and prints is imported where it runs: `import shardscope.cli` then loads
# the parsers alone, for --help, a refusal and every other command.
if TYPE_CHECKING:
    from shardscope.config.layout_candidates import Candidate
    from shardscope.pipeline.layout_ranking import LayoutRanking
    from shardscope.pipeline.layout_compile import CompiledCandidate
    from shardscope.sources.layouts import LayoutFunction
    from shardscope.targets.base import Target

NAME = "layouts"


def register(add_parser: AddParser) -> None:
    """Add ``layouts`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="rank your step's layouts (how its mesh splits the target's devices) on a TPU "
                                   "slice or GPUs, nothing run: fit, step time, throughput, MFU, and a pick")
    parser.add_argument("file", type=Path, help="a Python file with a function marked @shardscope.layouts")
    parser.add_argument("--target", required=True, metavar="TARGET",
                        help="the machine to rank on: tpu:v5e:16x16, gpu:h100:4x8 (hosts x GPUs), cpu:8, ... "
                             "(TPUs need pip install 'shardscope[tpu]', GPUs 'shardscope[gpu]')")
    parser.add_argument("-f", "--function", help="the layouts function to rank (default: the file's only one)")
    parser.add_argument("--axis", action="append", default=[], metavar="NAME=S1,S2,...",
                        help="try only these sizes of one mesh axis, e.g. --axis tensor=1,4,8,16 (repeatable)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=V1,V2,...",
                        help="try only these of an option's values, as the function lists them, e.g. "
                             "--option per_device_batch=4 (repeatable)")
    parser.add_argument("--workers", type=positive,
                        help="processes compiling candidates at once (default: one per 2 cores, at most the "
                             "candidates; XLA compiles each on several threads); 1 compiles them in this process")
    parser.set_defaults(run=run)  # then the shared options: --json, --no-cache, --debug


@dataclass(frozen=True)
class LayoutsOptions:
    """The options of ``shardscope layouts``, as written (checked when it runs)."""

    file: Path
    target: str
    function: str | None = None
    axes: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    workers: int | None = None
    common: CommonOptions = CommonOptions()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LayoutsOptions:
        """The options as ``layouts``' subparser parsed them."""
        return cls(file=args.file, target=args.target, function=args.function, axes=tuple(args.axis),
                   options=tuple(args.option), workers=args.workers, common=CommonOptions.from_args(args))

    def allowed_sizes(self) -> dict[str, tuple[int, ...]]:
        """``--axis`` read: each axis's allowed sizes (refused before JAX starts)."""
        from shardscope.config.layout_candidates import parse_axis_choice

        allowed: dict[str, tuple[int, ...]] = {}
        for text in self.axes:
            name, sizes = parse_axis_choice(text)
            allowed[name] = tuple(sorted(set(allowed.get(name, ())) | set(sizes)))
        return allowed


class Sweep:
    """What a running sweep has made so far (an interrupt prints it)."""

    def __init__(self, function: "LayoutFunction", target: str, total: int, workers: int) -> None:
        self.function, self.target, self.total, self.workers = function, target, total, workers
        self.done: list[CompiledCandidate] = []
        self.started = time.perf_counter()
        self.lock = threading.Lock()
        self.pool: object = None

    def add(self, result: "CompiledCandidate") -> None:
        """One more candidate done."""
        with self.lock:
            self.done.append(result)

    def ranking(self, interrupted: bool = False) -> "LayoutRanking":
        """The candidates done, ranked."""
        from shardscope.pipeline.layout_ranking import SweepCost, ranked

        with self.lock:
            done = list(self.done)
        cost = SweepCost(time.perf_counter() - self.started, sum(c.compile_s for c in done),
                         sum(c.compile_cpu_s for c in done), self.workers)
        return ranked(done, self.function.name, self.target, self.total, cost, interrupted)


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """``shardscope layouts``, in a thread that Ctrl+C and SIGTERM end at once, keeping the rows done."""
    options = LayoutsOptions.from_args(args)
    holder: dict[str, Sweep] = {}

    def keep() -> str:
        sweep = holder.get("sweep")
        if sweep is None:
            return "nothing was compiled yet"
        stop = getattr(sweep.pool, "stop", None)
        if stop is not None:
            stop()
        with contextlib.redirect_stdout(sys.__stdout__ or sys.stdout):  # the sweep's thread points it at stderr
            print_ranking(sweep.ranking(interrupted=True), options.common.json)
        return f"the {len(sweep.done)} of {sweep.total} candidates done are above"

    return run_interruptible(lambda: layouts(options, holder), keep)


def layouts(options: LayoutsOptions, holder: dict[str, Sweep] | None = None) -> int:
    """Rank the candidates of the file's layouts function on the target; 0 when one fits, 1 when
    none does, 2 for a mistake (a message, before anything compiles)."""
    from shardscope.cli.startup import start_up
    from shardscope.targets.host import start_jax_quietly
    from shardscope.targets.registry import checked_targets

    holder = {} if holder is None else holder
    allowed = options.allowed_sizes()  # a typo in --axis: refused before JAX starts
    path = start_up(options.file, options.common).path  # its --target is its own: one machine, required
    (target,) = checked_targets([options.target])  # a slice too large, libtpu missing: before JAX starts
    start_jax_quietly()  # the imports below load JAX
    from shardscope.pipeline.layout_compile import hide_own_frames, show_own_frames

    hidden = hide_own_frames()  # its candidates' compiles are kept whoever traces them
    try:
        return _ranked(options, holder, path, target, allowed)
    finally:  # a layouts run in another's process (a test, a notebook) leaves JAX's frames as it found them
        show_own_frames(hidden)


def _ranked(options: LayoutsOptions, holder: dict[str, Sweep], path: Path, target: Target,
            allowed: dict[str, tuple[int, ...]]) -> int:
    """:func:`layouts` once JAX started: the candidates compiled, ranked and printed."""
    from shardscope.config.layout_candidates import candidates
    from shardscope.sources.loading import load_layout_file
    from shardscope.targets.host import ensure_devices
    from shardscope.pipeline.layout_pool import default_workers
    from shardscope.targets.registry import load_target

    devices = load_target(target)
    ensure_devices(devices.count)  # before the file builds anything: each candidate's mesh is over these
    with contextlib.redirect_stdout(sys.stderr):  # what the file prints stays off the ranking
        layout_file = load_layout_file(path)
    function = _function(layout_file.functions, options.function, path)
    tried = candidates(devices.count, function.spec.axes, _options(function, options.options), allowed)
    workers = min(options.workers or default_workers(), len(tried))
    sweep = Sweep(function, str(target), len(tried), workers)
    holder["sweep"] = sweep
    with contextlib.redirect_stdout(sys.stderr):
        for _ in _compiled(sweep, path, devices, tried, workers):  # each kept before its progress line
            pass
    ranking = sweep.ranking()
    print_ranking(ranking, options.common.json)
    return 0 if ranking.pick is not None else 1


def _compiled(sweep: Sweep, path: Path, devices: object, tried: Sequence[Candidate],
              workers: int) -> Iterator["CompiledCandidate"]:
    """Each candidate's result as it is made, with progress on stderr."""
    from shardscope.pipeline.layout_pool import CandidatePool, SweepJob, compile_here
    from shardscope.render.layout_progress import progress

    if workers > 1:
        pool = CandidatePool(SweepJob(path.resolve(), sweep.function.name, sweep.target, tuple(tried)), workers)
        sweep.pool = pool
        made = pool.results()
    else:
        made = compile_here(sweep.function, devices, tried)  # type: ignore[arg-type]  # the loaded TargetDevices
    yield from progress(made, len(tried), workers, keep=sweep.add)


def print_ranking(ranking: "LayoutRanking", as_json: bool) -> None:
    """The ranking on stdout: the table and the pick, or one JSON object."""
    from shardscope.render.console import stdout_console
    from shardscope.render.json_values import finite
    from shardscope.render.layouts import layouts_json, render_layouts

    if as_json:
        print(json.dumps(finite(layouts_json(ranking)), allow_nan=False), flush=True)
    else:
        render_layouts(ranking, stdout_console())
    sys.stdout.flush()


def _function(functions: dict[str, "LayoutFunction"], name: str | None, path: Path) -> "LayoutFunction":
    """The function ``-f`` names, or the file's only one."""
    from shardscope.sources.marks import listed_name

    if name is None:
        if len(functions) > 1:
            raise SettingsError(f"{path.name} has {len(functions)} layouts functions: {', '.join(functions)}.",
                                f"name one: shardscope layouts {path} -f {next(iter(functions))} --target ...")
        return next(iter(functions.values()))
    listed = listed_name(functions, name)
    if listed is None:
        raise SettingsError(f"{path.name} has no layouts function {name!r}.", f"available: {', '.join(functions)}")
    return functions[listed]


def _options(function: "LayoutFunction", restricted: Sequence[str]) -> list[tuple[str, tuple[object, ...]]]:
    """The function's options, each restricted to the values ``--option`` names (by their text)."""
    chosen = dict(function.spec.options)
    for text in restricted:
        name, sep, values = text.partition("=")
        if not sep or name not in chosen:
            raise SettingsError(f"--option {text!r}: {function.name} has no option {name!r}."
                                if sep else f"--option {text!r} is not NAME=V1,V2.",
                                f"its options: {', '.join(chosen) or 'none'}")
        wanted = {v.strip() for v in values.split(",") if v.strip()}
        kept = tuple(v for v in chosen[name] if str(v) in wanted)
        if not kept:
            raise SettingsError(f"--option {text!r}: none of {', '.join(sorted(wanted))} is among {name}'s values.",
                                f"{name} takes {', '.join(map(str, chosen[name]))}")
        chosen[name] = kept
    return list(chosen.items())
