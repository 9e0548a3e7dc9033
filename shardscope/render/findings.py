"""Renderings of an :class:`~shardscope.engine.joined.inspection.Inspection`: rich table, plain text, HTML, JSON.

Every rendering lists :attr:`Inspection.paired`: each compiled collective once, with the jaxpr
equations it comes from, then the jaxpr collectives the compiled module has no instruction for
(dead ones shown as such, never counted as runs).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from shardscope.engine.counts import Runs, count_text, runs_per_call, total_executions
from shardscope.render.partitioner import warning_json, warning_lines
from shardscope.render.theme import THEME, Themed
from shardscope.verdict_kinds import DEAD, style_of

if TYPE_CHECKING:
    from rich.console import Group, RenderableType
    from rich.table import Table
    from shardscope.engine.hlo.paired import PairedCollective
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.engine.jaxpr.dataflow import Collective

def trips_text(counts: tuple) -> str:
    """``2 x 8``, ``? x 4`` for a while loop, ``-`` outside loops."""
    return " x ".join("?" if t is None else str(t) for t in counts) or "-"


def runs_text(c: Runs) -> str:
    """Runs per call: ``16``, ``unknown`` (a while loop), ``≤ 8`` inside a ``cond`` branch."""
    text = "unknown" if c.executions is None else f"{c.executions:,}"
    return f"≤ {text}" if c.in_conditional and c.executions is not None else text


def collectives_run(count: int) -> str:
    """``1 collective runs`` / ``2 collectives run`` (as the explorer words it): a summary counts
    collectives in words, beside its runs per call."""
    return f"{count} collective runs" if count == 1 else f"{count} collectives run"


def collective_cell(c: "PairedCollective") -> str:
    """``all-reduce[data]``: its label (the compiled kind, a dead one's primitive) and the mesh axes
    it spans (``?`` when no axes match)."""
    axes = "?" if c.axes is None else ",".join(c.axes)
    return f"{c.label}[{axes}]"


def collectives_table(collectives: tuple, title: str | None = None) -> Table:
    """A rich table: one row per collective with its value, loops, runs, bytes, author and verdict.

    The source lines, the pairing and the fixes are listed under it (:func:`notes`).
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in COLUMNS:
        table.add_column(column, justify="right" if column in RIGHT_ALIGNED else "left",
                         no_wrap=column not in ("collective", "value"))
    for row in table_rows(collectives):
        *cells, kind = row
        table.add_row(*map(Text, cells), Text(kind, style_of(kind)))
    return table


COLUMNS = ("#", "collective", "value", "loops", "runs/call", "B/call", "by", "verdict")
"""The columns of the findings table, in the text, rich and HTML renderings alike."""
RIGHT_ALIGNED = frozenset({"#", "runs/call", "B/call"})


def table_rows(collectives: tuple) -> list[tuple[str, ...]]:
    """The cells of the findings table, one tuple per collective (the verdict ``-`` outside loops)."""
    return [
        (str(i), collective_cell(c), c.value, trips_text(c.loop_trip_counts), runs_text(c),
         "unknown" if c.bytes_per_call is None else c.bytes_count.text(), c.written_by,
         verdict_cell(c.verdict_kind, c.in_loop, c.verdict_kind == DEAD))
        for i, c in enumerate(collectives, 1)
    ]


def verdict_cell(kind: str, in_loop: bool, dead: bool = False) -> str:
    """A table's verdict cell: ``-`` for a collective outside every loop (no loop to need it),
    on the CPU's table and a target's alike; ``dead`` for one whose verdict is (no instruction
    carries it: the note and ``--json`` say dead too)."""
    return kind if in_loop or dead else "-"


def noted(c: "PairedCollective") -> bool:
    """True for a collective the notes explain: one in a loop, a dead one, one with no
    instruction, a reshard the partitioner adds (the program does not say where it comes from),
    and one the compiler carries in a wider type than the program wrote (its bytes are not the
    program's)."""
    return c.in_loop or c.dead or c.compiled is None or c.compiled.is_reshard or c.compiled.promotion is not None


def notes(collectives: tuple) -> list[str]:
    """One line per collective in a loop (or dead, or unpaired): how the jaxpr's collectives became
    the instruction, its source line, its verdict and the fix."""
    lines = []
    for i, c in enumerate(collectives, 1):
        if not noted(c):
            continue
        if c.dead:
            lines.append(f"#{i} {c.pairing()} ({c.source or 'no source line'})")
            continue
        if not c.in_loop and c.compiled is not None and c.compiled.is_reshard:  # outside loops: what it is for
            lines.append(f"#{i} {c.pairing()}. {reshard_origin(c.compiled)}")
            continue
        if not c.in_loop and c.compiled is not None:  # a promoted sum outside loops: its pairing says so
            lines.append(f"#{i} {c.pairing()} ({c.source or 'no source line'}).")
            continue
        verdict = c.verdict
        line = f"#{i} {c.pairing()} ({c.source or 'no source line'}): {verdict.kind}. {verdict.reason}"
        lines.append(line + (f" Fix: {verdict.fix}" if verdict.fix else ""))
    return lines


def reshard_origin(c: "CompiledCollective") -> str:
    """Where a reshard the partitioner adds comes from: the operation and line whose layout it
    serves (``the reshape at train.py:26 (train_step)``), and that it runs once per call."""
    primitive = c.op_name.split(";", 1)[0].rsplit("/", 1)[-1]
    what = f"the {primitive} at {c.source}" if primitive and c.source else c.source or "an operation with no source line"
    return f"The partitioner adds it for {what}, outside any loop: it runs once per call."


def note_is_flagged(c: "PairedCollective") -> bool:
    """True when ``c``'s note is about work a loop need not do (drawn bold)."""
    return c.flagged


def summary(inspection: "Inspection") -> str:
    """``step: 1 compiled collective (jaxpr: 2 collective equations), 1 inside loops, 4 runs/call; ...``."""
    flagged = inspection.flagged
    if inspection.compiled is None:
        runs = count_text(_live_runs(inspection)).replace("?", "unknown")
        head = (f"{inspection.function}: {len(inspection.collectives)} collective equation(s), "
                f"{len(inspection.findings)} inside loops, {runs_per_call(runs)}")
    else:
        plan = inspection.compiled
        runs = count_text(plan.executed_collectives).replace("?", "unknown")
        if plan.executed_collectives is not None and any(c.in_conditional for c in plan.collectives):
            runs = f"≤ {runs}"  # a cond branch's runs count as if it were always taken
        count = len(plan.collectives)
        head = (f"{inspection.function}: {count} compiled collective{'' if count == 1 else 's'} "
                f"({_jaxpr_words(inspection)}), {len(plan.findings)} inside loops, {runs_per_call(runs)}")
    remats = len(inspection.rematerializations)
    remat = f"; {remats} involuntary full rematerialization{'' if remats == 1 else 's'}" if remats else ""
    if flagged:
        return head + f"; {collectives_run(len(flagged))} in a loop without needing to{remat}."
    return head + f"; none runs in a loop without needing to{remat}."


def _jaxpr_words(inspection: "Inspection") -> str:
    """``jaxpr: 2 collective equations, 1 dead``; ``read from module_0014.jit_step...txt, no jaxpr`` for a dump."""
    if inspection.dumped:
        return f"read from {inspection.dumped}, no jaxpr"
    count = len(inspection.collectives)
    text = f"jaxpr: {count} collective equation{'' if count == 1 else 's'}"
    dead = len(inspection.dead_collectives)
    return text + (f", {dead} dead" if dead else "")


def _live_runs(inspection: "Inspection") -> int | None:
    return total_executions(inspection.live_collectives)


def render_inspection(inspection: "Inspection") -> Themed:
    """The rich renderable: summary line, the table, the notes with the fixes (with the theme's
    named styles, on any console)."""
    from rich.console import Group
    from rich.text import Text

    failing = inspection.flagged or inspection.rematerializations
    parts: list[RenderableType] = [Text(summary(inspection), style="check.failed" if failing else "check.passed")]
    if inspection.mesh_note:  # too few devices, or groups of one: nothing the plan shows is the sharded run's
        parts.insert(0, Text(inspection.mesh_note, style="check.failed"))
    paired = inspection.paired
    if paired:
        parts.append(collectives_table(paired))
    explained = [c for c in paired if noted(c)]
    parts += [Text(line, style="bold" if note_is_flagged(c) else "") for c, line in zip(explained, notes(paired))]
    plan = inspection.compiled
    for warning in plan.partitioner if plan is not None else ():
        lines = warning_lines(warning, plan.collectives if plan is not None else ())
        parts += [Text(line, style="check.failed" if k == 0 else "") for k, line in enumerate(lines)]
    return Themed(Group(*parts))


def to_text(inspection: "Inspection", width: int = 140) -> str:
    """The rendering as plain text (no colours), e.g. for an ``AssertionError``, ``str()`` and
    ``print()``. Never Jupyter's display: in a kernel rich would otherwise send its own output to
    the notebook and leave the text empty."""
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False, force_jupyter=False,
            theme=THEME).print(inspection)
    return buffer.getvalue()


