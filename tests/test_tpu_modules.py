"""The compiled plan of TPU modules, and what the TPU compiler did with each CPU collective.

The modules are the captured CPU and v5e:2x2 modules of both JAX versions
(``tests/fixtures/tpu``, ``capture.py`` there writes them): no libtpu is needed here. Expected
facts are written by hand from reading the module texts (the loops' conditions and starts, where
each all-reduce sits) or recounted with regular expressions written here.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from shardscope.engine.hlo import text as hlo_text
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.target_plan import (
    COMBINED, ENTERED_LOOP, LEFT_LOOP, PIPELINED, REMOVED, STAYED, compare_plans,
)

FIXTURES = Path(__file__).parent / "fixtures"
VERSIONS = ("jax-0.10.2", "jax-0.12.0.1")


def _text(version: str, program: str, backend: str) -> str:
    path = next((FIXTURES / "tpu" / version).glob(f"{program}.{backend}*.txt*"))
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def _plans(version: str, program: str):
    return compiled_plan(_text(version, program, "cpu")), compiled_plan(_text(version, program, "tpu"))


# --------------------------------------------------------------------------- trip counts

# read by hand: each condition compares carry element 0 with constant(N), LT; each body adds
# constant(1) to it; each loop starts it from constant(0) (through a copy on the TPU)
TRIPS = {"gspmd_accumulate": [4], "needed_in_loop": [4], "linear_naive": [2], "linear_deferred": [2],
         "rnn_naive": [2, 8, 8], "rnn_deferred": [2, 8, 8], "fsdp_accumulate": [4]}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("program", sorted(TRIPS))
def test_tpu_loops_count_their_trips_from_condition_body_and_start(version, program):
    text = _text(version, program, "tpu")
    assert "known_trip_count" not in text  # the TPU compiler writes none
    plan = compiled_plan(text)
    assert sorted(loop.trip_count for loop in plan.loops) == TRIPS[program]
    cpu_plan = compiled_plan(_text(version, program, "cpu"))
    assert sorted(loop.trip_count for loop in cpu_plan.loops) == TRIPS[program]


def _every_cpu_module():
    paths = sorted((FIXTURES / "tpu").glob("jax-*/*.cpu.txt*")) + sorted((FIXTURES / "hlo").glob("jax-*/*.txt"))
    return [pytest.param(p, id=f"{p.parent.parent.name}/{p.parent.name}/{p.name}") for p in paths]


@pytest.mark.parametrize("path", _every_cpu_module())
def test_derived_trip_counts_equal_the_ones_xla_wrote(path):
    """Every CPU loop's ``known_trip_count``, read from the text, equals the count derived from
    the same module with that field removed."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    written = {name: int(n) for name, n in re.findall(
        r"^\s+(?:ROOT )?%?([\w.\-]+) = .* while\(.*\"known_trip_count\":\{\"n\":\"(\d+)\"\}", text, re.M)}
    stripped = re.sub(r',?"known_trip_count":\{"n":"\d+"\}', "", text)
    counts = LoopCounts(hlo_text.parse(stripped))
    assert {name: counts.trip_count(name) for name in written} == written


def test_a_loop_whose_bound_is_data_has_an_unknown_count():
    text = _text("jax-0.12.0.1", "gspmd_accumulate", "tpu")
    bound = re.search(r"ROOT %lt\.\d+ = pred\[\]\{:T\(512\)\} compare\(%([\w.\-]+), %([\w.\-]+)\)", text)
    # compare the counter with itself plus one: never a constant bound
    changed = text.replace(f"compare(%{bound.group(1)}, %{bound.group(2)})", f"compare(%{bound.group(1)}, %{bound.group(1)})")
    assert compiled_plan(changed).loops[0].trip_count is None
    assert compiled_plan(text).loops[0].trip_count == 4


# --------------------------------------------------------------------------- shapes and forms


@pytest.mark.parametrize("version", VERSIONS)
def test_bytes_come_from_the_logical_shape_not_the_tiled_layout(version):
    text = _text(version, "gspmd_accumulate", "tpu")
    line = next(line for line in text.splitlines() if " all-reduce(" in line)
    assert "f32[16,16]{1,0:T(8,128)" in line  # padded to 16x128 in the TPU's memory
    (c,) = compiled_plan(text).collectives
    assert c.bytes_per_execution == 16 * 16 * 4 and c.operands[0].shape == "f32[16,16]"


