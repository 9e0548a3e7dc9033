"""The HLO text parser on real compiled modules of both JAX versions, and on printing variants.

Each version's suite compiles its own modules live and parses the other version's modules from
``tests/fixtures/hlo/`` (``capture.py`` there writes them). Expected facts come from the text
itself (regular expressions written here) or from the Python source of the programs.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import jax
import pytest

import _compiled_programs as programs
from shardscope.engine.hlo import text as hlo_text

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
FIXTURE_TEXTS = sorted(FIXTURES.glob("jax-*/*.txt"))


def test_fixtures_of_both_versions_are_there():
    versions = {path.parent.name for path in FIXTURE_TEXTS}
    assert {"jax-0.10.2", "jax-0.12.0.1"} <= versions


@pytest.mark.parametrize("path", FIXTURE_TEXTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_instruction_and_computation_of_a_captured_module(path):
    text = path.read_text()
    module = hlo_text.parse(text)
    _check_against_text(module, text)


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_a_live_module_of_this_version(shardy):
    text = programs.compiled_text(programs.gspmd_accumulate, shardy=shardy)
    module = hlo_text.parse(text)
    _check_against_text(module, text)
    (all_reduce,) = [inst for inst in module.instructions() if inst.opcode == "all-reduce"]
    # the combiner merged the gradients of W and V: a tuple of both (transposed or not)
    assert all_reduce.shape.is_tuple and sorted(a.elements for a in all_reduce.shape.arrays) == [32 * 8, 16 * 32]
    assert all_reduce.shape.nbytes == 4 * (16 * 32 + 32 * 8)
    assert len(all_reduce.operands) == 2 and all(module.instruction(o) is not None for o in all_reduce.operands)
    assert all_reduce.attribute("to_apply") and all_reduce.channel_id is not None and all_reduce.use_global_device_ids
    assert all_reduce.metadata.op_name.startswith("jit(step)/while/body/")
    (loop,) = [inst for inst in module.instructions() if inst.opcode == "while"]
    assert loop.known_trip_count == programs.MICRO
    roles = dict(loop.called_computations)
    assert all_reduce.computation == roles["body"] and roles["condition"] in module.computations
    names = {p.metadata.op_name for p in module.entry.parameters}
    assert {"params['W']", "params['V']", "xs", "ys"} <= names


def test_stack_frames_name_the_lines_of_the_program():
    """The all-reduce's stack: the loss's line, then the jax.grad call in the scan body, then the
    lax.scan call in the step, each where the source of _compiled_programs has it."""
    text = programs.compiled_text(programs.gspmd_accumulate)
    module = hlo_text.parse(text)
    (all_reduce,) = [inst for inst in module.instructions() if inst.opcode == "all-reduce"]
    stack = module.stack_frames.stack(all_reduce.metadata.stack_frame_id)
    source, first = inspect.getsourcelines(programs._mlp_loss)
    loss_lines = range(first, first + len(source))
    assert stack[0].function == "_mlp_loss" and stack[0].line in loss_lines
    assert stack[0].file == programs.__file__
    builder, start = inspect.getsourcelines(programs.gspmd_accumulate)
    grad_line = start + next(i for i, line in enumerate(builder) if "jax.grad(_mlp_loss)" in line)
    scan_line = start + next(i for i, line in enumerate(builder) if "lax.scan(body" in line)
    functions = [frame.function for frame in stack]
    assert functions[1].endswith("step.<locals>.body") and stack[1].line == grad_line
    assert functions[2].endswith("step") and stack[2].line == scan_line
    assert module.source(all_reduce) == stack[0]
    assert str(stack[0]) == f"_compiled_programs.py:{stack[0].line} (_mlp_loss)"


def test_parent_frames_are_printed_plus_one():
    """``parent_frame_id=1`` is the root: the proto's 0 printed as 0 + 1."""
    text = """HloModule m, entry_computation_layout={()->f32[]}

FileNames
1 "a.py"
2 "b/c.py"

FunctionNames
1 "outer"
2 "inner"

FileLocations
1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=2 end_column=2}
2 {file_name_id=2 function_name_id=2 line=20 end_line=20 column=4 end_column=4}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}

ENTRY %main () -> f32[] {
  ROOT %c = f32[] constant(1), metadata={op_name="jit(f)/x" stack_frame_id=2}
}
"""
    module = hlo_text.parse(text)
    assert [str(loc) for loc in module.stack_frames.stack(2)] == ["c.py:20 (inner)", "a.py:10 (outer)"]
    assert module.stack_frames.stack(1) == (hlo_text.SourceLocation("a.py", 10, "outer", 2),)
    assert module.source(module.entry.root).text(short=False) == "b/c.py:20 (inner)"
    assert module.stack_frames.stack(7) == ()


