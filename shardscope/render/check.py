"""``shardscope check``'s output: each program's findings and one line with the outcome, or one JSON object."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from rich.text import Text

from shardscope.render.console import print_verbatim
from shardscope.render.dispatches import dispatch_findings_json, dispatches_json
from shardscope.render.findings import inspection_json
from shardscope.render.json_values import finite
from shardscope.render.measured import render_measured
from shardscope.render.targets import merged_targets, render_targets, targets_json, unavailable_targets_json
from shardscope.targets.registry import targets_with

if TYPE_CHECKING:
    from rich.console import Console

    from shardscope.pipeline.what_if import ProgramWhatIf  # a type: check without --what-if loads no what-if

    from shardscope.engine.hlo.target_plan import TargetPlacement, TargetPlan
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.pipeline.check import FileCheck


def to_json(path: Path, checked: FileCheck, what_ifs: list[ProgramWhatIf] | None = None) -> dict[str, Any]:
    """The ``check --json`` object of the judged check ``checked``.

    ``programs`` lists every program checked; with exactly one, its ``function``,
    ``findings``, ``collectives`` and ``compiled_collectives`` are also at the top level.
    ``targets`` holds each ``--target``'s programs as ``report --json`` holds its plans
    (``{TARGET: {"devices", "variants": {FUNCTION: ...}}}``); each program's object has its own.
    With ``--what-if`` each program has ``what_if``: one object per rewrite
    (:func:`shardscope.render.what_if.rewrite_json`), null for a demo plan (not rewritten), with
    ``what_if_note`` saying why it is null or empty when it is. ``failed`` lists each program
    that failed to trace or compile as ``{"function", "error", "hint"}`` (then ``exit_code`` is 2).
    Each target's plan lists ``savings``: what deferring each finding it keeps in a loop saves
    there; with ``--min-saving``, ``min_saving`` holds the threshold and ``below_min_saving``
    the findings that save less (``{"target", "function", "collective"}``), which pass.
    A step that is not jitted and calls jitted functions has ``dispatches`` (each distinct
    module it dispatches: its calls per step, counts per call and per step, its compiled
    collectives) and ``dispatch_findings`` (the verdicts across the calls); its ``counts`` are
    per step. ``unavailable_targets`` lists each ``--target`` that could not be compiled for
    beside others that were (``{"target", "error", "hint"}``; then ``exit_code`` is 2). ``exit_code``
    is the check's own (:attr:`FileCheck.exit_status`), ``judged_on`` the compilers whose plans it judged.
    """
    inspections, failed, min_saving = checked.inspections, checked.failed, checked.min_saving
    programs = []
    on_targets = [targets_json(_named([ins])) for ins in inspections]  # each plan rendered once
    for ins, own in zip(inspections, on_targets):
        data = inspection_json(ins)
        if ins.dispatches is not None:  # a step that is not jitted: its calls, counted per step
            data.update(counts=ins.counts(), executed_collectives=ins.executed_collectives,
                        flagged=ins.dispatches.flagged_count,
                        dispatches=dispatches_json(ins.dispatches),
                        dispatch_findings=dispatch_findings_json(ins.dispatches))
        data["compiler"] = ins.compiler  # whose plan the findings are: the CPU's, the chip's (--on tpu), the run's
        data["measured"] = None if ins.measured is None else ins.measured.to_json()
        data["profile_note"] = ins.profile_note or None  # why a profile given put no times on it
        data["targets"] = {target: {k: v for k, v in entry.items() if k != "variants"} | entry["variants"][ins.function]
                           for target, entry in own.items()}
        programs.append(data)
    if what_ifs is not None:  # --what-if: its rendering loads the what-if, which a check without it does not
        from shardscope.render import what_if
    for ins, program, found in zip(inspections, programs, what_ifs or (), strict=False):
        program["what_if"] = None if found.measured is None else what_if.to_json(ins, found.measured)
        program["what_if_note"] = found.failure or (what_if.NOT_A_PROGRAM if found.measured is None else None)
    result: dict[str, Any] = {"file": str(path), "exit_code": checked.exit_status,
                              "programs": programs,
                              "failed": [{"function": f.function, "error": f.error.message, "hint": f.error.hint}
                                         for f in failed],
                              "targets": merged_targets(on_targets),
                              "unavailable_targets": unavailable_targets_json(checked.unavailable)}
    if min_saving is not None:
        result["min_saving"] = min_saving.to_json()
        result["below_min_saving"] = [{"target": plan.target, "function": ins.function, "collective": p.collective.name}
                                      for ins, plan, p in _below(inspections)]
    result["judged_on"] = checked.judged_on  # whose plans the exit code judges: the targets', else the CPU's
    if len(programs) == 1:
        result.update({k: programs[0][k] for k in ("function", "findings", "collectives", "compiled_collectives",
                                                   "partitioner_findings")})
    return finite(result)


def _below(inspections: Sequence[Inspection]) -> list[tuple[Inspection, TargetPlan, TargetPlacement]]:
    """``(inspection, plan, placement)`` of each target finding that saves less than ``--min-saving``."""
    return [(ins, plan, p) for ins in inspections for plan in ins.targets for p in plan.below_min_saving]


def _named(inspections: list[Inspection]) -> list[tuple[str, str, Inspection]]:
    """``(function, title, inspection)`` of each program, for the targets' renderings."""
    return [(ins.function, _title(ins.function), ins) for ins in inspections]


