"""Sums XLA's ``WhileLoopAllReduceCodeMotion`` moves out of a loop that shardscope called needed.

The modules (``tests/fixtures/code_motion/``) follow the patterns of XLA's own tests for that
pass, with a value that changes every iteration. What each test expects comes from the text
(read here with regular expressions: who reads the all-reduce, which root position it reaches)
and from a numpy simulation of four devices: the loop with the collective inside against the
loop that accumulates per device and runs the collective once after it.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from shardscope.engine.hlo.compiled import compiled_plan

FIXTURES = Path(__file__).parent / "fixtures" / "code_motion"
DEVICES = 4
_COMBINE = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply}


def _text(name: str) -> str:
    return (FIXTURES / f"{name}.hlo").read_text()


def _collective(text: str, name: str):
    (found,) = [c for c in compiled_plan(text).collectives if c.name == name]
    return found


def _users(text: str, name: str) -> list[tuple[str, str]]:
    """``(instruction, opcode)`` of every instruction whose operands name ``name``."""
    return [(m.group(1), m.group(2)) for m in re.finditer(rf"^\s+(?:ROOT )?%([\w.\-]+) = \S+ ([\w\-]+)\((?:[^)]*\s)?%{re.escape(name)}[,)]",
                                                         text, re.M)]


def _root_positions(text: str, names: list[str]) -> list[int]:
    """The positions of ``names`` in the body's root tuple."""
    root = re.search(r"ROOT %out = .* tuple\(([^)]*)\)", text).group(1)
    operands = [o.strip().lstrip("%") for o in root.split(",")]
    return [operands.index(n) for n in names]


def _trip_count(text: str) -> int | None:
    """The condition's bound when it is a constant (``compare(%i, %n)`` with ``%n = constant``)."""
    found = re.search(r"%n = s32\[\] constant\((\d+)\)", text)
    return int(found.group(1)) if found else None


def test_an_all_reduced_scalar_as_a_factor_leaves_the_product_linear_in_the_sum():
    text = _text("scalar_factor")
    # all-reduce.1 is multiplied by a broadcast of the other all-reduce's (converted) result, then added into a carry
    assert _users(text, "all-reduce.1") == [("scaled", "multiply")]
    assert re.search(r"%factor = f32\[\] convert\(%all-reduce.scalar\)", text)
    assert _users(text, "scaled") == [("sum.acc", "add")] and "%acc" in re.search(r"%sum.acc = .*", text).group()
    rng = np.random.default_rng(0)
    x, s = rng.normal(size=(DEVICES, 64)), rng.normal(size=DEVICES)
    trips = _trip_count(text)
    inside = sum((x * i).sum(0) * (s * i).sum() for i in range(trips))
    per_device = sum(x * i * (s * i).sum() for i in range(trips))  # the factor is the same on every device
    np.testing.assert_allclose(per_device.sum(0), inside)

    vector = _collective(text, "all-reduce.1")
    assert vector.verdict.kind == "deferrable", vector.verdict.reason
    assert vector.verdict.executions_after == 1 and vector.executions == trips
    scalar = _collective(text, "all-reduce.scalar")
    assert scalar.verdict.kind == "needed"  # the loop reads it as a factor


def test_one_all_reduce_sliced_into_three_accumulators_is_deferrable_with_all_three():
    text = _text("sliced_carries")
    slices = [n for n, op in _users(text, "all-reduce") if op == "slice"]
    assert len(slices) == 3
    adds = [_users(text, _users(text, s)[0][0])[0] for s in slices]
    assert {op for _, op in adds} == {"add"}
    assert sorted(_root_positions(text, [n for n, _ in adds])) == [2, 3, 4]  # three carries, one each
    plan = compiled_plan(text)
    (c,) = plan.collectives
    assert c.verdict.kind == "deferrable", c.verdict.reason
    assert c.verdict.executions_after == 1 and c.executions == _trip_count(text)
    assert "768 B accumulator" in c.verdict.reason  # the three f32[64] accumulators together


