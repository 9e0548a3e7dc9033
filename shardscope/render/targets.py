"""A program's plans on ``--target`` slices beside the CPU's: tables, verdicts in words, JSON.

Every rendering reads the :class:`~shardscope.engine.hlo.target_plan.TargetPlan` values the
pipeline made and judged (what the target's compiler did with each CPU collective, each row's
verdict and whether it is a finding, the costs on the target's interconnect); nothing here
compiles, recounts, costs or judges. Nothing runs on a target: its tables say so where timings would be.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from shardscope.engine.hlo.plan_costs import time_words
from shardscope.engine.hlo.roofline import range_words, seconds_words
from shardscope.engine.counts import count_text, known_sum
from shardscope.engine.hlo.target_plan import COMBINED, ENTERED_LOOP, LEFT_LOOP, PIPELINED, REMOVED, STAYED
from shardscope.render.console import table_width
from shardscope.render.findings import compiled_collective_json, render_inspection, trips_text
from shardscope.render.projection import projection_json
from shardscope.verdict_kinds import DEFERRABLE, LOOP_INVARIANT, NEEDED, OF_NAME, style_of

if TYPE_CHECKING:
    from rich.table import Table
    from rich.console import Console, Group

    from shardscope.engine.joined.inspection import Inspection

    from shardscope.costmodel.projection import Projection
    from shardscope.engine.hlo.roofline import StepEstimate
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledLoop, CompiledPlan
    from shardscope.engine.hlo.plan_costs import PlanCosts
    from shardscope.engine.hlo.target_plan import TargetPlacement, TargetPlan, TargetRow
    from shardscope.targets.registry import UnavailableTarget

NOT_RUN = "not run (compiled only)"
"""What a target's table says where the CPU's has timings."""

PLACEMENT_WORDS = {
    STAYED: "stayed in loop", LEFT_LOOP: "left loop", ENTERED_LOOP: "entered loop", COMBINED: "combined",
    PIPELINED: "pipelined", REMOVED: "removed",
}
"""How the tables name what a target did with a CPU collective."""

_PLAN_LOOP_WORDS = "the plan's chunk loop"


def placement_words(p: "TargetPlacement") -> str:
    """``left loop``, ``stayed in loop``, ``left 1 of 2 loops`` ... (``, combined`` when merged)."""
    if p.removed:
        return PLACEMENT_WORDS[REMOVED]
    if p.left and p.stays_in:
        words = f"left {len(p.left)} of {len(p.left) + len(p.stays_in)} loops"
    elif p.left:
        words = PLACEMENT_WORDS[LEFT_LOOP]
    elif p.entered:
        words = PLACEMENT_WORDS[ENTERED_LOOP]
    elif p.collective.in_loop:
        words = PLACEMENT_WORDS[STAYED]
    else:
        words = "outside loops, as on the CPU"
    if p.values_left:
        words += f", {len(p.values_left)} of {len(p.collective.operands)} values left"
    if p.pipelined:
        words += ", pipelined"
    return words + (", combined" if p.combined else "")


def loop_words(loop: "CompiledLoop") -> str:
    """``the plan's chunk loop (2 iterations)``, ``the loop at rnn.py:21 (8 iterations)``."""
    trips = "? iterations" if loop.trip_count is None else f"{loop.trip_count} iteration{'' if loop.trip_count == 1 else 's'}"
    if loop.source == _PLAN_LOOP_WORDS:
        return f"{loop.source} ({trips})"
    return f"the loop at {loop.source} ({trips})" if loop.source else f"{loop.name} ({trips})"


def _what(placements: Iterable["TargetPlacement"]) -> tuple[str, bool]:
    """``all-reduce of params['Wx'] and all-reduce of params['b']`` and whether it is plural."""
    names = [f"{p.collective.kind} of {p.collective.value}" if p.collective.value else _unnamed(p)
             for p in placements]
    words = names[0] if len(names) == 1 else f"{'; '.join(names[:-1])} and {names[-1]}"
    return words, len(names) > 1


def _unnamed(p: "TargetPlacement") -> str:
    """A collective whose value has no name, told apart by its instruction and line:
    ``all-reduce.3 (model.py:12)``."""
    c = p.collective
    name = c.name if c.name.startswith(c.kind) else f"{c.kind} {c.name}"
    return f"{name} ({c.source})" if c.source else name