def test_inline_source_positions_of_older_xla():
    text = """HloModule m

ENTRY main {
  p = f32[4]{0} parameter(0), metadata={op_name="x"}
  ROOT ar = f32[4]{0} all-reduce(f32[4]{0} p), replica_groups={}, to_apply=add, metadata={op_type="psum" op_name="jit(f)/psum" source_file="/src/train.py" source_line=42}
}
"""
    module = hlo_text.parse(text)
    root = module.entry.root
    assert root.operands == ("p",) and root.metadata.op_type == "psum" and root.metadata.primitive == "psum"
    assert module.source(root) == hlo_text.SourceLocation("/src/train.py", 42)
    assert module.source(module.instruction("p")) is None


def test_printing_variants():
    """Typed operands, tuple operands with index comments, no sigils, escapes, mesh groups with
    a comma of their own, JSON backend configs and frontend attributes."""
    text = r"""HloModule variants, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (p0: (f32[2,3], s4[5]), p1: f32[8]) -> (f32[8], f32[8]) {
  %p0 = (f32[2,3]{1,0}, s4[5]{0}) parameter(0), metadata={op_name="params[\'W\']\303\251"}
  %p1 = f32[8]{0} parameter(1)
  %g = f32[2,3]{1,0} get-tuple-element((f32[2,3]{1,0}, s4[5]{0}) %p0), index=0
  %t = (f32[8]{0}, f32[8]{0}, f32[8]{0}, f32[8]{0}, f32[8]{0}, /*index=5*/f32[8]{0}) tuple(%p1, %p1, %p1, %p1, %p1, /*index=5*/%p1)
  %ar = (f32[8]{0}, f32[8]{0}) all-reduce(%p1, %p1), channel_id=3, replica_groups=mesh['axis_0'=1,'axis_1'=2,'axis_2'=4], device_ids=([4,2]T(1,0)) {'axis_1'}, use_global_device_ids=true, to_apply=%add, frontend_attributes={is_spmd_generated="true",_scheduling_group_id="2"}, metadata={op_name="jit(f)/dot_general" stack_frame_id=3}, backend_config={"collective_backend_config":{"is_sync":true}}
  ROOT %r = (f32[8]{0}, f32[8]{0}) tuple(%p1, %p1)
}
"""
    for variant in (text, text.replace("%", "")):
        module = hlo_text.parse(variant)
        assert module.num_partitions == 8 and module.entry_name == "main" and module.name == "variants"
        p0 = module.instruction("p0")
        assert p0.shape.is_tuple and [str(a) for a in p0.shape.arrays] == ["f32[2,3]", "s4[5]"]
        assert p0.shape.nbytes == 24 + 3  # five 4-bit integers take 3 bytes
        assert p0.metadata.op_name == "params['W']é"
        assert module.instruction("g").operands == ("p0",) and module.instruction("g").tuple_index == 0
        assert module.instruction("t").operands == ("p1",) * 6 and len(module.instruction("t").shape.elements) == 6
        ar = module.instruction("ar")
        assert ar.replica_groups == "mesh['axis_0'=1,'axis_1'=2,'axis_2'=4], device_ids=([4,2]T(1,0)) {'axis_1'}"
        assert ar.is_spmd_generated and ar.frontend_attributes["_scheduling_group_id"] == "2"
        assert ar.backend_config == {"collective_backend_config": {"is_sync": True}}
        assert ar.called_computations == (("to_apply", "add"),) and ar.channel_id == 3
        assert module.entry.root.name == "r" and module.computations["add"].root.opcode == "add"
        assert [p.name for p in module.entry.parameters] == ["p0", "p1"]