def test_a_bf16_sum_into_an_f32_accumulator_under_an_unknown_trip_count_is_deferrable_with_the_saving_unknown():
    text = _text("bf16_into_f32")
    assert _users(text, "all-reduce") == [("wide", "convert")] and _users(text, "wide") == [("sum.acc", "add")]
    assert _trip_count(text) is None  # the bound is a carry, from the entry's parameter
    accumulator, one_run = 1024 * 1024 * 4, 1024 * 1024 * 2  # f32 against bf16
    c = _collective(text, "all-reduce")
    assert c.executions is None
    assert c.verdict.kind == "deferrable", c.verdict.reason
    assert "trip count is unknown" in c.verdict.reason
    assert f"{accumulator:,} B accumulator" in c.verdict.reason and f"one run's {one_run:,} B" in c.verdict.reason
    assert "more than 2 times" in c.verdict.reason


@pytest.mark.parametrize("combiner", sorted(_COMBINE))
def test_a_value_written_into_its_own_slot_of_a_stacked_buffer_is_stackable(combiner):
    text = _text(f"stacked_slot_{combiner}")
    assert re.search(rf"ROOT %combined = f32\[\] {combiner}\(", text)
    assert _users(text, "all-reduce") == [("slot", "reshape")]
    assert re.search(r"%written = f32\[8\] dynamic-update-slice\(%losses, %slot, %i\)", text)  # at the loop index
    trips = _trip_count(text)
    rng = np.random.default_rng(1)
    x = rng.normal(size=DEVICES)
    combine = _COMBINE[combiner]
    inside = np.array([combine.reduce(x * i) for i in range(trips)])
    stacked = np.stack([x * i for i in range(trips)], axis=1)  # each device's own buffer
    np.testing.assert_allclose(combine.reduce(stacked, axis=0), inside)  # one collective of the buffer

    c = _collective(text, "all-reduce")
    assert c.verdict.kind == "stackable", c.verdict.reason
    assert not c.verdict.flagged  # a trade-off check does not fail on
    assert c.executions == trips and c.verdict.executions_after == 1
    assert f"{trips * 4:,} B buffer" in c.verdict.reason and "latency" in c.verdict.reason


def test_gathers_of_unchanged_carries_through_a_conditional_are_loop_invariant():
    """A loop whose body is a conditional (``lax.cond`` in a ``fori_loop``) that gathers two
    carried values the loop never changes: the conditional's operand tuple also holds the
    induction variable, which only the other branch reads, and its predicate is a carry the
    loop passes through."""
    text = _text("gather_in_conditional")
    body = text[text.index("%body ("):text.index("ENTRY")]
    root = re.search(r"ROOT %out = .* tuple\(([^)]*)\)", body).group(1).replace("%", "").split(", ")
    carries = {m.group(1): int(m.group(2)) for m in re.finditer(r"%([\w.]+) = \S+ get-tuple-element\(%param\), index=(\d)", body)}
    unchanged = {name for name, k in carries.items() if root[k] == name}
    assert {"flag", "k", "v"} <= unchanged and "i" not in unchanged
    conditional = re.search(r"conditional\(%(\w+), %(\w+), %(\w+)\), true_computation=%(\w+)", body)
    assert conditional.group(1) == "flag"
    operands = re.search(rf"%{conditional.group(2)} = .* tuple\(([^)]*)\)", body).group(1).replace("%", "").split(", ")
    assert operands == ["k", "v", "i"]
    branch = text[text.index(f"%{conditional.group(4)} ("):text.index("%keep (")]
    for name, element in (("all-gather.k", 0), ("all-gather.v", 1)):
        operand = re.search(rf"%{re.escape(name)} = \S+ all-gather\(%([\w.]+)\)", branch).group(1)
        assert re.search(rf"%{re.escape(operand)} = \S+ get-tuple-element\(%branch.param\), index={element}", branch)
        assert operands[element] in unchanged
        c = _collective(text, name)
        assert c.verdict.kind == "loop_invariant", c.verdict.reason
        assert c.verdict.executions_after == 1 and c.verdict.hoist_bytes == 16 * 8 * 4