def plan_verdict(title: str, plan: "TargetPlan") -> str:
    """One sentence: on this target, does the plan's flagged collective leave its loop (the
    compiler defers it already) or stay (the deferral is worth writing)? Read from the judged
    plan's rows: what it names as staying are its findings, what it says leaves runs in no loop
    it need not, and what it keeps is what its verdicts there say the loop needs.

    ``title`` names the plan with its article (``the naive plan``, ``the step program``,
    ``linear's naive plan``).
    """
    on = f"on {plan.topology} {title}"
    if plan.refused:
        assert plan.fit is not None  # a refused plan carries its fit
        return f"{on} {plan.fit.line()}, so it has no plan there; its CPU plan stands."
    findings = {id(row.collective) for row in plan.findings}
    entered = [p for p in plan.comparison.placements if p.entered and not any(id(t) in findings for t in p.target)]
    return _verdict(on, plan) + (_entered_words(entered) if entered else "") + "." + "".join(
        f" {sentence}" for sentence in size_sentences(plan))


def size_sentences(plan: "TargetPlan") -> list[str]:
    """What each collective the verdict judges moves: ``Its all-reduce of out[1] moves 4 B per run,
    4 runs per call; deferring it saves ~24 us per step on gpu:h100:8.`` for one the target keeps
    in a loop, its bytes per run for one the compiler moves out, and for a plan without findings
    the bytes of each collective its loops need."""
    savings = _costs(plan).savings
    flagged = [p for p in plan.comparison.placements if p.collective.verdict.flagged and not p.removed]
    carried = {id(t) for p in flagged for t in p.target}
    alone = _alike([row for row in plan.findings if row.collective is not None and id(row.collective) not in carried])
    if not flagged and not alone:
        return [f"Its {t.kind} of {t.value or t.name} moves {t.bytes_per_execution:,} B per run."
                for t in plan.compiled.findings]
    sentences = []
    unsaved: dict[tuple[int, ...], list["TargetPlacement"]] = {}  # by the target collectives that carry them
    for p in flagged:
        saving = savings.get(p.collective.name)
        if saving is not None:
            what = f"{p.collective.kind} of {saving.values or p.collective.value or p.collective.name}"
            sentences.append(f"Its {what} moves {saving.words()}.")
        else:
            unsaved.setdefault(tuple(id(t) for t in p.target), []).append(p)
    for group in unsaved.values():  # CPU collectives one target collective carries together: one sentence
        names = [f"{p.collective.kind} of {p.collective.value or p.collective.name}" for p in group]
        what = names[0] if len(names) == 1 else f"{'; '.join(names[:-1])} and {names[-1]}"
        together = " together" if len(group) > 1 else ""
        sentences.append(f"Its {what} move{'s' if len(group) == 1 else ''}{together} {_carried_bytes(plan, group)}.")
    for rows in alone:  # findings no CPU finding carries (kept in a loop the CPU leaves, or the target's own)
        t = rows[0].collective
        assert t is not None  # a finding runs in a loop
        each = " each" if len(rows) > 1 else ""
        what = f"{len(rows)} {t.kind}s of {t.value or t.name}" if len(rows) > 1 else f"{t.kind} of {t.value or t.name}"
        sentences.append(f"Its {what} move{'' if each else 's'} {t.bytes_per_execution:,} B per run{each}, "
                         f"{t.runs.text()} runs per call{each}.")
    return sentences


def _carried_bytes(plan: "TargetPlan", group: list["TargetPlacement"]) -> str:
    """What the target's own collectives that carry the CPU collectives of ``group`` (the same
    ones for each) move: ``5,120 B per run``; where the target split them, each part's bytes,
    where it runs and how often (``33,028 B per run in the while body (all-reduce.161, 4 runs per
    call) and 197,760 B per run outside loops (all-reduce.111, 1 run per call, with other
    values)``). A target collective that also carries other CPU collectives' values says so: its
    bytes are theirs too."""
    def shared(t: "CompiledCollective") -> bool:
        return any(all(p is not q for q in group) for p in plan.placements_of(t))

    targets = group[0].target
    if len(targets) == 1:
        (t,) = targets
        return f"{t.bytes_per_execution:,} B per run" + (f" ({t.name}, with other values)" if shared(t) else "")
    return " and ".join(
        f"{t.bytes_per_execution:,} B per run {t.placement} ({t.name}, {t.runs.text()} run{'' if t.executions == 1 else 's'}"
        f" per call{', with other values' if shared(t) else ''})" for t in targets)


