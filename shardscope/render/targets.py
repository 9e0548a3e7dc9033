"""A program's plans on ``--target`` slices beside the CPU's: tables, verdicts in words, JSON.

Every rendering reads the :class:`~shardscope.engine.hlo.target_plan.TargetPlan` values the
pipeline made (what the target's compiler did with each CPU collective); nothing here
compiles or recounts. Nothing runs on a target: its tables say so where timings would be.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from shardscope.costmodel.collective_times import collectives_seconds_per_call, interconnect_of
from shardscope.costmodel.interconnects import format_seconds
from shardscope.costmodel.savings import Saving, savings_of, step_estimate_of
from shardscope.engine.hlo.roofline import range_words, seconds_words
from shardscope.engine.counts import count_text, known_sum
from shardscope.engine.hlo.target_plan import COMBINED, ENTERED_LOOP, LEFT_LOOP, PIPELINED, REMOVED, STAYED
from shardscope.render.console import table_width
from shardscope.render.findings import compiled_collective_json, render_inspection, trips_text, verdict_cell

if TYPE_CHECKING:
    from rich.table import Table
    from rich.console import Console, Group

    from shardscope.engine.inspection import Inspection

    from shardscope.costmodel.projection import Projection
    from shardscope.engine.hlo.roofline import StepEstimate
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledLoop, CompiledPlan
    from shardscope.engine.hlo.target_plan import TargetPlacement, TargetPlan
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


def plan_verdict(title: str, plan: "TargetPlan", savings: "dict[str, Saving] | None" = None) -> str:
    """One sentence: on this target, does the plan's flagged collective leave its loop (the
    compiler defers it already) or stay (the deferral is worth writing)?

    ``title`` names the plan with its article (``the naive plan``, ``the step program``,
    ``linear's naive plan``); ``savings`` are the plan's :func:`savings_of` where the caller has
    them already (each costs every collective's groups on the interconnect).
    """
    on = f"on {plan.topology} {title}"
    if plan.refused:
        assert plan.fit is not None  # a refused plan carries its fit
        return f"{on} {plan.fit.line()}, so it has no plan there; its CPU plan stands."
    entered = [p for p in plan.comparison.placements if p.entered]
    return _verdict(on, plan) + (_entered_words(entered) if entered else "") + "." + "".join(
        f" {sentence}" for sentence in size_sentences(plan, savings))


def size_sentences(plan: "TargetPlan", savings: "dict[str, Saving] | None" = None) -> list[str]:
    """What each collective the verdict judges moves: ``Its all-reduce of out[1] moves 4 B per run,
    4 runs per call; deferring it saves ~24 us per step on gpu:h100:8.`` for one the target keeps
    in a loop, its bytes per run for one the compiler moves out, and for a plan without findings
    the bytes of each collective its loops need."""
    found = savings_of(plan) if savings is None else savings
    flagged = [p for p in plan.comparison.placements if p.collective.verdict.flagged and not p.removed]
    if not flagged:
        return [f"Its {t.kind} of {t.value or t.name} moves {t.bytes_per_execution:,} B per run."
                for t in plan.compiled.findings]
    sentences = []
    for p in flagged:
        saving = found.get(p.collective.name)
        what = f"{p.collective.kind} of {saving.values if saving and saving.values else p.collective.value or p.collective.name}"
        if saving is not None:
            sentences.append(f"Its {what} moves {saving.words()}.")
        else:
            sentences.append(f"Its {what} moves {p.collective.bytes_per_execution:,} B per run.")
    return sentences


def fit_words(plan: "TargetPlan") -> str:
    """``memory: 0.5 of 15.75 GiB per device`` (``does not fit: ...``); empty without a fit."""
    if plan.fit is None:
        return ""
    line = plan.fit.line()
    return line if line.startswith("does not fit") else f"memory: {line}"


def step_words(plan: "TargetPlan") -> str:
    """The step estimate in one line, or why there is none (empty for a refused plan)."""
    step = step_estimate_of(plan)
    if step is not None:
        return step.line()
    if plan.refused:
        return ""
    return f"no step estimate: shardscope has no peaks for {plan.device_kind}"


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
        notes.append((fit, "bold red" if plan.does_not_fit else ""))
    step = step_words(plan)
    if step:
        notes.append((step, "dim" if plan.step is None else ""))
    return notes


def _entered_words(entered: list["TargetPlacement"]) -> str:
    """``; its all-gather of params['w1'] runs in the plan's chunk loop there (outside it on the CPU)``."""
    what, plural = _what(entered)
    loops = sorted({loop_words(loop) for p in entered for loop in p.entered})
    return f"; its {what} run{'' if plural else 's'} in {' and '.join(loops)} there (outside loops on the CPU)"


def _verdict(on: str, plan: "TargetPlan") -> str:
    """The verdict on what the target's compiler leaves in its loops, value by value by the
    target's own verdicts, without the final full stop."""
    staying = plan.staying_findings
    added = plan.comparison.added_findings
    moved = [p for p in plan.comparison.placements if p.deferred_by_compiler and not p.removed]
    if not staying and not added:
        needed = len(plan.compiled.findings)
        if not moved:
            kept = f"{needed} collective{'s' if needed > 1 else ''} in a loop, needed there"
            return f"{on} keeps {kept} (as on the CPU)" if needed else f"{on} runs no collective in a loop"
        what, plural = _moved_what(moved)
        text = f"{on}'s {what} leave{'' if plural else 's'} the loop: the compiler already does the deferral here"
        return text + (f"; it keeps {_kept_words(plan.compiled.findings)}" if needed else "")
    names = [f"{p.collective.kind} of {', '.join(p.staying_values)}" for p in staying]
    names += [f"{t.kind} of {t.value}" if t.value else t.name for t in added]
    plural = len(names) > 1 or any(len(p.staying_values) > 1 for p in staying)
    what = names[0] if len(names) == 1 else f"{'; '.join(names[:-1])} and {names[-1]}"
    holders = [t for p in staying for t in p.staying_in] + list(added)
    loops = sorted({loop_words(loop) for t in holders for loop in t.loops})
    text = f"{on}'s {what} stay{'' if plural else 's'} in {' and '.join(loops)}: the deferral is worth writing"
    split = [v for p in staying for v in p.values_left if v not in p.staying_values]
    if split:  # the compiler split a combined sum: some of its values left already
        text += f" (the compiler moves {', '.join(dict.fromkeys(split))} out itself)"
    if moved:
        left, plural = _moved_what(moved)
        text += f"; its {left} leave{'' if plural else 's'} the loop"
    return text


def staying_fixes(plan: "TargetPlan") -> list[str]:
    """The target's own fix of each collective it keeps in a loop that need not run there (the
    loss's sum the compiler left, not the CPU's fix of the gradients it moved out itself)."""
    if plan.refused:
        return []
    kept = [t for p in plan.staying_findings for t in p.staying_in] + list(plan.comparison.added_findings)
    unique = {t.name: t for t in kept if t.verdict.flagged and t.verdict.fix}
    return [f"fix on {plan.topology} for its {t.kind} of {t.value or t.name}: {t.verdict.fix}" for t in unique.values()]


def _kept_words(kept: "tuple[CompiledCollective, ...]") -> str:
    """``its all-reduce of out[2] in a loop, needed there`` (a count past three)."""
    if len(kept) > 3:
        return f"{len(kept)} collectives in loops, needed there"
    names = [f"{t.kind} of {t.value}" if t.value else t.name for t in kept]
    return f"its {' and '.join(names)} in {'loops' if len(kept) > 1 else 'a loop'}, needed there"


def _moved_what(moved: list["TargetPlacement"]) -> tuple[str, bool]:
    """The CPU findings the target no longer keeps where they need not run, in words: of a
    combined one the target split, the values that left (the rest stay, needed there)."""
    names = [f"{p.collective.kind} of {', '.join(p.values_left)}" if p.values_left else
             (f"{p.collective.kind} of {p.collective.value}" if p.collective.value else _unnamed(p)) for p in moved]
    plural = len(names) > 1 or any(len(p.values_left) > 1 for p in moved)
    return (names[0] if len(names) == 1 else f"{'; '.join(names[:-1])} and {names[-1]}"), plural


@dataclass(frozen=True)
class TargetRow:
    """One row of a target's table: a collective the target runs (with the CPU collectives whose
    values it carries), or a CPU collective the target removed (``collective`` None). The CPU's
    loops and runs are on the row of the target collective that carries it first (the one that
    keeps it in the most loops) and blank on the others: each column adds up to its summary."""

    collective: "CompiledCollective | None"
    cpu: tuple["TargetPlacement", ...]  # the CPU collectives whose values it carries
    first: tuple["TargetPlacement", ...]  # those of them it carries first
    staying: bool

    @property
    def value(self) -> str:
        """The value as the target's module names it (the CPU's for a removed one)."""
        return self.collective.value if self.collective is not None else self.cpu[0].collective.value

    def cells(self) -> dict[str, str]:
        """The row's text by column: ``collective``, ``value``, ``loops``, ``runs/call``,
        ``verdict``, ``CPU collective``, ``CPU loops``, ``CPU runs``, ``placement``."""
        t = self.collective
        names = [p.collective.name if any(p is f for f in self.first) else f"part of {p.collective.name}"
                 for p in self.cpu]
        return {
            "collective": t.name if t is not None else "-",
            "value": self.value,
            "loops": trips_text(t.loop_trip_counts) if t is not None else "-",
            "runs/call": t.runs.text() if t is not None else "-",
            "verdict": verdict_cell(t.verdict.kind, t.in_loop) if t is not None else "-",
            "CPU collective": ", ".join(names) or "-",
            "CPU loops": trips_text(self.first[0].collective.loop_trip_counts) if self.first else "",
            "CPU runs": _cpu_runs(self.first) if self.first else "",
            "placement": "; ".join(placement_words(p) if any(p is f for f in self.first) else self._part_words(p)
                                   for p in self.cpu) or "only on the target",
        }

    def _part_words(self, p: "TargetPlacement") -> str:
        """What the target did with the values of ``p`` this row carries (``p`` is carried first
        by another row): ``grad(params['ln']) left 1 of 2 loops``."""
        assert self.collective is not None  # a removed collective's row carries it first
        values = ", ".join(p.values_in(self.collective)) or p.collective.value
        cpu, here = len(p.collective.loops), len(self.collective.loops)
        moved = "left loop" if not here else f"left {cpu - here} of {cpu} loops" if here < cpu else "stayed in loop"
        return f"{values} {moved}"


def target_rows(plan: "TargetPlan") -> list[TargetRow]:
    """Every collective the target runs, in its module's order, then each CPU collective it
    removed: the rows whose runs add up to the target's runs per call."""
    rows = []
    added = set(map(id, plan.comparison.added_findings))
    for t in plan.compiled.collectives:
        carried = plan.placements_of(t)
        first = tuple(p for p in carried if p.target[0] is t)
        staying = id(t) in added or any(any(s is t for s in p.staying_in) for p in carried)
        rows.append(TargetRow(t, carried, first, staying))
    rows += [TargetRow(None, (p,), (p,), False) for p in plan.comparison.placements if p.removed]
    return rows


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
        for row in target_rows(plan):
            cells = row.cells()
            table.add_row(Text(name), *(Text(cells[column]) for column in columns),
                          style="bold red" if row.staying else None)
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
        ("step estimate", lambda r, t: step_cell(step_estimate_of(t))),
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
            console.print(Text(plan_verdict(title, plan), style="bold red" if plan.fails_check else "bold green"))
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
    interconnect = interconnect_of(rows[0][1])
    if interconnect is None:
        return ""
    per_plan = []
    for name, plan in rows:
        seconds = collectives_seconds_per_call(plan)
        per_plan.append(f"{name} {'?' if seconds is None else format_seconds(seconds)}/call")
    return (f"{target}'s compiled collectives on its own interconnect ({interconnect.description}): "
            f"{', '.join(per_plan)} (communication alone; figures and sources: shardscope presets --targets).")


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
            Text(plan_verdict(f"the {inspection.function} program", plan),
                 style="bold red" if plan.fails_check else "bold green"),
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
    collectives = []
    interconnect = interconnect_of(plan)
    for p in plan.paired:
        if p.compiled is None:
            continue
        fields = compiled_collective_json(p, p.compiled)
        fields["left_loop"] = plan.left_loop(p.compiled)
        fields["carries"] = [placement.collective.name for placement in plan.placements_of(p.compiled)]
        timed = interconnect.time(p.compiled) if interconnect is not None else None
        fields["interconnect"] = None if timed is None else {
            "seconds_per_run": timed.seconds, "latency_s": timed.latency_s, "bandwidth_s": timed.bandwidth_s,
            "algorithm": timed.algorithm, "devices": timed.devices}
        collectives.append(fields)
    step = step_estimate_of(plan)  # each of these costs every collective's groups: once each
    savings = savings_of(plan, None if step is None else step.dispatched_upper_s)
    placements = [placement_json(p) | {"saving": savings[p.collective.name].to_json()
                                       if p.collective.name in savings else None}
                  for p in plan.comparison.placements]
    return {
        "compiled_collectives": collectives,
        "interconnect_s_per_call": collectives_seconds_per_call(plan),
        "savings": [saving.to_json() for saving in savings.values()],
        "compiled_executed_collectives": None if plan.refused else plan.compiled.executed_collectives,
        "memory": dict(plan.memory),
        "cpu_memory": dict(plan.cpu_memory),
        "cost_analysis": dict(plan.cost),
        "compile_s": plan.compile_s,
        "placements": placements,
        "staying_findings": [p.collective.name for p in plan.staying_findings],
        "verdict": plan_verdict(title, plan, savings),
        "fit": None if plan.fit is None else plan.fit.to_json(),
        "step_estimate": None if step is None else step.to_json(),
    }


def interconnect_json(plan: "TargetPlan") -> dict[str, Any] | None:
    """The ``interconnect`` object of a target: the machine in words and the figures' sources."""
    interconnect = interconnect_of(plan)
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
    from shardscope.costmodel.projection import to_json as projection_json

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
