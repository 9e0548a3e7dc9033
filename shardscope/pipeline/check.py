"""``shardscope check FILE``: the findings of every program in a file, as a CI lint.

A program file's ``@shardscope.program`` functions are inspected as they are; a demo file's
``@shardscope.demo`` functions are checked through their naive and deferred plans (the naive
plan flags, the deferred plan passes). Every program is traced and compiled (nothing runs):
the findings are the compiled plan's (what XLA runs, the partitioner's collectives too) joined
with the jaxpr's, each collective once. The CPU device count must already be set.
"""

from __future__ import annotations

from pathlib import Path

from shardscope.engine.inspection import Inspection, inspect_program
from shardscope.pipeline.gc_pause import paused
from shardscope.pipeline.run import analyze
from shardscope.plans.settings import DEFAULT_DEVICES, Settings
from shardscope.sources.demos import DemoFile, DemoFunction
from shardscope.sources.loading import import_file, marked_functions, require_file
from shardscope.sources.programs import CLI_DEBUG, ProgramFunction, no_program_error, pick

EXIT_CLEAN, EXIT_FLAGGED = 0, 1


def check_file(path: Path, function: str | None = None, devices: int | None = None) -> list[Inspection]:
    """The :class:`~shardscope.engine.inspection.Inspection` of each program (or demo plan) in ``path``.

    ``devices`` is the mesh size of a demo's plans (default: the demo's own mesh, else the
    report's default); program files build their own meshes. The command owns the process: the
    programs are read with the collector paused (:mod:`shardscope.pipeline.gc_pause`).
    """
    path = require_file(path)
    module, _ = import_file(path)
    programs, demos = marked_functions(module, path)
    if not programs and not demos:
        raise no_program_error(path)
    with paused():
        if programs:
            return [_program(p) for p in pick(programs, function, path)]
        return [ins for demo in pick(demos, function, path) for ins in _demo_plans(path, demo, devices)]


def _program(function: ProgramFunction) -> Inspection:
    """A program file's function traced and compiled on its example arguments."""
    return inspect_program(function.fn, function.spec.args, function.spec.kwargs, function.name, CLI_DEBUG)


def _demo_plans(path: Path, demo: DemoFunction, devices: int | None) -> list[Inspection]:
    """A demo's plans, each as an inspection named ``demo[plan]`` (traced and compiled, not run)."""
    # without --devices, a demo's own mesh (its mesh=, or one its param_specs name) is used
    settings = Settings(path=path, function=demo.name, devices=devices or DEFAULT_DEVICES, demo_mesh=devices is None)
    loaded = DemoFile(path=path, functions={demo.name: demo}, fingerprint="")
    analysis = analyze(settings, loaded=loaded, measure=False, compile=True, graphs=False)
    return [
        Inspection(f"{demo.name}[{name}]", plan.program, plan.collectives, plan.trace_s, plan.compiled, plan.compile_s)
        for name, plan in analysis.plans.items()
    ]


def exit_code(inspections: list[Inspection]) -> int:
    """1 when any loop runs a collective it need not (deferrable or loop-invariant in the compiled
    plan or the jaxpr: a collective and the instruction it compiles to count once), else 0."""
    return EXIT_FLAGGED if any(ins.flagged for ins in inspections) else EXIT_CLEAN