def fit_words(plan: "TargetPlan") -> str:
    """``memory: 0.5 of 15.75 GiB per device`` (``does not fit: ...``); empty without a fit."""
    if plan.fit is None:
        return ""
    line = plan.fit.line()
    return line if line.startswith("does not fit") else f"memory: {line}"


def step_words(plan: "TargetPlan") -> str:
    """The step estimate in one line, or why there is none (empty for a refused plan)."""
    step = _costs(plan).step
    if step is not None:
        return step.line()
    if plan.refused:
        return ""
    return f"no step estimate: shardscope has no peaks for {plan.device_kind}"


def _costs(plan: "TargetPlan") -> "PlanCosts":
    """The costs the pipeline gave ``plan`` where it was made (every target plan has them)."""
    assert plan.costs is not None, f"{plan.target}'s plan was made without its costs"
    return plan.costs


def step_cell(step: "StepEstimate | None") -> str:
    """The step estimate waited on in a table cell: ``~5.6 ms``, or its bounds once collectives are
    in it; ``at least`` before it when the module holds instructions the model cannot time."""
    if step is None:
        return "-"
    at_least = "at least " if step.lower_bound else ""
    if step.collectives_s is None:
        return f"{at_least}~{seconds_words(step.seconds)}"
    return f"{at_least}{range_words(step.lower_s, step.upper_s)}"


def plan_notes(plan: "TargetPlan") -> list[tuple[str, str]]:
    """``(text, style)`` of the fit and the step estimate, for every rendering of a target's plan."""
    notes = []
    fit = fit_words(plan)
    if fit and not plan.refused:  # a refused plan's verdict says it
        notes.append((fit, "check.failed" if plan.does_not_fit else ""))
    step = step_words(plan)
    if step:
        notes.append((step, "note" if plan.step is None else ""))
    return notes


def _entered_words(entered: list["TargetPlacement"]) -> str:
    """``; its all-gather of params['w1'] runs in the plan's chunk loop there (outside it on the CPU)``."""
    what, plural = _what(entered)
    loops = sorted({loop_words(loop) for p in entered for loop in p.entered})
    return f"; its {what} run{'' if plural else 's'} in {' and '.join(loops)} there (outside loops on the CPU)"


def _verdict(on: str, plan: "TargetPlan") -> str:
    """The verdict on what the target's compiler leaves in its loops, row by row by the target's
    own verdicts, without the final full stop."""
    findings, moved, kept = plan.findings, plan.moved, plan.kept
    if not findings:
        if not moved:
            return f"{on} keeps {_kept_words(kept)}" if kept else f"{on} runs no collective in a loop"
        what, plural = _moved_what(moved)
        text = f"{on}'s {what} leave{'' if plural else 's'} the loop: the compiler already does the deferral here"
        return text + (f"; it keeps {_kept_words(kept, its=True)}" if kept else "")
    staying = list(dict.fromkeys(p for row in findings for p in row.staying))  # by placement, as the CPU names them
    names = [f"{p.collective.kind} of {', '.join(p.staying_values)}" for p in staying]
    alone = _alike([row for row in findings if not row.staying])
    names += [_finding_name(rows) for rows in alone]
    plural = len(names) > 1 or any(len(p.staying_values) > 1 for p in staying) or any(len(rows) > 1 for rows in alone)
    what = names[0] if len(names) == 1 else f"{'; '.join(names[:-1])} and {names[-1]}"
    loops = sorted({loop_words(loop) for row in findings if row.collective is not None for loop in row.collective.loops})
    kinds = {row.verdict_kind for row in findings}
    fix = ("the deferral is" if kinds == {DEFERRABLE} else "the hoist is" if kinds == {LOOP_INVARIANT}
           else "the fixes are")  # a sum deferred past its loop, an invariant moved before it
    text = f"{on}'s {what} stay{'' if plural else 's'} in {' and '.join(loops)}: {fix} worth writing"
    split = [v for p in staying for v in p.values_left if v not in p.staying_values]
    if split:  # the compiler split a combined sum: some of its values left already
        text += f" (the compiler moves {', '.join(dict.fromkeys(split))} out itself)"
    if moved:
        left, plural = _moved_what(moved)
        text += f"; its {left} leave{'' if plural else 's'} the loop"
    disagreeing = [row for row in kept if _cpu_flagged(row)]
    if disagreeing:  # the CPU's finding the target keeps in its loop by its own verdict there
        text += f"; it keeps {_kept_words(tuple(disagreeing), its=True)}"
    return text