def _title(function: str) -> str:
    """``linear's naive plan`` for a demo's plan (``linear[naive]``), ``the step program`` for a program."""
    demo, bracket, plan = function.partition("[")
    return f"{demo}'s {plan.rstrip(']')} plan" if bracket else f"the {function} program"


def _render_what_if(inspection: Inspection, found: ProgramWhatIf, console: Console) -> None:
    """One program's what-if: prose wrapped as the console wraps it, the patch verbatim."""
    from shardscope.render import what_if  # loads the what-if: only with --what-if

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


CPU_JUDGED = "This judges the plan XLA:CPU compiled."
"""What a finding without a target says of the compiler it judged (it never guesses another's)."""


def dump_judged(compilers: set[str]) -> str:
    """What a finding of a dumped module says of the compiler it judged: the run's own."""
    return (f"This judges the plan {', '.join(sorted(compilers))} compiled in the run "
            "that wrote the dump, with its flags.")


def chips_judged(compilers: set[str]) -> str:
    """What a finding says of the compiler it judged when the programs ran on this machine's chips
    (``--on tpu``): that chip's compiler, here."""
    return (f"This judges the plan {', '.join(sorted(compilers))} compiled here, for this "
            "machine's chips.")


def cpu_judged(devices: set[int]) -> str:
    """What a finding without a target says of the compiler it judged, and the ``--target``s of the
    programs' own device count that would judge a GPU's or TPU's plan instead."""
    examples = targets_with(devices.pop()) if len(devices) == 1 else ()
    if not examples:
        return (f"{CPU_JUDGED} A GPU's or TPU's compiler may move some of these collectives out of their loops "
                "itself: --target with a machine of the program's device count judges its plan instead.")
    return (f"{CPU_JUDGED} A GPU's or TPU's compiler may move some of these collectives out of their loops itself: "
            f"{' or '.join('--target ' + e for e in examples)} judges its plan instead.")


