"""``shardscope check``'s output: each program's findings and one line with the outcome, or one JSON object."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardscope.pipeline.check import exit_code
from shardscope.render.findings import inspection_json
from shardscope.render.json_values import finite

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.engine.inspection import Inspection


def to_json(path: Path, inspections: list[Inspection]) -> dict[str, Any]:
    """The ``check --json`` object.

    ``programs`` lists every program checked; with exactly one, its ``function``,
    ``findings``, ``collectives`` and ``compiled_collectives`` are also at the top level.
    """
    programs = [inspection_json(ins) for ins in inspections]
    result: dict[str, Any] = {"file": str(path), "exit_code": exit_code(inspections), "programs": programs}
    if len(programs) == 1:
        result.update({k: programs[0][k] for k in ("function", "findings", "collectives", "compiled_collectives")})
    return finite(result)


def render(inspections: list[Inspection], console: Console) -> None:
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

