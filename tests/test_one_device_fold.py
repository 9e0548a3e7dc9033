"""The partitioner's scatter into a replicated accumulator, judged on hand-varied module text.

``acc = all-reduce(scatter(select(p, acc, 0), rows, updates))`` (XLA's
``ChecksCarryPredicateReplication_0``; how XLA:TPU and XLA:GPU compile a gathered embedding's
gradient accumulated under jit) only accumulates when ``p`` keeps ``acc`` on exactly one device
of each group the all-reduce sums over, and nothing else carries ``acc`` into the sum: each
variant below changes one of those and reads the verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shardscope.engine.hlo.compiled import compiled_plan

BASE = (Path(__file__).parent / "fixtures" / "xla_ar_code_motion" / "ChecksCarryPredicateReplication_0.hlo").read_text()


def _verdict(text: str) -> str:
    (collective,) = compiled_plan(text, backend="gpu").collectives
    return collective.verdict.kind


def _varied(*changes: tuple[str, str]) -> str:
    text = BASE
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


_PREDICATE = "predicate_scalar = pred[] compare(id, zero_id), direction=EQ"
_GROUPS = "replica_groups={{0,1,2,3}}"
_BASE_SELECT = "base = f32[4] select(predicate, carry, zero)"


def test_the_accumulator_kept_on_one_device_and_summed_again_is_deferrable():
    assert _verdict(BASE) == "deferrable"


@pytest.mark.parametrize("direction, kind", [("LE", "deferrable"), ("NE", "needed"), ("LT", "needed"), ("GE", "needed")],
                         ids=["only-device-0", "three-devices", "no-device", "every-device"])
def test_only_a_predicate_that_keeps_exactly_one_device_folds(direction, kind):
    """``id <= 0`` keeps device 0 alone; ``id != 0`` keeps three (the carry summed three times),
    ``id < 0`` none (the carry dropped), ``id >= 0`` all four."""
    assert _verdict(_varied((_PREDICATE, _PREDICATE.replace("EQ", direction)))) == kind


def test_one_keeper_is_needed_in_every_group():
    """Summed over ``{0,1}`` and ``{2,3}``: ``id == 0`` keeps nothing in the second group; ``id % 2
    == 0`` keeps device 0 and device 2, one in each."""
    split = (_GROUPS, "replica_groups={{0,1},{2,3}}")
    assert _verdict(_varied(split)) == "needed"
    parity = ("predicate_scalar = pred[] compare(id, zero_id)",
              "two = u32[] constant(2)\n      parity = u32[] remainder(id, two)\n"
              "      predicate_scalar = pred[] compare(parity, zero_id)")
    assert _verdict(_varied(split, parity)) == "deferrable"


def test_the_accumulator_also_summed_unmasked_is_needed():
    """``select(p, acc, 0) + acc`` scattered and summed: ``acc`` reaches the sum on every device
    too, so it is summed four more times each iteration."""
    both = (_BASE_SELECT, "masked = f32[4] select(predicate, carry, zero)\n      base = f32[4] add(masked, carry)")
    assert _verdict(_varied(both)) == "needed"


def test_the_masked_accumulator_read_otherwise_is_needed():
    """The masked accumulator also taken into the next iteration's carry on its own: a value kept
    on one device is no sum."""
    text = _varied(("ROOT result = (s32[], f32[4]) tuple(next_iteration, reduced)",
                    "ROOT result = (s32[], f32[4], f32[4]) tuple(next_iteration, reduced, base)"),
                   ("initial = (s32[], f32[4]) tuple(iteration, carry)",
                    "initial = (s32[], f32[4], f32[4]) tuple(iteration, carry, carry)"),
                   ("ROOT loop = (s32[], f32[4]) while", "ROOT loop = (s32[], f32[4], f32[4]) while"))
    text = text.replace("state = (s32[], f32[4]) parameter(0)", "state = (s32[], f32[4], f32[4]) parameter(0)")  # body, condition
    assert _verdict(text) == "needed"
