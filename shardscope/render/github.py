"""``check --format github``: one workflow command per finding, which a GitHub Actions run turns
into an annotation on the user's line of the pull request (written by
:mod:`shardscope.render.workflow_commands`).

The findings are the ones the exit status counts: with targets, those a target still runs in
a loop, and a step that does not fit in a target's memory (an error on the file); a program
that was not checked is an error on the file. A program whose plan is not its sharded run's
(traced over one device, or fewer than it asks for: the text's first note) is a warning on the
file, which fails nothing: a check that passes there would otherwise say nothing at all.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from shardscope.render.partitioner import warning_lines
from shardscope.render.targets import loop_words, placement_words
from shardscope.render.workflow_commands import error_command, error_where, relative, same_file, warning_command

if TYPE_CHECKING:
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.engine.hlo.paired import PairedCollective
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.hlo.target_plan import TargetPlacement, TargetPlan
    from shardscope.pipeline.check import FileCheck

_LINE = re.compile(r":(?P<line>\d+)(?: \(.*\))?$")
"""The line number of a ``step.py:42 (loss)`` source."""


def workflow_commands(path: Path, checked: FileCheck, cwd: Path | None = None) -> list[str]:
    """One ``::error`` line per finding the judged check's exit status counts (an involuntary full
    rematerialization too, at its line), and per program not checked; one ``::warning`` per
    program with a :attr:`~shardscope.engine.joined.inspection.Inspection.mesh_note`.

    A finding is placed at the user's line that wrote the collective (the checked ``path``
    itself when it has none); paths are relative to ``cwd`` (default: the working directory).
    With ``--min-saving``, the target findings that save less are not among them.
    """
    here = os.path.abspath(cwd or Path.cwd())
    lines = []
    for ins in checked.inspections:
        if ins.mesh_note:  # the text's first words: what the plan shows is not the sharded run's
            lines.append(warning_command({"file": relative(path, here)},
                                         f"shardscope: {ins.function} runs over too few devices to show its sharded plan",
                                         f"{ins.function}: {ins.mesh_note}"))
        for collective, title, message in _findings(ins):
            lines.append(error_command(_where(collective, path, here), title, message))
        for plan in ins.targets:
            if plan.does_not_fit and plan.fit is not None:
                lines.append(error_command({"file": relative(path, here)},
                                      f"shardscope: {ins.function} does not fit on {plan.target}",
                                      f"{ins.function} on {plan.target}: {plan.fit.line()}."))
        remats = [w for plan in ins.targets for w in plan.compiled.rematerializations] if ins.targets else list(
            ins.rematerializations)
        for warning in remats:
            lines.append(error_command(_remat_where(warning.value_source or warning.source, path, here),
                                  f"shardscope: involuntary full rematerialization ({ins.function})",
                                  f"{ins.function}: " + "\n".join(warning_lines(warning))))
    for failure in checked.failed:
        message = failure.error.message + (f"\nhint: {failure.error.hint}" if failure.error.hint else "")
        lines.append(error_command(error_where(failure.error.line, path, here),
                              f"shardscope: {failure.function} was not checked", message))
    return lines


def _findings(ins: Inspection) -> Iterator[tuple[PairedCollective | CompiledCollective | None, str, str]]:
    """``(collective, title, message)`` of each finding of ``ins`` the exit status counts: on
    targets, each finding the judged plan counts (by the CPU collective whose values it keeps in
    the loop, else by the target's own collective), else the CPU plan's."""
    if ins.targets:
        for plan in ins.targets:
            yield from _target_findings(ins, plan)
        return
    for c in ins.flagged:
        verdict = c.verdict
        message = f"{ins.function}: {c.pairing()}: {verdict.kind}. {verdict.reason}"
        title = f"shardscope: {verdict.kind.replace('_', '-')} {c.label} in a loop ({ins.function})"
        yield c, title, message + _fix(verdict.fix)


def _target_findings(ins: Inspection, plan: TargetPlan) -> Iterator[tuple[PairedCollective | CompiledCollective | None,
                                                                        str, str]]:
    """One finding per collective of ``plan`` its judgement counts, each with its verdict there (the
    reason and the fix the text report gives it, :attr:`TargetRow.verdict`), placed at the line of
    the CPU collective whose values it keeps in the loop (else its own)."""
    assert plan.costs is not None  # every target plan is costed where it is made
    for row in plan.counted_findings:
        t, verdict = row.collective, row.verdict
        assert t is not None and verdict is not None  # a finding is a collective the target runs
        title = f"shardscope: {t.kind} stays in a loop on {plan.target} ({ins.function})"
        what = f"{t.name}{f' of {t.value}' if t.value else ''}"
        loops = " and ".join(loop_words(loop) for loop in t.loops)
        head = f"{ins.function}: {what} in {loops} on {plan.target}, {t.runs.badge()}"
        if row.staying:  # by the CPU collectives whose values it keeps there, as the CPU names them
            cpu = [(_paired_with(ins, p), p) for p in row.staying]
            where = next((paired for paired, _ in cpu if paired is not None), None) or row.paired or t
            said = "".join(_cpu_words(paired, p, plan) for paired, p in cpu)
        else:  # no CPU finding carries it: the CPU runs it outside loops, or needs it there, or has none
            where = row.paired or t
            said = (" The CPU runs it outside loops." if row.cpu and row.entered
                    else " On the CPU: " + "; ".join(f"{p.collective.name}, {p.collective.verdict.kind}"
                                                     for p in row.cpu) + "." if row.cpu
                    else f" It is {plan.target}'s own (no CPU collective carries it).")
        yield where, title, f"{head}: {verdict.kind} there. {verdict.reason}{said}{_fix(verdict.fix)}"


def _cpu_words(paired: PairedCollective | None, placement: TargetPlacement, plan: TargetPlan) -> str:
    """What the CPU runs of a value the target keeps in a loop, and what deferring it saves there."""
    assert plan.costs is not None  # every target plan is costed where it is made
    c = placement.collective
    saving = plan.costs.savings.get(c.name)
    return (f" On the CPU: {paired.pairing() if paired is not None else c.name}: {c.verdict.kind}. "
            f"On {plan.target}: {placement_words(placement)}. There: {placement.describe_staying()}."
            + (f" It moves {saving.words()}." if saving is not None else ""))


def _fix(fix: str | None) -> str:
    return f" Fix: {fix}" if fix else ""


def _paired_with(ins: Inspection, placement: TargetPlacement) -> PairedCollective | None:
    """The CPU collective (with its jaxpr equations) that ``placement`` is about."""
    return next((c for c in ins.paired if c.compiled is not None and c.compiled.name == placement.collective.name),
                None)


def _where(collective: PairedCollective | CompiledCollective | None, path: Path, here: str) -> dict[str, str]:
    """``file`` and ``line`` of the user's line that wrote ``collective`` (the checked file without one)."""
    found = _LINE.search(collective.source) if collective is not None else None
    if collective is None or found is None or not collective.source_file:
        return {"file": relative(path, here)}
    written = Path(collective.source_file)
    if same_file(written, path):  # JAX names the file by its real path: keep the one the user gave (a link)
        written = path
    return {"file": relative(written, here), "line": found["line"]}


def _remat_where(source: str, path: Path, here: str) -> dict[str, str]:
    """The checked file, at the rematerialization's line when that line is in it (``clash.py:15 (add)``)."""
    where = {"file": relative(path, here)}
    found = _LINE.search(source)
    if found is not None and source.split(":", 1)[0] == path.name:
        where["line"] = found["line"]
    return where