def _alike(rows: "Sequence[TargetRow]") -> list[list["TargetRow"]]:
    """``rows`` grouped by what a sentence says of them (their kind, value, bytes per run, runs and
    whether the CPU runs them outside loops), in their order: seven collective-permutes of one
    value are one phrase."""
    groups: dict[tuple[object, ...], list["TargetRow"]] = {}
    for row in rows:
        t = row.collective
        assert t is not None  # a finding runs in a loop
        key = (t.kind, t.value or t.name, t.bytes_per_execution, t.runs.text(), bool(row.cpu) and row.entered)
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _finding_name(rows: "list[TargetRow]") -> str:
    """``all-gather of params['w1']``, ``7 collective-permutes of w``: findings no CPU finding names
    (one the CPU runs outside every loop says so; one only the target has is named by its own
    instruction)."""
    t = rows[0].collective
    assert t is not None  # a finding runs in a loop
    name = (f"{len(rows)} {t.kind}s of {t.value or t.name}" if len(rows) > 1
            else f"{t.kind} of {t.value}" if t.value else t.name)
    return name + (" (outside loops on the CPU)" if rows[0].cpu and rows[0].entered else "")


def _cpu_flagged(row: "TargetRow") -> bool:
    """True when a CPU collective this row carries is a finding on the CPU (the target's verdict
    there says its loop needs it)."""
    return any(p.collective.verdict.flagged for p in row.cpu)


def staying_fixes(plan: "TargetPlan") -> list[str]:
    """The target's own fix of each collective it keeps in a loop that need not run there (the
    loss's sum the compiler left, not the CPU's fix of the gradients it moved out itself): each
    finding's, from its verdict there (its runs are the target's)."""
    if plan.refused:
        return []
    staying = [t for p in plan.staying_findings for t in p.staying_in]
    rows = {id(row.collective): row for row in plan.findings}
    ordered = [rows[id(t)] for t in staying if id(t) in rows] + list(plan.findings)
    unique: dict[str, str] = {}
    for row in ordered:
        t, verdict = row.collective, row.verdict
        if t is not None and verdict is not None and verdict.fix and t.name not in unique:
            unique[t.name] = f"fix on {plan.topology} for its {t.kind} of {t.value or t.name}: {verdict.fix}"
    return list(unique.values())


def _kept_words(kept: "tuple[TargetRow, ...]", its: bool = False) -> str:
    """``1 collective in a loop, needed there (as on the CPU)``, or ``its all-reduce of out[2] in a
    loop, needed there`` (``its``: after what the compiler moved, named up to three), each verdict's
    words when they are not all ``needed``, and what the CPU said of them where it flagged them."""
    there = _there(kept)
    if its and len(kept) <= 3:
        names = [f"{row.collective.kind} of {row.collective.value}" if row.collective.value else row.collective.name
                 for row in kept if row.collective is not None]
        text = f"its {' and '.join(names)} in {'loops' if len(kept) > 1 else 'a loop'}, {there}"
    else:
        text = f"{len(kept)} collective{'s' if len(kept) > 1 else ''} in {'loops' if its else 'a loop'}, {there}"
    return text + _cpu_side(kept, as_on_cpu=not its)


def _there(kept: "tuple[TargetRow, ...]") -> str:
    """``needed there``, or each verdict's words with its count when the kept rows' differ."""
    kinds = list(dict.fromkeys(row.verdict_kind for row in kept))
    if len(kinds) == 1:
        return OF_NAME.get(kinds[0], OF_NAME[NEEDED]).there
    return ", ".join(f"{sum(row.verdict_kind == kind for row in kept)} {OF_NAME[kind].there}" for kind in kinds
                     if kind in OF_NAME)