def render(checked: FileCheck, console: Console, what_ifs: list[ProgramWhatIf] | None = None,
           targets: Sequence[str] = ()) -> None:
    """Each program's findings table and fixes (and its what-if), then one line with the outcome
    (on the targets when there are any: what each target did with every collective, and a
    verdict), all read from the judged check ``checked``. The programs in ``checked.failed`` were
    not checked: the outcome line names them (their errors are the CLI's to print) and nothing
    passes. ``targets`` are the ``--target``s given: a verdict judged on the CPU alone (a step of
    dispatches) does not suggest one of them."""
    inspections, failed = checked.inspections, checked.failed
    for k, ins in enumerate(inspections):
        console.print(ins)
        console.print()
        render_measured(ins, console)
        if what_ifs is not None:
            _render_what_if(ins, what_ifs[k], console)
    if failed:
        console.print(Text(f"check failed: {', '.join(f.function for f in failed)}: not checked "
                           "(each one's error follows).", style="check.failed"))
    if any(ins.targets for ins in inspections):
        render_targets(_named(inspections), console, "program")
        _render_target_outcome(inspections, console)
        stepped = [ins.function for ins in inspections if any(f.flagged for f in ins.dispatch_findings)]
        if stepped:
            console.print(Text(f"check failed: {', '.join(stepped)}: a step of dispatches reduces once per call where "
                               "once per step would do, on any target (no compiler merges separate calls).",
                               style="check.failed"))
        return
    remats = [ins.function for ins in inspections if ins.rematerializations]
    if remats:
        console.print(Text(f"check failed: {', '.join(remats)}: the partitioner fell back to an involuntary full "
                           "rematerialization (a whole tensor gathered onto every device).", style="check.failed"))
    flagged = [ins.function for ins in inspections if ins.flagged or any(f.flagged for f in ins.dispatch_findings)]
    if flagged:  # Text, not markup: rich would read linear[naive]'s [naive] as a style
        across = any(f.flagged for ins in inspections for f in ins.dispatch_findings)
        console.print(Text(f"check failed: {', '.join(flagged)}: collectives in loops that need not be there"
                           f"{' (a Python loop of dispatches counts)' if across else ''}.", style="check.failed"))
        devices = {ins.compiled.module.num_partitions * ins.compiled.module.replica_count
                   for ins in inspections if ins.compiled is not None and ins.compiled.module is not None}
        dumped = {ins.compiler for ins in inspections if ins.dumped and ins.compiled is not None}
        here = {ins.compiler for ins in inspections if ins.compiled is not None} - {"XLA:CPU"}
        note = (dump_judged(dumped) if dumped else chips_judged(here) if here
                else cpu_judged(devices) if not targets else CPU_JUDGED)
        console.print(Text(note, style="note"))
    elif not failed and not remats:
        console.print(Text("check passed: every collective inside a loop is needed there.", style="check.passed"))


def _render_target_outcome(inspections: list[Inspection], console: Console) -> None:
    """``check failed on tpu:v5e:2x2: linear[naive] ...`` or ``check passed on ...`` (with
    ``--min-saving``, a line for the findings that save less and pass): each plan's own judgement."""
    targets = list(dict.fromkeys(plan.target for ins in inspections for plan in ins.targets))
    for target in targets:
        plans = [(ins.function, plan) for ins in inspections for plan in ins.targets if plan.target == target]
        staying = [function for function, plan in plans if plan.counted_findings]
        for function, plan in plans:
            costs = plan.costs
            assert costs is not None  # every target plan is costed where it is made
            for p in plan.below_min_saving:
                saving, threshold = costs.savings[p.collective.name], costs.min_saving
                assert threshold is not None  # weighed against it
                console.print(Text(f"on {target}, deferring {function}'s {saving.kind} of {saving.values or saving.collective} "
                                   f"saves less than --min-saving {threshold.text} per step{threshold.amount(saving)}: "
                                   "not counted.", style="check.below"))
        remats = [function for function, plan in plans if plan.compiled.rematerializations]
        too_big = [function for function, plan in plans if plan.does_not_fit]
        if too_big:
            console.print(Text(f"check failed on {target}: {', '.join(too_big)}: does not fit in the memory of its "
                               "devices there.", style="check.failed"))
        if remats:
            console.print(Text(f"check failed on {target}: {', '.join(remats)}: the partitioner fell back to an "
                               "involuntary full rematerialization there.", style="check.failed"))
        if staying:
            console.print(Text(f"check failed on {target}: {', '.join(staying)}: collectives stay in loops that "
                               "need not hold them there.", style="check.failed"))
        elif not remats and not too_big:
            console.print(Text(f"check passed on {target}: every collective a loop holds there is needed, or the "
                               "compiler already moves it out.", style="check.passed"))
