"""Fuzzing the module text: a corpus of small random edits of real dumps, read as a user's text is.

hypothesis is not among the project's dependencies, so the corpus is made here from the two real
dumps of ``tests/fixtures/xla_dump`` (a CPU one and a TPU v5e one) by
:mod:`benchmarks.hlo_cases`' generators, seeded, a few hundred cases that take seconds: a
character flipped, deleted or inserted, a name renamed to another of the module's, a token dropped
or repeated, a line dropped, repeated or moved, a number broken, two tokens swapped; and the
modules cut at every computation boundary and at random points. The parse is linear by
construction (one pass with explicit stacks, no regular expression that can backtrack), so no
case is timed: each must simply finish.

What holds for every case: :func:`read_module` returns a module or raises
:class:`~shardscope.errors.HloTextError` (never another exception); a module it returns builds
its plan and its step estimate without any exception, and a cut-off module is always refused.
``python -m benchmarks.hostile_hlo`` runs the larger corpus (37,435 mutations, under a memory cap
and a time limit per case, through the CLI and the API): BENCHMARKS.md section 11.
"""

from __future__ import annotations

import random

import pytest

from _support import run_main
from benchmarks.hlo_cases import DUMP_NAME, base_texts, boundary_cases, mutation, truncation_cases
from shardscope.costmodel.estimate import chip_named
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.roofline import estimate_step
from shardscope.engine.hlo.well_formed import read_module
from shardscope.engine.hlo.work import module_work
from shardscope.errors import HloTextError

BASES = base_texts()
ROUNDS = 8
PER_ROUND = 50
"""400 mutations in the suite: 8 rounds (spread over the test workers) of 50, each round its own seed."""


def _mutations(seed: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    names = sorted(BASES)
    return [(names[k % 2], *mutation(BASES[names[k % 2]], rng)) for k in range(PER_ROUND)]


@pytest.mark.parametrize("seed", range(ROUNDS))
def test_a_mutated_module_is_refused_or_planned_never_an_exception(seed):
    chip = chip_named("v5e")
    outcomes = {"refused": 0, "read": 0}
    for base, kind, text in _mutations(1000 + seed):
        try:
            module = read_module(text)
        except HloTextError as exc:
            outcomes["refused"] += 1
            assert str(exc).startswith("the text") and "\n" in str(exc)  # where, then the hint
            continue
        outcomes["read"] += 1
        plan = compiled_plan(module, backend=base)
        names = {inst.name for inst in module.instructions()}
        assert all(c.name in names and (c.executions is None or c.executions >= 0) for c in plan.collectives)
        estimate = estimate_step(module_work(module), chip)
        assert estimate is not None and estimate.seconds > 0, kind
    assert outcomes["refused"] and outcomes["read"]  # both ends of the corpus are exercised


@pytest.mark.parametrize("base", sorted(BASES))
def test_a_module_cut_anywhere_is_always_refused(base):
    text = BASES[base]
    cases = boundary_cases(base, text) + truncation_cases(base, text, 150, seed=7)
    for case in cases:
        with pytest.raises(HloTextError):
            read_module(case.text or "")


def test_check_on_mutated_dumps_is_one_message_or_a_plan(tmp_path):
    """The CLI's path (the dump read, the plan rendered) on a few mutations: exit 2 with one
    message and its hint, or the plan with exit 0 or 1; never a traceback."""
    path = tmp_path / DUMP_NAME
    for base, kind, text in _mutations(77)[:30]:
        path.write_text(text)
        result = run_main("check", "--xla-dump", path)
        assert "Traceback" not in result.stderr, (kind, result.stderr)
        if result.returncode == 2:
            lines = result.stderr.splitlines()
            assert lines[0].startswith("shardscope: error: --xla-dump ") and lines[1].startswith("hint: "), kind
        else:
            assert result.returncode in (0, 1) and "compiled" in result.stdout, (kind, result.stdout)
