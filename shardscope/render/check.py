"""``shardscope check``'s output: each program's findings and one line with the outcome, or one JSON object."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from shardscope.pipeline.check import ProgramWhatIf, exit_code
from shardscope.render import what_if
from shardscope.render.console import print_verbatim
from shardscope.render.findings import inspection_json
from shardscope.render.json_values import finite

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.engine.inspection import Inspection


def to_json(path: Path, inspections: list[Inspection], what_ifs: list[ProgramWhatIf] | None = None) -> dict[str, Any]:
    """The ``check --json`` object.

    ``programs`` lists every program checked; with exactly one, its ``function``,
    ``findings``, ``collectives`` and ``compiled_collectives`` are also at the top level. With
    ``--what-if`` each program has ``what_if``: one object per rewrite
    (:func:`shardscope.render.what_if.rewrite_json`), null for a demo plan (not rewritten), with
    ``what_if_note`` saying why it is null or empty when it is.
    """
    programs = [inspection_json(ins) for ins in inspections]
    for ins, program, found in zip(inspections, programs, what_ifs or (), strict=False):
        program["what_if"] = None if found.measured is None else what_if.to_json(ins, found.measured)
        program["what_if_note"] = found.failure or (what_if.NOT_A_PROGRAM if found.measured is None else None)
    result: dict[str, Any] = {"file": str(path), "exit_code": exit_code(inspections), "programs": programs}
    if len(programs) == 1:
        result.update({k: programs[0][k] for k in ("function", "findings", "collectives", "compiled_collectives")})
    return finite(result)


def _render_what_if(inspection: Inspection, found: ProgramWhatIf, console: Console) -> None:
    """One program's what-if: prose wrapped as the console wraps it, the patch verbatim."""
    if found.failure:
        blocks = [what_if.Block((f"what if: {inspection.function}: {found.failure}",))]
    else:
        blocks = what_if.blocks(inspection, found.measured)
    for block in blocks:
        text = "\n".join(block.lines)
        if block.verbatim:
            print_verbatim(console, text)
        else:
            console.print(Text(text))
    console.print()


def render(inspections: list[Inspection], console: Console, what_ifs: list[ProgramWhatIf] | None = None) -> None:
    """Each program's findings table and fixes (and its what-if), then one line with the outcome."""
    for k, ins in enumerate(inspections):
        console.print(ins)
        console.print()
        if what_ifs is not None:
            _render_what_if(ins, what_ifs[k], console)
    flagged = [ins.function for ins in inspections if ins.flagged]
    if flagged:
        console.print(f"check failed: {', '.join(flagged)}: collectives in loops that need not be there.",
                      style="bold red", highlight=False)
    else:
        console.print("check passed: every collective inside a loop is needed there.", style="bold green",
                      highlight=False)

