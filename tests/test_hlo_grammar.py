"""The HLO parser on the grammar XLA's own parser takes, not only ``as_text()``'s: XLA's 65 test
modules of WhileLoopAllReduceCodeMotion (``tests/fixtures/xla_ar_code_motion``, written by hand
there: indented headers, spaces in shapes, instructions over several lines, names reused across
computations, operands written inline, ``//`` comments, no ``HloModule`` line).

Expected counts come from the module text, read here by regular expressions written in the
test, and from ``index.json`` (what XLA's own test file says of each module).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shardscope.engine.hlo import text as hlo_text
from shardscope.engine.hlo.compiled import compiled_plan

FIXTURES = Path(__file__).parent / "fixtures" / "xla_ar_code_motion"
INDEX = json.loads((FIXTURES / "index.json").read_text())["modules"]
MODULES = sorted(FIXTURES.glob("*.hlo"))


def _without_comments(text: str) -> str:
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def test_all_65_modules_are_there():
    assert len(MODULES) == 65 == len(INDEX) and {p.name for p in MODULES} == set(INDEX)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_every_computation_and_instruction_of_an_xla_test_module(path):
    text = _without_comments(path.read_text())
    module = hlo_text.parse(text)
    headers = re.findall(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*\{\s*$", text, re.M)
    assert list(module.computations) == [name for _, name in headers]
    entries = [name for entry, name in headers if entry]
    assert module.entry_name == (entries[0] if entries else headers[-1][1])
    statements = re.findall(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s", text, re.M)
    inline = re.findall(r"[(,]\s*[a-z]\w*\[[^\]]*\]\s+[a-z][\w\-]*\(", text)
    assert module.instruction_count == len(statements) + len(inline)
    names = [inst.name for inst in module.instructions()]
    assert len(names) == len(set(names))  # unique across the module, as XLA's parser leaves them
    for computation in module.computations.values():
        own = {inst.name for inst in computation.instructions}
        for inst in computation.instructions:
            assert set(inst.operands) <= own, (inst.name, inst.operands)
        assert computation.root is not None
    written = re.findall(r"\s(all-reduce|reduce-scatter)\(", text)
    assert sorted(i.opcode for i in module.instructions() if i.opcode in ("all-reduce", "reduce-scatter")) == sorted(written)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_the_plan_of_an_xla_test_module_lists_each_loop_collective_in_its_loop(path):
    """Every all-reduce and reduce-scatter XLA's test counts (moved out or kept) is a row of the
    plan, inside the loop the module runs it in."""
    expected = INDEX[path.name]
    plan = compiled_plan(path.read_text(), backend="gpu")
    assert len(plan.collectives) == expected["moved_out_of_loop"] + expected["kept_in_loop"]
    assert all(c.in_loop for c in plan.collectives)


def test_the_grammar_by_hand():
    """Indented header and computations, a shape with spaces, an instruction over three lines,
    a tuple type written against its operand, inline operands (one inside another), a name
    reused in two computations, a ``//`` comment holding a quote, no ENTRY mark: the last
    computation is the entry."""
    text = """
      HloModule by_hand, num_partitions=4

      %sum {
        %x = f32[] parameter(0)
        ROOT %s = f32[] add(f32[] %x, f32[] parameter(1))  // "a comment
      }

      %main {
        %x = f32[1024, 1024] parameter(0)
        %t = (f32[1024, 1024], s32[]) tuple(%x, s32[] add(s32[] constant(1), s32[] constant(2)))
        %g = f32[1024, 1024] get-tuple-element((f32[1024, 1024], s32[])%t), index=0
        ROOT %ar = f32[1024, 1024]
            all-reduce(%g), channel_id=1,
            replica_groups={{0,1},{2,3}}, to_apply=%sum
      }
    """
    module = hlo_text.parse(text)
    assert module.name == "by_hand" and module.num_partitions == 4
    assert list(module.computations) == ["sum", "main"] and module.entry_name == "main"
    main = module.computations["main"]
    assert [i.opcode for i in main.instructions] == [
        "parameter", "constant", "constant", "add", "tuple", "get-tuple-element", "all-reduce"]
    x = main.instructions[0]
    assert x.name != "x" and x.shape.arrays[0].dims == (1024, 1024) and x.shape.nbytes == 4 * 1024 * 1024
    add = main.instructions[3]
    assert [module.instruction(o).literal for o in add.operands] == ["1", "2"]
    assert module.instruction("t").operands == (x.name, add.name)
    assert module.instruction("g").operands == ("t",) and module.instruction("g").tuple_index == 0
    ar = module.instruction("ar")
    assert ar.is_root and ar.operands == ("g",) and ar.channel_id == 1
    assert ar.replica_groups == "{{0,1},{2,3}}" and ar.called_computations == (("to_apply", "sum"),)
    s = module.instruction("s")
    assert s.operands[0] == "x" and module.instruction(s.operands[1]).opcode == "parameter"
    headless = hlo_text.parse(text.replace("HloModule by_hand, num_partitions=4", ""))
    assert headless.entry_name == "main" and headless.entry.root.name == "ar"


def test_tuple_elements_read_in_place():
    """Newer XLA prints a get-tuple-element folded into its user: ``%param#2`` (``%p#1#0`` for a
    nested tuple). Each is read as the get-tuple-element it stands for, made once, with the
    element's shape, so the loop analyses follow the carry through it."""
    text = """HloModule elements

%body (p: (s32[], (f32[4], f32[2]))) -> (s32[], f32[4]) {
  %p = (s32[], (f32[4]{0}, f32[2]{0})) parameter(0)
  %a = f32[4]{0} negate(%p#1#0)
  %b = f32[4]{0} add(%a, %p#1#0)
  ROOT %t = (s32[], f32[4]{0}) tuple(%p#0, %b)
}

ENTRY %main (x: (s32[], (f32[4], f32[2]))) -> (s32[], f32[4]) {
  %x = (s32[], (f32[4]{0}, f32[2]{0})) parameter(0)
  ROOT %c = (s32[], f32[4]{0}) call(%x), to_apply=%body
}
"""
    module = hlo_text.parse(text)
    body = module.computations["body"]
    assert [i.name for i in body.instructions] == ["p", "p#1", "p#1#0", "a", "b", "p#0", "t"]
    inner, leaf = module.instruction("p#1"), module.instruction("p#1#0")
    assert (inner.opcode, inner.operands, inner.tuple_index) == ("get-tuple-element", ("p",), 1)
    assert (leaf.operands, leaf.tuple_index, str(leaf.shape)) == (("p#1",), 0, "f32[4]")
    assert module.instruction("b").operands == ("a", "p#1#0") and module.instruction("t").operands == ("p#0", "b")
    assert str(module.instruction("p#0").shape) == "s32[]"