def _collective_lines(text: str) -> list[tuple[str, str]]:
    """``(opcode, channel_id)`` of every collective instruction line."""
    return re.findall(r"\s(all-gather|all-reduce|all-to-all|reduce-scatter|collective-permute)(?:-start)?\("
                      r".*?channel_id=(\d+)", text)


@pytest.mark.parametrize("version", VERSIONS)
def test_fsdp_on_tpu_counts_each_collective_once_in_every_fused_form(version):
    """The TPU prints an async collective fusion's all-gather three times (start, overlap and done
    fusions, one channel) and sums the gradients in all-reduce-scatter fusions: one collective
    per channel, all in the micro-batch loop."""
    text = _text(version, "fsdp_accumulate", "tpu")
    lines = _collective_lines(text)
    plan = compiled_plan(text)
    assert len(plan.collectives) == len(set(lines))
    assert sorted(c.kind for c in plan.collectives) == sorted(kind for kind, _ in set(lines))
    assert all(c.loop_trip_counts == (4,) for c in plan.collectives)
    (scattered,) = [c for c in plan.collectives if c.kind == "all-reduce"]
    assert scattered.scatters and scattered.wrapper and scattered.bytes_per_execution == 1024 * 512 * 4
    assert scattered.verdict.kind == "deferrable" and "unscattered sum, 2,097,152 B" in scattered.verdict.reason
    if version == "jax-0.12.0.1":
        repeated = [ch for ch in {ch for _, ch in lines} if sum(1 for _, c in lines if c == ch) == 3]
        assert len(repeated) == 1  # the async collective fusion's all-gather
        assert sum(1 for c in plan.collectives if c.kind == "all-gather" and c.wrapper) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_the_tpu_keeps_a_loop_invariant_weight_gather_in_the_loop(version):
    """w1's all-gather: the CPU hoists it before the loop, the TPU gathers it every micro-batch."""
    cpu, tpu = _plans(version, "fsdp_accumulate")
    (cpu_gather,) = [c for c in cpu.collectives if c.kind == "all-gather" and not c.in_loop]
    assert cpu_gather.value == "params['w1']" and cpu_gather.executions == 1
    invariant = [c for c in tpu.collectives if c.verdict.kind == "loop_invariant"]
    assert [c.kind for c in invariant] == ["all-gather"] and invariant[0].executions == 4
    placement = compare_plans(cpu, tpu).placement(cpu_gather.name)
    assert placement.change == ENTERED_LOOP and placement.target == tuple(invariant) and placement.executions == 4


# --------------------------------------------------------------------------- the TPU's verdicts


@pytest.mark.parametrize("version", VERSIONS)
def test_the_rnn_recurrent_weights_sum_left_the_time_loop_and_is_deferrable_from_the_chunk_loop(version):
    """On the TPU the Wh all-reduce sums the time loop's result in the chunk loop, added into the
    accumulator through select(i == 0, 0, acc): deferrable, as XLA's own pass would see it."""
    _, tpu = _plans(version, "rnn_naive")
    in_loop, at_entry = sorted(tpu.collectives, key=lambda c: not c.in_loop)
    assert in_loop.operands[0].shape == "f32[16,16]" and in_loop.loop_trip_counts == (2,) and in_loop.executions == 2
    assert in_loop.verdict.kind == "deferrable" and in_loop.verdict.executions_after == 1
    assert [op.shape for op in at_entry.operands] == ["f32[4,16]", "f32[16]"] and at_entry.executions == 1


# --------------------------------------------------------------------------- CPU against TPU