def test_empty_and_garbage_text():
    assert hlo_text.parse("").computations == {}
    assert hlo_text.parse("not hlo at all\n{\n}\n").entry is None
    module = hlo_text.parse("0.10.2 True\nHloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(0)\n}\n")
    assert module.entry.root.literal == "0" and module.entry.root.operands == ()


def _check_against_text(module: hlo_text.HloModule, text: str) -> None:
    """Every instruction line and computation of ``text`` (found by regular expressions written
    here) is in the parse, with its shape, opcode and operand count."""
    lines = re.findall(r"^\s+(?:ROOT )?%?([\w.\-]+) = (\(.*?\)|\S+) ([a-z][a-z0-9\-]*)\((.*)$", text, re.M)
    assert module.instruction_count == len(lines) > 0
    for name, shape, opcode, _ in lines[:: max(1, len(lines) // 300)]:
        inst = module.instruction(name)
        assert (inst.shape_text, inst.opcode) == (shape, opcode)
        for operand in inst.operands:
            assert module.instruction(operand) is not None, (name, operand)
    headers = re.findall(r"^(ENTRY )?%?([\w.\-]+) \(.*\{$", text, re.M)
    assert list(module.computations) == [name for _, name in headers]
    assert module.entry_name == next(name for entry, name in headers if entry)
    for loop in (inst for inst in module.instructions() if inst.opcode == "while"):
        line = next(line for line in text.splitlines() if f" {loop.name} = " in line or f"%{loop.name} = " in line)
        trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
        assert loop.known_trip_count == (int(trip.group(1)) if trip else None)
    frames = re.findall(r"^\d+ \{file_location_id=(\d+) parent_frame_id=(\d+)\}$", text, re.M)
    assert [(f.file_location_id, f.parent_frame_id + 1) for f in module.stack_frames.frames] == [
        (int(a), int(b)) for a, b in frames]


def test_the_parse_leaves_the_callers_garbage_collector_alone():
    """A library call (``shardscope.inspect`` in a user's test run) must not switch the
    collector off: every Python function the parse and the plan call runs with the collector
    on, as the caller left it."""
    import gc
    import sys

    from shardscope.engine.hlo.compiled import compiled_plan

    text = (FIXTURES / "jax-0.12.0.1" / "scan_over_layers.txt").read_text()
    states: set[bool] = set()

    def watch(frame, event, arg):
        if event == "call":
            states.add(gc.isenabled())

    assert gc.isenabled()
    sys.setprofile(watch)
    try:
        hlo_text.parse(text)
        compiled_plan(text)
    finally:
        sys.setprofile(None)
    assert states == {True} and gc.isenabled()


def test_a_merged_op_name_names_each_op_it_merges():
    """XLA merges the op_names of the collectives it combines: the common path, then each op's
    own in parentheses joined by ``:`` (read from a jax 0.10.2 module here)."""
    from shardscope.engine.hlo.text import op_primitives

    merged = "jit(local)/shard_map/while/body/closed_call/(psum_invariant:transpose(jvp())/psum_invariant)"
    assert op_primitives(merged) == ("psum_invariant",)
    assert op_primitives("jit(step)/while/body/closed_call/(jvp()/reduce_sum:transpose(jvp())/dot_general)") == (
        "reduce_sum", "dot_general")
    assert op_primitives("jit(f)/while/body/psum") == ("psum",)
    assert op_primitives("jit(f)/transpose(jvp())/dot_general") == ("dot_general",)
    assert op_primitives("") == ()