def _cpu_side(kept: "tuple[TargetRow, ...]", as_on_cpu: bool = True) -> str:
    """The CPU's verdicts where they flag what the target keeps (`` (loop_invariant on the CPU)``,
    or `` (1 of them deferrable on the CPU)`` where only some carry a CPU finding);
    else `` (as on the CPU)`` (``as_on_cpu``) when the CPU runs every one in a loop with the same
    verdict; else nothing."""
    flagged = {kind: sum(any(p.collective.verdict.kind == kind for p in row.cpu) for row in kept)
               for kind in sorted({p.collective.verdict.kind for row in kept for p in row.cpu
                                   if p.collective.verdict.flagged})}
    if list(flagged.values()) == [len(kept)]:
        return f" ({next(iter(flagged))} on the CPU)"
    if flagged:  # some of them: how many carry each kind of CPU finding
        counts = [f"{count} {kind}" for kind, count in flagged.items()]
        return f" ({counts[0].replace(' ', ' of them ', 1)}{''.join(', ' + c for c in counts[1:])} on the CPU)"
    same = all(row.cpu and all(p.collective.in_loop and p.collective.verdict.kind == row.verdict_kind for p in row.cpu)
               for row in kept)
    return " (as on the CPU)" if same and as_on_cpu else ""


def _moved_what(moved: Sequence["TargetPlacement"]) -> tuple[str, bool]:
    """The CPU findings the target no longer keeps where they need not run, in words: of a
    combined one the target split, the values that left (the rest stay, needed there)."""
    names = [f"{p.collective.kind} of {', '.join(p.values_left)}" if p.values_left else
             (f"{p.collective.kind} of {p.collective.value}" if p.collective.value else _unnamed(p)) for p in moved]
    plural = len(names) > 1 or any(len(p.values_left) > 1 for p in moved)
    return (names[0] if len(names) == 1 else f"{'; '.join(names[:-1])} and {names[-1]}"), plural


def row_cells(row: "TargetRow") -> dict[str, str]:
    """The row's text by column: ``collective``, ``value``, ``loops``, ``runs/call``,
    ``verdict``, ``CPU collective``, ``CPU loops``, ``CPU runs``, ``placement``."""
    t = row.collective
    names = [p.collective.name if any(p is f for f in row.first) else f"part of {p.collective.name}"
             for p in row.cpu]
    return {
        "collective": t.name if t is not None else "-",
        "value": row.value,
        "loops": trips_text(t.loop_trip_counts) if t is not None else "-",
        "runs/call": t.runs.text() if t is not None else "-",
        "verdict": row.verdict_kind,
        "CPU collective": ", ".join(names) or "-",
        "CPU loops": trips_text(row.first[0].collective.loop_trip_counts) if row.first else "",
        "CPU runs": _cpu_runs(row.first) if row.first else "",
        "placement": "; ".join(placement_words(p) if any(p is f for f in row.first) else _part_words(row, p)
                               for p in row.cpu) or "only on the target",
    }


def _part_words(row: "TargetRow", p: "TargetPlacement") -> str:
    """What the target did with the values of ``p`` this row carries (``p`` is carried first
    by another row): ``grad(params['ln']) left 1 of 2 loops``."""
    assert row.collective is not None  # a removed collective's row carries it first
    values = ", ".join(p.values_in(row.collective)) or p.collective.value
    cpu, here = len(p.collective.loops), len(row.collective.loops)
    moved = "left loop" if not here else f"left {cpu - here} of {cpu} loops" if here < cpu else "stayed in loop"
    return f"{values} {moved}"


def _cpu_runs(placements: tuple["TargetPlacement", ...]) -> str:
    runs = known_sum(p.collective.executions for p in placements)
    return "unknown" if runs is None else f"{runs:,}"


TABLE_COLUMNS = ("collective", "value", "loops", "runs/call", "verdict", "CPU collective", "CPU loops", "CPU runs",
                 "placement")
"""The columns of a target's table: the target's collective, then the CPU's it carries."""


def placements_table(rows: list[tuple[str, "TargetPlan"]], noun: str, columns: Sequence[str] = TABLE_COLUMNS,
                     title: str = "each collective the target runs, and the CPU's it carries") -> Table:
    """Every collective each ``(name, plan)`` runs on the target, with its verdict there and the
    CPU collectives it carries (and the CPU collectives the target removed); ``columns`` of
    :data:`TABLE_COLUMNS` only, under ``title``, for one of :func:`placements_tables`' halves."""
    from rich.table import Table
    from rich.text import Text

    target = rows[0][1].target
    table = Table(title=f"{target}: {title}", title_justify="left", pad_edge=False)
    for column in (noun, *columns):
        table.add_column(column, justify="right" if "runs" in column else "left", no_wrap=column != "value")
    for name, plan in rows:
        for row in plan.rows:
            cells = row_cells(row)
            style = "check.failed" if row.finding else ""  # the theme's named style, on each cell (never the row's)
            table.add_row(Text(name, style), *(Text(cells[column], style) for column in columns))
    return table