def collective_json(c: "Collective", dead: bool = False) -> dict[str, Any]:
    """The ``check --json`` fields of one jaxpr collective (a dead one runs 0 times per call, its
    verdict ``dead`` as the text's)."""
    return {
        "primitive": c.primitive,
        "axes": list(c.axes),
        "loop_trip_counts": list(c.loop_trip_counts),
        "executions": 0 if dead else c.executions,
        "bytes_per_call": 0 if dead else c.bytes_per_call,
        "verdict": DEAD if dead else c.verdict_kind,
        "source": c.source,
        "value": c.value,
        "fix": None if dead or c.verdict is None else c.verdict.fix,
        "in_conditional": c.in_conditional,
        "auto_axes": [name for name, _ in c.auto_axes],  # typed whole along them: bytes_per_call is at most
        "equation": c.equation_id,
        DEAD: dead,  # the field is named after the verdict: true for one the compiler removes
    }


def compiled_collective_json(p: "PairedCollective", c: "CompiledCollective") -> dict[str, Any]:
    """One compiled collective instruction as ``check --json`` and ``report --json`` list it.

    ``verdict`` and ``fix`` are the ones shown (:attr:`PairedCollective.verdict`); ``equations``
    are the ids of the jaxpr collectives it comes from (``jaxpr_collectives`` in the same object).
    ``c`` is ``p.compiled`` (a paired collective without an instruction is not listed).
    """
    verdict = p.verdict
    return {
        "name": c.name,
        "kind": c.kind,
        "opcode": c.opcode,
        "operands": len(c.operands),
        "values": [op.value for op in c.operands],
        "loop_trip_counts": list(c.loop_trip_counts),
        "loops": [loop.name for loop in c.loops],
        "executions": c.executions,
        "bytes": c.bytes_per_execution,
        "bytes_per_call": c.bytes_per_call,
        "in_conditional": c.in_conditional,
        "axes": None if c.axes is None else list(c.axes),
        "written_by": c.written_by,
        "reshard": c.is_reshard,
        "layout_change": c.layout_change or None,
        "source": p.source,
        "op_name": c.op_name,
        "value": p.value,
        "verdict": verdict.kind,
        "reason": verdict.reason,
        "fix": verdict.fix,
        "flagged": p.flagged,
        "equations": [e.equation_id for e in p.equations],
        "pairing": p.pairing(),
        "promoted": promoted_json(c),
    }