# read by hand from the modules: where each CPU all-reduce is on the TPU, and how often it runs
PLACEMENTS = {
    "gspmd_accumulate": [(LEFT_LOOP, 4, 1)],
    "needed_in_loop": [(STAYED, 4, 4)],
    "linear_naive": [(LEFT_LOOP, 2, 1)],
    "linear_deferred": [(STAYED, 1, 1)],
    "rnn_naive": [(LEFT_LOOP, 16, 2), (LEFT_LOOP, 2, 1)],
    "rnn_deferred": [(STAYED, 1, 1)],
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("program", sorted(PLACEMENTS))
def test_each_cpu_all_reduce_pairs_with_what_the_tpu_made_of_it(version, program):
    cpu, tpu = _plans(version, program)
    comparison = compare_plans(cpu, tpu, "v5e:2x2")
    got = [(p.change, p.collective.executions, p.executions) for p in comparison.placements]
    assert sorted(got) == sorted(PLACEMENTS[program])
    assert not comparison.added and len(comparison.loop_pairs) == len(cpu.loops)


@pytest.mark.parametrize("version", VERSIONS)
def test_rnn_naive_says_which_loop_the_recurrent_sum_left_and_which_it_stays_in(version):
    cpu, tpu = _plans(version, "rnn_naive")
    comparison = compare_plans(cpu, tpu, "v5e:2x2")
    (wh,) = [p for p in comparison.placements if p.collective.operands[0].shape == "f32[16,16]"]
    assert [loop.trip_count for loop in wh.left] == [8] and [loop.trip_count for loop in wh.stays_in] == [2]
    assert "leaves" in wh.describe() and "and stays in" in wh.describe()
    (rest,) = [p for p in comparison.placements if p is not wh]
    assert [loop.trip_count for loop in rest.left] == [2] and not rest.stays_in and not rest.combined
    assert comparison.staying_findings == (wh,) and rest.deferred_by_compiler


@pytest.mark.parametrize("version", VERSIONS)
def test_the_accumulation_needs_no_fix_on_the_tpu(version):
    cpu, tpu = _plans(version, "gspmd_accumulate")
    comparison = compare_plans(cpu, tpu)
    (p,) = comparison.placements
    assert p.collective.verdict.flagged and p.deferred_by_compiler and not comparison.staying_findings


_LOOP_MODULE = """HloModule m, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %acc = f32[4]{0} get-tuple-element(%p), index=1
  %x = f32[4]{0} sine(%acc)
  %ar = f32[4]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/while/body/psum"}
  ROOT %t = (s32[], f32[4]{0}) tuple(%next, %ar)
}

%cond (q: (s32[], f32[4])) -> pred[] {
  %q = (s32[], f32[4]{0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(6)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x0 = f32[4]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(%zero, %x0)
  %loop = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body, metadata={op_name="jit(f)/while"}
  ROOT %out = f32[4]{0} get-tuple-element(%loop), index=1
}
"""


def test_a_collective_peeled_out_of_its_loop_is_pipelined_and_one_gone_is_removed():
    """A target module with the loop's all-reduce both in the body (5 iterations) and once
    before the loop (the pipeliner's peeled first iteration): pipelined; one without it: removed."""
    cpu = compiled_plan(_LOOP_MODULE)
    peeled = _LOOP_MODULE.replace("constant(6)", "constant(5)").replace(
        "  %init = (s32[], f32[4]{0}) tuple(%zero, %x0)",
        "  %x1 = f32[4]{0} sine(%x0)\n"
        '  %ar0 = f32[4]{0} all-reduce(%x1), channel_id=2, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/while/body/psum"}\n'
        "  %init = (s32[], f32[4]{0}) tuple(%zero, %ar0)")
    (p,) = compare_plans(cpu, compiled_plan(peeled)).placements
    assert p.change == PIPELINED and {t.executions for t in p.target} == {5, 1} and p.executions == 6
    gone = _LOOP_MODULE.replace('all-reduce(%x), channel_id=1, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/while/body/psum"}', "cosine(%x)")
    (p,) = compare_plans(cpu, compiled_plan(gone)).placements
    assert p.change == REMOVED and p.removed and "is removed" in p.describe()


def test_two_cpu_sums_the_target_merges_into_one_are_combined():
    cpu_text = _LOOP_MODULE.replace(
        "  ROOT %t = (s32[], f32[4]{0}) tuple(%next, %ar)",
        '  %ar2 = f32[4]{0} all-reduce(%acc), channel_id=3, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/while/body/psum_1"}\n'
        "  %both = f32[4]{0} multiply(%ar, %ar2)\n  ROOT %t = (s32[], f32[4]{0}) tuple(%next, %both)")
    merged = cpu_text.replace(
        '  %ar = f32[4]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/while/body/psum"}\n', "").replace(
        '  %ar2 = f32[4]{0} all-reduce(%acc), channel_id=3, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/while/body/psum_1"}\n',
        '  %pair = (f32[4]{0}, f32[4]{0}) all-reduce(%x, %acc), channel_id=1, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/while/body/psum"}\n'
        "  %ar = f32[4]{0} get-tuple-element(%pair), index=0\n  %ar2 = f32[4]{0} get-tuple-element(%pair), index=1\n")
    comparison = compare_plans(compiled_plan(cpu_text), compiled_plan(merged))
    assert [p.change for p in comparison.placements] == [COMBINED, COMBINED]
    assert {p.target[0].name for p in comparison.placements} == {"pair"}