TARGET_SIDE = ("collective", "value", "loops", "runs/call", "verdict")
CPU_SIDE = ("collective", "CPU collective", "CPU loops", "CPU runs", "placement")
"""The two halves of :data:`TABLE_COLUMNS` when one table is too wide: each keeps the target's
collective, so a row of the second is found by the first's name."""


def placements_tables(rows: list[tuple[str, "TargetPlan"]], noun: str, width: int,
                      console: "Console") -> list[Table]:
    """:func:`placements_table`, or where it is wider than ``width`` columns (a CI log's page,
    a narrow terminal), its two halves: what the target runs, then the CPU's collectives each
    one carries."""
    whole = placements_table(rows, noun)
    if console.measure(whole).maximum <= width:
        return [whole]
    return [placements_table(rows, noun, TARGET_SIDE, "each collective the target runs"),
            placements_table(rows, noun, CPU_SIDE, "the CPU's collectives each one carries")]


def _memory(memory: dict[str, int] | None, key: str) -> str:
    return "-" if not memory or key not in memory else f"{memory[key]:,} B"


def _compiled_summary(plan: "CompiledPlan") -> str:
    return f"{len(plan.collectives)} ({len(plan.findings)} in while)"


def targets_of(named_plans: Iterable[tuple[str, Any]]) -> list[str]:
    """The targets the plans were compiled for, in the order given."""
    return list(dict.fromkeys(t.target for _, result in named_plans for t in result.targets))


def target_table(target: str, named: list[tuple[str, Any]]) -> Table:
    """One column per plan on ``target``: its compiled collectives, runs, bytes and memory per
    device beside the CPU's; where the CPU's table has timings, it says the target ran nothing."""
    from rich.table import Table
    from rich.text import Text

    columns = [(name, result, next(t for t in result.targets if t.target == target)) for name, result in named]
    first = columns[0][2]
    by = f"{first.compiler}'s plan, " if first.compiler else ""
    table = Table(title=f"{target}: {first.devices} x {first.device_kind} ({by}compiled for, never run: no timings)",
                  title_justify="left")
    table.add_column("")
    for name, _, _ in columns:
        table.add_column(Text(name), justify="right")
    rows = (
        # a plan the target's compiler refused for memory has no compiled module to count
        ("compiled collectives", lambda r, t: "-" if t.refused else _compiled_summary(t.compiled)),
        ("  compiled runs per call", lambda r, t: "-" if t.refused else count_text(t.compiled.executed_collectives)),
        ("  runs per call on the CPU", lambda r, t: "-" if r.compiled is None else count_text(r.compiled.executed_collectives)),
        ("compile for the target", lambda r, t: f"{t.compile_s:.3f} s"),
        ("run median", lambda r, t: NOT_RUN),
        ("memory/device: arguments", lambda r, t: _memory(t.memory, "argument_size_in_bytes")),
        ("  on the CPU", lambda r, t: _memory(t.cpu_memory, "argument_size_in_bytes")),
        ("memory/device: temporaries", lambda r, t: _memory(t.memory, "temp_size_in_bytes")),
        ("  on the CPU", lambda r, t: _memory(t.cpu_memory, "temp_size_in_bytes")),
        ("memory/device: peak", lambda r, t: _memory(t.memory, "peak_memory_in_bytes")),
        ("fits in memory", lambda r, t: fit_words(t).removeprefix("memory: ") or "-"),
        ("step estimate", lambda r, t: step_cell(_costs(t).step)),
    )
    for label, cell in rows:
        table.add_row(label, *(cell(result, plan) for _, result, plan in columns))
    return table


def render_targets(named: list[tuple[str, str, Any]], console: "Console", noun: str,
                   projections: "dict[str, Projection] | None" = None) -> None:
    """For each target: the plans' table, each CPU collective's placement, one verdict per plan,
    and the projection of its compiled collectives where ``projections`` has one.

    ``named`` holds ``(name, title, result)``: a result (a plan's or a program's) has
    ``targets`` and ``compiled``.
    """
    from rich.text import Text

    pairs = [(name, result) for name, _, result in named]
    for target in targets_of(pairs):
        console.print(target_table(target, pairs))
        rows = [(name, next(t for t in result.targets if t.target == target)) for name, result in pairs]
        for table in placements_tables(rows, noun, table_width(console), console):
            console.print(table)
        for (name, title, _), (_, plan) in zip(named, rows):
            console.print(Text(plan_verdict(title, plan), style=outcome_style(plan)))
            for fix in staying_fixes(plan):
                console.print(Text(f"  {name}: {fix}"))
            for note, style in plan_notes(plan):
                console.print(Text(f"  {name}: {note}", style=style))
        said = interconnect_sentence(target, rows)
        if said:
            console.print(Text(said))
        projection = (projections or {}).get(target)
        if projection is not None:  # a ring of the user's own (--project, --link)
            console.print(Text(projection_sentence(target, projection)))


