"""``check --format github``: one workflow command per finding, which a GitHub Actions run turns
into an annotation on the user's line of the pull request (written by
:mod:`shardscope.render.workflow_commands`).

The findings are the ones the exit status counts: with targets, those a target still runs in
a loop, and a step that does not fit in a target's memory (an error on the file); a program
that was not checked is an error on the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from shardscope.render.partitioner import warning_lines
from shardscope.render.targets import placement_words
from shardscope.render.workflow_commands import error_command, error_where, relative, same_file

if TYPE_CHECKING:
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.engine.hlo.paired import PairedCollective
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.hlo.target_plan import TargetPlacement, TargetPlan, TargetRow
    from shardscope.pipeline.check import FileCheck

_LINE = re.compile(r":(?P<line>\d+)(?: \(.*\))?$")
"""The line number of a ``step.py:42 (loss)`` source."""


def workflow_commands(path: Path, checked: FileCheck, cwd: Path | None = None) -> list[str]:
    """One ``::error`` line per finding the judged check's exit status counts (an involuntary full
    rematerialization too, at its line), and per program not checked.

    A finding is placed at the user's line that wrote the collective (the checked ``path``
    itself when it has none); paths are relative to ``cwd`` (default: the working directory).
    With ``--min-saving``, the target findings that save less are not among them.
    """
    here = os.path.abspath(cwd or Path.cwd())
    lines = []
    for ins in checked.inspections:
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
    """The findings of ``plan`` its judgement counts, each once."""
    assert plan.costs is not None  # every target plan is costed where it is made
    counted = plan.counted_findings
    named = list(dict.fromkeys(p for row in counted for p in row.staying))  # by the CPU collective, as the CPU names it
    for placement in named:
        paired = _paired_with(ins, placement)
        title = f"shardscope: {placement.collective.kind} stays in a loop on {plan.target} ({ins.function})"
        saving = plan.costs.savings.get(placement.collective.name)
        size = f" It moves {saving.words()}." if saving is not None else ""
        yield paired, title, _staying_message(ins, paired, placement, plan.target) + size
    for row in counted:
        if not row.staying:  # kept in a loop where the CPU runs it outside, or the target's own
            yield _own_finding(ins, plan, row)


def _own_finding(ins: Inspection, plan: TargetPlan, row: TargetRow) -> tuple[CompiledCollective, str, str]:
    """A finding the target keeps in a loop that no CPU finding carries."""
    t, paired = row.collective, row.paired
    assert t is not None and paired is not None  # a finding is a collective the target runs
    verdict = paired.verdict
    title = f"shardscope: {t.kind} stays in a loop on {plan.target} ({ins.function})"
    what = f"{t.name}{f' of {t.value}' if t.value else ''}"
    where = (f"in a loop on {plan.target} (outside loops on the CPU)" if row.cpu
             else f"on {plan.target} only (no CPU collective carries it)")
    message = f"{ins.function}: {what} {where}, {t.runs.badge()}: {verdict.kind} there. {verdict.reason}"
    return t, title, message + _fix(verdict.fix)


def _staying_message(ins: Inspection, paired: PairedCollective | None, placement: TargetPlacement,
                     target: str) -> str:
    verdict = placement.collective.verdict
    what = paired.pairing() if paired is not None else placement.collective.name
    return (f"{ins.function}: {what}: {verdict.kind}. {verdict.reason} On {target}: "
            f"{placement_words(placement)}. There: {placement.describe_staying()}.{_fix(verdict.fix)}")


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