def promoted_json(c: "CompiledCollective") -> dict[str, Any] | None:
    """``{"from": "bf16", "to": "f32", "operands": [...], "bytes": ..., "bytes_per_call": ...}``
    for a sum the compiler carries in a wider type than the program wrote (each operand's own
    type, ``null`` where it was kept; the bytes as written, what a compiler that keeps the
    program's type moves); null when it kept them all."""
    promotion = c.promotion
    if promotion is None:
        return None
    return {"from": promotion[0], "to": promotion[1], "operands": [op.promoted_from or None for op in c.operands],
            "bytes": c.written_bytes_per_execution, "bytes_per_call": c.written_bytes_per_call}


def compiled_json(paired: tuple) -> list[dict[str, Any]]:
    """``compiled_collectives``: one object per compiled collective instruction, in module order."""
    return [compiled_collective_json(p, p.compiled) for p in paired if p.compiled is not None]


def inspection_json(inspection: "Inspection") -> dict[str, Any]:
    """One program's ``check --json`` object.

    ``findings`` and ``collectives`` are the jaxpr's collective equations (in loops, and all of
    them; one no compiled instruction carries, dead or unpaired, has ``"dead": true``, verdict
    ``dead``, and runs 0 times, as the text's row says); ``compiled_collectives`` the compiled
    instructions; ``partitioner_findings`` what the partitioner warned about while compiling
    (each with its ``kind``: ``involuntary-rematerialization``); ``flagged`` counts the collectives ``check`` fails on, each once across the
    two views; ``counts`` and ``jaxpr_counts`` are the runs per call of each compiled kind and
    of each live JAX primitive. ``mesh_note`` is what the text says first of the devices the
    program spans (:attr:`~shardscope.engine.joined.inspection.Inspection.mesh_note`), null for a
    program over the devices it means.
    """
    # the equations no compiled instruction carries: the paired rows' verdict (dead, in the text
    # too), whether the compiler removed them or pairing found none of its own (unpaired_equations)
    dead = {e.equation_id for p in inspection.paired if p.compiled is None and p.verdict_kind == DEAD
            for e in p.equations}
    data = {
        "function": inspection.function,
        "findings": [collective_json(c, c.equation_id in dead) for c in inspection.collectives
                     if c.in_loop and c.equation_id not in dead],
        "collectives": [collective_json(c, c.equation_id in dead) for c in inspection.collectives],
        "flagged": len(inspection.flagged),
        "compiled_collectives": compiled_json(inspection.paired) if inspection.compiled is not None else None,
        "counts": inspection.counts() if inspection.compiled is not None else None,
        "jaxpr_counts": inspection.jaxpr_counts(),
        "executed_collectives": inspection.executed_collectives if inspection.compiled is not None else None,
        "unpaired_equations": [c.equations[0].equation_id for c in inspection.paired
                               if c.compiled is None and not c.dead],
        "partitioner_findings": [warning_json(w) for w in inspection.compiled.partitioner]
        if inspection.compiled is not None else [],
        "mesh_note": inspection.mesh_note or None,
    }
    return data

