"""A program's verified what-if rewrites as programs of the pipeline, beside the original.

The explorer's what-if (``w``) analyses each program of a program file and, right after it,
every rewrite of its findings that :mod:`shardscope.whatif.what_if` verified: the Plans, Diff,
Graph, Compiled and Timings tabs then compare a program with shardscope's fix of it. A rewrite
takes the original's arguments, so it is traced, placed, timed and checked against the original
as the original is; it is named ``step-what-if`` (``step-what-if-2`` for a second one: a name
the views can use in widget ids, which no Python function has) and described as shardscope's
rewrite. A rewrite that was refused or failed a check is not a
program to compare: it is left out.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from shardscope.errors import ShardscopeError
from shardscope.pipeline.one_program import inspect_program, user_program
from shardscope.pipeline.workload import PipelineProgram
from shardscope.sources.programs import CLI_DEBUG
from shardscope.whatif.what_if import what_if_of

if TYPE_CHECKING:
    from shardscope.whatif.rewritten import RewrittenProgram
    from shardscope.sources.programs import ProgramFunction

WHAT_IF = "what-if"
"""The mark in a rewritten program's name."""


def what_if_programs(function: "ProgramFunction", original: PipelineProgram) -> tuple[list[PipelineProgram], list[str]]:
    """The verified rewrites of ``function`` (inspected on its example arguments) as pipeline
    programs in ``original``'s place, and one line per rewrite left out, with why (none of
    either when it does not trace: the original says why)."""
    try:
        inspection = inspect_program(user_program(function.fn, function.spec.args, function.spec.kwargs, function.name,
                                                  CLI_DEBUG))
        rewrites = what_if_of(inspection).rewrites
    except ShardscopeError:
        return [], []
    found = []
    for k, rewrite in enumerate((r for r in rewrites if r.verified), 1):
        name = rewritten_name(original.name, k)
        assert rewrite.program is not None  # a verified rewrite has its program
        program = as_pipeline_program(rewrite.program, original, name)
        found.append(dataclasses.replace(
            program, description=f"shardscope's rewrite of {original.name}: {rewrite.summary()}"))
    left_out = [f"{original.name}: {rewrite.summary()}" for rewrite in rewrites if not rewrite.verified]
    return found, left_out


def as_pipeline_program(rewritten: "RewrittenProgram", original: PipelineProgram, name: str | None = None) -> PipelineProgram:
    """``original`` with the rewritten program in its place, for the pipeline to trace, compile,
    time and project beside the original (the same names, checks and run arguments: the compiled
    program places them as it takes them)."""
    return dataclasses.replace(original, name=name or rewritten_name(original.name),
                               description=f"shardscope's rewrite of {original.name}",
                               function=rewritten.function, arguments=rewritten.arguments)


def rewritten_name(name: str, k: int = 1) -> str:
    """``step-what-if``, ``step-what-if-2``: the ``k``-th rewrite of the program ``name``."""
    return f"{name}-{WHAT_IF}" if k == 1 else f"{name}-{WHAT_IF}-{k}"