def interconnect_sentence(target: str, rows: list[tuple[str, "TargetPlan"]]) -> str:
    """``tpu:v5e:2x4's compiled collectives on its own interconnect (ICI of a v5e 2x4 slice ...):
    naive 139.8 us/call, deferred 69.9 us/call ...``; empty without a model for the target."""
    interconnect = _costs(rows[0][1]).interconnect
    if interconnect is None:
        return ""
    per_plan = []
    for name, plan in rows:
        seconds = _costs(plan).seconds_per_call
        per_plan.append(f"{name} {'?' if seconds is None else time_words(seconds)}/call")
    return (f"{target}'s compiled collectives on its own interconnect ({interconnect.description}): "
            f"{', '.join(per_plan)} (communication alone; figures and sources: shardscope presets --targets).")


def outcome_style(plan: "TargetPlan") -> str:
    """The theme's style of a plan's verdict sentence: a failed check's, or a passed one's."""
    return "check.failed" if plan.fails_check else "check.passed"


def target_view(inspection: "Inspection", plan: "TargetPlan") -> "Inspection":
    """``inspection`` as made for ``plan``'s target alone: its compiled plan the target's (what the
    renderings of an inspection made for a target show first)."""
    return replace(inspection, compiled=plan.compiled, targets=(), shown_on="")


def render_on_target(inspection: "Inspection", plans: "Sequence[TargetPlan]") -> "Group":
    """An inspection made for targets (``inspect_on``): each target's plan, its findings, its
    verdict, memory and step estimate first, then the CPU's, each under a line that says whose
    plan it is."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = []  # rich renderables
    for plan in plans:
        parts += [
            Text(target_heading(plan), style="bold"),
            render_inspection(target_view(inspection, plan)),
            Text(plan_verdict(f"the {inspection.function} program", plan), style=outcome_style(plan)),
            *(Text(f"  {note}", style=style) for note, style in plan_notes(plan)),
            Text()]
    return Group(*parts, Text(CPU_HEADING, style="bold"), render_inspection(inspection))


def target_heading(plan: "TargetPlan") -> str:
    """``on tpu:v5e:2x4: XLA:TPU's plan (8 x TPU v5 lite, compiled for, never run there)``."""
    return (f"on {plan.target}: {plan.compiler or 'the target'}'s plan ({plan.devices} x {plan.device_kind}, "
            "compiled for, never run there)")


CPU_HEADING = ("on the CPU: XLA:CPU's plan of the same program (the simulated CPU devices here, where it runs and "
               "is timed)")
"""The line over the CPU's plan when targets' plans come first."""


def shown_plans(inspection: "Inspection") -> "tuple[TargetPlan, ...]":
    """The target plans an inspection prints before the CPU's: the one it was made for, else
    every target it was compiled for (``inspect_on`` with several)."""
    shown = inspection.shown_plan
    return (shown,) if shown is not None else tuple(inspection.targets)


def projection_sentence(target: str, projection: "Projection") -> str:
    """``tpu:v5e:2x2's compiled collectives projected onto link (...): naive 12 us/call, ...``."""
    from shardscope.render.projection import seconds_text, title

    per_plan = ", ".join(f"{name} {seconds_text(plan)}/call" for name, plan in projection.plans.items())
    return f"{target}'s compiled collectives (what its compiler runs) {title(projection)}: {per_plan}."


# --------------------------------------------------------------------------- JSON


def placement_json(p: "TargetPlacement") -> dict[str, Any]:
    """What the target did with one CPU collective."""
    return {
        "cpu_collective": p.collective.name,
        "value": p.collective.value,
        "change": p.change,
        "values_left": list(p.values_left),
        "staying_values": list(p.staying_values),
        "placement": placement_words(p),
        "target_collectives": [t.name for t in p.target],
        "left_loops": [loop.name for loop in p.left],
        "stays_in_loops": [loop.name for loop in p.stays_in],
        "combined": p.combined,
        "pipelined": p.pipelined,
        "executions": p.executions,
        "cpu_executions": p.collective.executions,
        "deferred_by_compiler": p.deferred_by_compiler,
    }