def test_two_sums_multiplied_together_both_stay_in_the_loop():
    """Each of two all-reduces multiplied together is linear given the other, but deferring
    both changes the result (numpy below), so neither is deferrable: only a scalar sum, which
    reaches the product through a broadcast, may be the factor (as XLA's pass takes it)."""
    text = _text("product_of_sums")
    assert re.search(r"%scaled = f32\[64\] multiply\(%all-reduce.1, %all-reduce.2\)", text)
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(DEVICES, 64)), rng.normal(size=(DEVICES, 64))
    trips = _trip_count(text)
    inside = sum((a * i).sum(0) * (b * i).sum(0) for i in range(trips))
    both_deferred = sum((a * i) * (b * i) for i in range(trips)).sum(0)
    assert not np.allclose(both_deferred, inside)
    for name in ("all-reduce.1", "all-reduce.2"):
        assert _collective(text, name).verdict.kind == "needed"


def test_a_scatter_into_the_carry_summed_whole_is_needed_whatever_xlas_own_test_expects():
    """XLA's ``ScatterAllReduceAccumulate`` moves ``all-reduce(scatter(carry, rows, updates))``
    out of the loop. The carry is inside the sum: each iteration sums every device's copy of
    the (already summed, replicated) accumulator again, so the loop's result is not the sum of
    the per-device accumulations. numpy shows the two differ; the sum stays needed."""
    text = _text("scatter_into_the_sum")
    assert re.search(r"%scatter = f32\[8,4\] scatter\(%acc, %rows, %updates\)", text)
    assert re.search(r"%all-reduce = f32\[8,4\] all-reduce\(%scatter\)", text)
    assert _root_positions(text, ["all-reduce"]) == [1]  # the sum is the next iteration's carry
    rng = np.random.default_rng(3)
    local, rows = rng.normal(size=(DEVICES, 2, 4)), np.array([1, 5])
    inside = np.zeros((8, 4))
    for i in range(_trip_count(text)):
        scattered = np.repeat(inside[None], DEVICES, axis=0)
        np.add.at(scattered, (slice(None), rows), local * i)
        inside = scattered.sum(0)
    deferred = np.zeros((DEVICES, 8, 4))
    for i in range(_trip_count(text)):
        np.add.at(deferred, (slice(None), rows), local * i)
    assert not np.allclose(deferred.sum(0), inside)
    assert _collective(text, "all-reduce").verdict.kind == "needed"


@pytest.mark.parametrize("kind", ["device", "constant"])
def test_an_accumulator_reset_by_a_select_is_deferrable_only_when_every_device_resets_alike(kind):
    """``acc = select(keep, acc, 0) + all-reduce(value)``: a predicate the same on every device
    (a constant) resets every device's accumulator together, so the sum after the loop is the
    loop's; one from the device's id (``partition-id == 0``) keeps device 0's and drops the
    others', and deferring changes the result (numpy below). XLA's own tests agree."""
    text = _text(f"reset_by_{kind}_predicate")
    assert re.search(r"%kept = f32\[16\] select\(%keeps, %acc, %zeros\)", text)
    assert ("partition-id()" in text) == (kind == "device")
    rng = np.random.default_rng(4)
    x, trips = rng.normal(size=(DEVICES, 16)), _trip_count(text)
    keep = np.array([d == 0 for d in range(DEVICES)]) if kind == "device" else np.zeros(DEVICES, bool)
    inside = np.zeros((DEVICES, 16))
    deferred = np.zeros((DEVICES, 16))
    for i in range(trips):
        inside = np.where(keep[:, None], inside, 0) + (x * i).sum(0)
        deferred = np.where(keep[:, None], deferred, 0) + x * i
    assert np.allclose(deferred.sum(0), inside[0]) == (kind == "constant")
    c = _collective(text, "all-reduce")
    assert c.verdict.kind == ("deferrable" if kind == "constant" else "needed"), c.verdict.reason
