"""``shardscope check FILE``: the findings of every program in a file, as a CI lint.

A program file's ``@shardscope.program`` functions are inspected as they are; a demo file's
``@shardscope.demo`` functions are checked through their naive and deferred plans (the naive
plan flags, the deferred plan passes). The CPU device count must already be set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardscope.plans.settings import DEFAULT_DEVICES

EXIT_CLEAN, EXIT_FLAGGED = 0, 1


def check_file(path: Path, function: str | None = None, devices: int | None = None) -> list[Any]:
    """The :class:`~shardscope.engine.inspection.Inspection` of each program (or demo plan) in ``path``.

    ``devices`` is the mesh size of a demo's plans (default: the demo's own mesh, else the
    report's default); program files build their own meshes.
    """
    from shardscope.sources.demos import import_file, require_file
    from shardscope.sources.programs import marked_functions, no_program_error, pick

    path = require_file(path)
    module, _ = import_file(path)
    programs, demos = marked_functions(module, path)
    if programs:
        return [p.inspect() for p in pick(programs, function, path)]
    if not demos:
        raise no_program_error(path)
    return [ins for demo in pick(demos, function, path) for ins in _demo_plans(path, demo, devices)]


def _demo_plans(path: Path, demo: Any, devices: int | None) -> list[Any]:
    """A demo's plans, each as an inspection named ``demo[plan]`` (traced, not run)."""
    from shardscope.pipeline.analysis import analyze
    from shardscope.sources.demos import DemoFile
    from shardscope.engine.inspection import Inspection
    from shardscope.plans.settings import Settings

    # without --devices, a demo's own mesh (its mesh=, or one its param_specs name) is used
    settings = Settings(path=path, function=demo.name, devices=devices or DEFAULT_DEVICES, demo_mesh=devices is None)
    loaded = DemoFile(path=path, functions={demo.name: demo}, fingerprint="")
    analysis = analyze(settings, demo_file=loaded, measure=False, graphs=False)
    return [
        Inspection(f"{demo.name}[{name}]", plan.program, plan.collectives, plan.trace_s)
        for name, plan in analysis.plans.items()
    ]


def exit_code(inspections: list[Any]) -> int:
    """1 when any loop holds a deferrable or loop-invariant collective, else 0."""
    return EXIT_FLAGGED if any(ins.flagged for ins in inspections) else EXIT_CLEAN


def to_json(path: Path, inspections: list[Any]) -> dict[str, Any]:
    """The ``check --json`` object.

    ``programs`` lists every program checked; with exactly one, its ``function``,
    ``findings`` and ``collectives`` are also at the top level.
    """
    from shardscope.render.findings import finite, inspection_json

    programs = [inspection_json(ins) for ins in inspections]
    result: dict[str, Any] = {"file": str(path), "exit_code": exit_code(inspections), "programs": programs}
    if len(programs) == 1:
        result.update({k: programs[0][k] for k in ("function", "findings", "collectives")})
    return finite(result)


def render(inspections: list[Any], console: Any) -> None:
    """Each program's findings table and fixes, then one line with the outcome."""
    for ins in inspections:
        console.print(ins)
        console.print()
    flagged = [ins.function for ins in inspections if ins.flagged]
    if flagged:
        console.print(f"check failed: {', '.join(flagged)}: collectives in loops that need not be there.",
                      style="bold red", highlight=False)
    else:
        console.print("check passed: every collective inside a loop is needed there.", style="bold green",
                      highlight=False)