def target_plan_json(title: str, plan: "TargetPlan") -> dict[str, Any]:
    """One plan on one target: its compiled collectives (the CPU compiled plan's fields and
    ``left_loop``), memory and cost per device, each CPU collective's placement, the verdict."""
    costs = _costs(plan)
    collectives = []
    for p in plan.paired:
        if p.compiled is None:
            continue
        fields = compiled_collective_json(p, p.compiled)
        fields["left_loop"] = plan.left_loop(p.compiled)
        fields["carries"] = [placement.collective.name for placement in plan.placements_of(p.compiled)]
        timed = next((time for c, time in zip(plan.compiled.collectives, costs.run_times) if c is p.compiled), None)
        fields["interconnect"] = None if timed is None else {
            "seconds_per_run": timed.seconds, "latency_s": timed.latency_s, "bandwidth_s": timed.bandwidth_s,
            "algorithm": timed.algorithm, "devices": timed.devices}
        collectives.append(fields)
    placements = [placement_json(p) | {"saving": costs.savings[p.collective.name].to_json()
                                       if p.collective.name in costs.savings else None}
                  for p in plan.comparison.placements]
    return {
        "compiled_collectives": collectives,
        "interconnect_s_per_call": costs.seconds_per_call,
        "savings": [saving.to_json() for saving in costs.savings.values()],
        "compiled_executed_collectives": None if plan.refused else plan.compiled.executed_collectives,
        "memory": dict(plan.memory),
        "cpu_memory": dict(plan.cpu_memory),
        "cost_analysis": dict(plan.cost),
        "compile_s": plan.compile_s,
        "placements": placements,
        "staying_findings": [p.collective.name for p in plan.staying_findings],
        "findings": [row.collective.name for row in plan.findings if row.collective is not None],
        "fails_check": plan.fails_check,
        "verdict": plan_verdict(title, plan),
        "fit": None if plan.fit is None else plan.fit.to_json(),
        "step_estimate": None if costs.step is None else costs.step.to_json(),
    }


def interconnect_json(plan: "TargetPlan") -> dict[str, Any] | None:
    """The ``interconnect`` object of a target: the machine in words and the figures' sources."""
    interconnect = _costs(plan).interconnect
    if interconnect is None:
        return None
    return {"description": interconnect.description, "source": interconnect.source,
            "device_coords": [list(c) for c in interconnect.device_coords]}


def unavailable_targets_json(unavailable: Sequence["UnavailableTarget"]) -> list[dict[str, str | None]]:
    """``[{"target", "error", "hint"}]``: each ``--target`` that could not be compiled for beside
    others that were (``check --json`` and ``report --json`` alike)."""
    return [{"target": str(u.target), "error": u.message, "hint": u.hint} for u in unavailable]


def targets_json(named: list[tuple[str, str, Any]], projections: "dict[str, Projection] | None" = None) -> dict[str, Any]:
    """``{TARGET: {"devices", "device_kind", "topology", "variants": {NAME: ...}, "projection"}}``
    of ``(name, title, result)``s; ``projection`` (null without one) projects the target's
    compiled collectives."""
    data: dict[str, Any] = {}
    for name, title, result in named:
        for plan in result.targets:
            entry = data.setdefault(plan.target, {"compiler": plan.compiler, "devices": plan.devices, "device_kind": plan.device_kind,
                                                  "topology": plan.topology, "variants": {}, "projection": None,
                                                  "interconnect": interconnect_json(plan)})
            entry["variants"][name] = target_plan_json(title, plan)
    for target, projection in (projections or {}).items():
        if target in data:
            data[target]["projection"] = projection_json(projection)
    return data


def merged_targets(parts: "Iterable[dict[str, Any]]") -> dict[str, Any]:
    """The :func:`targets_json` of several groups of plans from each group's own, in order (each
    target's first entry gives its fields, a later plan of the same name replaces an earlier):
    ``check --json`` lists each program's targets, then all of them, each plan rendered once."""
    data: dict[str, Any] = {}
    for part in parts:
        for target, entry in part.items():
            if target in data:
                data[target]["variants"].update(entry["variants"])
            else:
                data[target] = {**entry, "variants": dict(entry["variants"])}
    return data
