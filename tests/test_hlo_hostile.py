"""Module text as an input format: ``check --xla-dump FILE`` and ``shardscope.estimate_module(text, chip)``
on text that is cut off, edited, nested without end, huge, cyclic or not HLO at all (issue 53, items
14 to 19). Each is one message naming the line to blame and exit 2 (a ``ShardscopeError`` that is a
``ValueError`` or ``TypeError`` through the API), never a traceback, a hang or a plan of garbage; a
real module still parses as it did.

Line numbers and counts are found here, in the test's own text (``str.index``, regular expressions
written in the test), not asked of the parser.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import shardscope
from _support import PYTHON, ROOT, run_main
from benchmarks.hlo_cases import CPU_DUMP, DUMP_NAME, TPU_DUMP, boundary_cases, hostile_cases
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.dump_files import MAX_FILE_BYTES
from shardscope.engine.hlo.text import parse
from shardscope.engine.hlo.well_formed import MAX_CALL_DEPTH, read_module
from shardscope.errors import ArgumentTypeError, ChipError, HloTextError, SettingsError, ShardscopeError

CPU = CPU_DUMP.read_text()
TPU = TPU_DUMP.read_text()
FIXTURES = Path(__file__).parent / "fixtures"


def _line(text: str, needle: str) -> int:
    """The line of ``text`` that ``needle`` starts on, counted here."""
    return text[: text.index(needle)].count("\n") + 1


def _refused(text: str, *words: str) -> HloTextError:
    with pytest.raises(HloTextError) as caught:
        read_module(text)
    message = str(caught.value)
    for word in words:
        assert word in message, message
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ShardscopeError)
    return caught.value


def _entry_line(text: str, line: str) -> str:
    """``text`` with ``line`` first in its ENTRY computation."""
    at = text.index("\n", text.index("\nENTRY ") + 1) + 1
    return text[:at] + "  " + line + "\n" + text[at:]


# -- a module cut off: always refused, with the computation it ends inside -----------------------


def _header_before(text: str, cut: int) -> tuple[str, int] | None:
    """The computation whose header is the last one before ``cut`` and is not closed before it:
    ``(name, its header's line)``, read with a regular expression written here."""
    found = None
    for match in re.finditer(r"^(?:ENTRY )?%([\w.\-]+) .*\{$", text, re.M):
        if match.end() > cut:
            break
        closed = re.search(r"^\}$", text[match.end():cut], re.M) is not None
        found = None if closed else (match.group(1), text[: match.start()].count("\n") + 1)
    return found


@pytest.mark.parametrize("base", [CPU, TPU], ids=["cpu", "tpu"])
def test_a_module_cut_at_any_computation_boundary_is_refused(base):
    cases = boundary_cases("module", base)
    assert len(cases) == 3 * len(re.findall(r"^(?:ENTRY )?%[\w.\-]+ .*\{$", base, re.M)) + base.count("\n}\n") - 1
    for case in cases:
        error = _refused(case.text or "")
        open_at = _header_before(base, len(case.text or ""))
        if open_at is not None and "inside the header" not in case.name:
            name, line = open_at
            assert f"the text, line {line}: the computation %{name} is not closed: the text ends inside it; was the " \
                   "run killed while writing its dump?" in str(error), (case.name, str(error))
            assert error.line == ("the text", line)


def test_a_module_cut_at_random_points_is_always_refused():
    cuts = sorted({(k * 7919) % (len(CPU) - 2) + 1 for k in range(300)})
    for cut in cuts:
        if not CPU[cut:].strip():
            continue
        with pytest.raises(HloTextError):
            read_module(CPU[:cut])


def test_a_module_cut_before_its_entry_is_not_read_as_one_whose_last_computation_is_the_entry():
    cut = CPU.index("\nENTRY ") + 1
    _refused(CPU[:cut], "no computation is marked ENTRY", "the text ends before its ENTRY computation",
             "was the run killed while writing its dump?")
    by_hand = "HloModule m\n\n%a {\n  ROOT %x = f32[] constant(1)\n}\n"  # no layout in its header: written by hand
    assert read_module(by_hand).entry_name == "a"


def test_check_on_a_cut_off_dump_names_the_line_and_exits_2(tmp_path):
    path = tmp_path / DUMP_NAME
    cut = CPU.index("%while.13 = ")
    path.write_text(CPU[:cut])
    result = run_main("check", "--xla-dump", path)
    header = CPU.rindex("\nENTRY ", 0, cut) + 1
    line = CPU[:header].count("\n") + 1
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0] == (
        f"shardscope: error: --xla-dump {path}, line {line}: the computation %main.0_spmd is not closed: the text "
        "ends inside it; was the run killed while writing its dump?")
    assert result.stderr.splitlines()[1].startswith("hint: copy the module again")
    assert result.stdout == ""


# -- structure ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("edit", "words", "blamed"), [
    (lambda t: t.replace("copy(%constant.5.clone.1)", "copy(%nowhere)", 1),
     "%copy.10 reads %nowhere, which is no instruction of %main.0_spmd", "%copy.10 = "),
    (lambda t: t.replace("copy(%constant.5.clone.1)", "copy(%param_0.3)", 1),
     "%copy.10 reads %param_0.3, which is no instruction of %main.0_spmd", "%copy.10 = "),
    (lambda t: t.replace(" copy(%constant.5.clone.1)", " frobnicate(%constant.5.clone.1)", 1),
     "%copy.10 has the opcode 'frobnicate', which XLA does not have", "%copy.10 = "),
    (lambda t: t.replace("calls=%fused_computation.3", "calls=%missing", 1),
     "%multiply_subtract_fusion calls %missing (as its calls), and no computation has that name",
     "ROOT %multiply_subtract_fusion = "),
    (lambda t: _entry_line(t, "%cy.a = s32[] copy(%cy.b)\n  %cy.b = s32[] copy(%cy.a)"),
     "%cy.a reads its own result (through its operands)", "%cy.a = "),
    (lambda t: _entry_line(t, "this is not an instruction"), "not an instruction: 'this is not an instruction",
     "this is not"),
    (lambda t: _entry_line(t, "%dup = f32[] constant(0)\n  %dup = f32[] constant(1)"),
     "%dup is defined twice in %main.0_spmd", "%dup = f32[] constant(1)"),
    (lambda t: _entry_line(t, "ROOT %r0 = f32[] constant(0)"), "a second ROOT in %main.0_spmd (%r0 is its first)",
     "ROOT %multiply_subtract_fusion = "),
    (lambda t: t.replace("\nENTRY ", "\n}\nENTRY ", 1), "a '}' that closes no computation", "}\nENTRY "),
    (lambda t: t.replace("\n%region_1.0 (", "\nENTRY %region_1.0 (", 1), "a second ENTRY computation, %main.0_spmd",
     "ENTRY %main.0_spmd"),
    (lambda t: _entry_line(t, "%bad = f32[] constant(0)" + ")" * 30_000), "text after the operands of %bad", "%bad = "),
])
def test_a_module_edited_out_of_shape_names_the_line(edit, words, blamed):
    text = edit(CPU)
    error = _refused(text, words)
    assert f"the text, line {_line(text, blamed)}: " in str(error), str(error)


def _while_line() -> str:
    return next(line for line in CPU.splitlines() if " while(" in line)


def test_a_while_without_its_body_or_condition_or_calling_itself_is_refused():
    line = _while_line()
    body = re.search(r"body=%([\w.\-]+)", line).group(1)
    _refused(CPU.replace(line, line.replace(f", body=%{body}", "")), "the while %while.13 has no body computation")
    _refused(CPU.replace(line, line.replace("condition=", "kondition=")), "has no condition computation")
    _refused(CPU.replace(line, line.replace(f"body=%{body}", "body=%main.0_spmd")),
             "%main.0_spmd calls itself (%main.0_spmd -> %main.0_spmd, through %while.13): HLO's calls never loop")


def test_a_call_graph_that_loops_nests_too_deep_or_expands_without_end_is_refused():
    by_name = {case.name: case.text for case in hostile_cases(CPU)}
    _refused(by_name["call cycle of two computations"], "%ping calls itself (%ping -> %pong -> %ping, through %d)")
    _refused(by_name["while body calls itself"], "calls itself")
    error = _refused(by_name["call chain 10,000 deep"], f"calls nest more than {MAX_CALL_DEPTH} deep from the entry")
    assert f"(%link{MAX_CALL_DEPTH}, called by" in str(error)
    for name in ("diamond of 40 calls", "diamond of 40 calls around an all-reduce", "diamond of 40 while loops"):
        error = _refused(by_name[name], "instructions (16 times the module's own, and 10,000)", "call paths from the entry")
        module = parse(by_name[name])
        assert f"the calls expand to more than {16 * module.instruction_count + 10_000:,} instructions" in str(error)


def test_a_diamond_of_a_few_calls_is_a_module_and_its_collective_runs_once_per_path():
    text = next(case.text for case in hostile_cases(CPU) if case.name == "diamond of 40 calls around an all-reduce")
    start = text.index("%level0 (")
    small = text.replace("to_apply=%level5\n", "to_apply=%level40\n")  # level 4 calls the leaf: 2**5 paths to it
    plan = compiled_plan(read_module(small))
    (leaf,) = [c for c in plan.collectives if c.name == "ar"]
    assert start > 0 and leaf.paths == 2**5 and leaf.executions == 2**5


# -- numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "words"), [
    ("f32[8,x]", "a dimension that is not a number ('x')"),
    ("f32[-1]", "a negative dimension (-1)"),
    ("f32[,]", "an empty dimension"),
    ("q99[8]", "q99 is not an element type XLA prints"),
    ("f32[18446744073709551616]", "a dimension of more than 19 digits"),
    ("f32[99999999999,99999999999]", "holds more elements than XLA counts (2**63)"),
    ("f32[1e18]", "a dimension that is not a number ('1e18')"),
    ("(" * 100 + "f32[]" + ")" * 100, "tuples nested more than 64 deep"),
    (f"f32[{'9' * 5000}]", "a number of 5,000 digits: no number XLA prints has more than 40"),
])
def test_a_shape_that_is_none_names_its_line(shape, words):
    text = _entry_line(CPU, f"%bad = {shape} parameter(9)")
    error = _refused(text, words)
    assert f"line {_line(text, '%bad = ')}:" in str(error)


@pytest.mark.parametrize(("count", "words"), [
    ('"abc"', "gives known_trip_count 'abc', which is not a count"),
    ('"1e18"', "which is not a count"), ("null", "which is not a count"), ("[]", "which is not a count"),
    ("NaN", "which is not a count"), ("Infinity", "which is not a count"), ("1.5", "which is not a count"),
    ('"-1"', "runs -1 times (known_trip_count): XLA removes a loop that never runs"),
    ('"0"', "runs 0 times"), (f'"{"9" * 5000}"', "which is not a count"), ("9" * 5000, "no number XLA prints"),
    ('"99999999999999999999"', "which is not a count"),
])
def test_a_trip_count_that_is_no_count_is_refused(count, words):
    line = _while_line()
    text = CPU.replace(line, line.replace('"known_trip_count":{"n":"4"}', '"known_trip_count":{"n":' + count + "}"))
    error = _refused(text, words)
    assert f"line {_line(text, '%while.13 = ')}:" in str(error)


@pytest.mark.parametrize(("groups", "words"), [
    ("{{0,x}}", "a device id that is not one"),
    ("[3000000000,1]<=[3000000000]", "replica groups over 3000000000 devices: at most 1,048,576 are read"),
    ("[2,2]<=[3]", "iota replica groups whose shape [2, 2] its 3 devices do not fill"),
    ("[4,2]<=[2,4]T(5,0)", "T(5, 0) is not a permutation of the 2 dimensions [2, 4]"),
    ("mesh['data'=3000000000] {'data'}", "at most 1,048,576 are read"),
    ("mesh['data'=8] {'nope'}", "replica groups over 'nope', which is not an axis"),
    ("{{0,9}}", "names device 9, and the module runs on 8"),
])
def test_replica_groups_that_are_none_are_refused_before_an_array_is_made(groups, words):
    text = CPU.replace("replica_groups=mesh['data'=8] {'data'}", f"replica_groups={groups}", 1)
    error = _refused(text, "the devices of %psum_invariant.18" if "names device" not in words else "", words)
    assert f"line {_line(text, '%psum_invariant.18 = ')}:" in str(error)


def test_deep_and_long_text_is_read_in_one_pass():
    """Each of these overflowed Python's stack, made a quadratic parse or held a regular
    expression for minutes; each is now refused (or read) in one pass: the test only needs them
    to finish, with the right answer."""
    by_name = {case.name: case.text for case in hostile_cases(CPU)}
    _refused(by_name["tuple shape 100,000 deep"], "tuples nested more than 64 deep")
    _refused(by_name["#-chain 10,000 long"], "reads the tuple element %param.5#0#0", "nested deeper than tuples nest")
    _refused(by_name["backend_config JSON 100,000 deep"], "the backend_config of the while loop %while.13 is no JSON")
    _refused(by_name["30,000 unclosed parentheses, one a line"], "the computation %main.0_spmd is not closed")
    _refused(by_name["200 KB unclosed quoted string"], "is not closed")
    _refused(by_name["60,000 duplicate instruction names"], "%dup is defined twice in %main.0_spmd")
    deep = read_module(by_name["inline operands 10,000 deep"])
    assert deep.instruction_count == parse(CPU).instruction_count + 10_002  # %deep, each negate inside it, the constant
    assert read_module(by_name["200 KB quoted string of escapes"]).instruction("s").metadata.op_name == '"' * 100_000
    assert len(read_module(by_name["60,000 duplicate names across computations"]).computations) == 60_013


def test_a_module_past_the_most_instructions_is_refused_before_more_are_made(monkeypatch):
    from shardscope.engine.hlo import inline_operands

    monkeypatch.setattr(inline_operands, "MAX_INSTRUCTIONS", 50)
    inline = "f32[] negate(" * 1000 + "f32[] constant(1)" + ")" * 1000
    deep = f"HloModule m\n\nENTRY %e () -> f32[] {{\n  ROOT %deep = f32[] negate({inline})\n}}\n"
    for text in (CPU, deep):
        module = parse(text)
        assert module.instruction_count <= 52  # the instruction that went past it, and what it wrote inline so far
        _refused(text, "the module holds more than 50 instructions: shardscope reads modules of at most that many")


def test_binary_text_is_refused_at_its_first_control_character():
    text = _entry_line(CPU, "%n = f32[] constant(0)\x00")
    _refused(text, f"the text, line {_line(text, '%n = ')}: a NUL byte at column 25: it is binary, not HLO text")
    _refused("\x89PNG\r\n\x1a\n", "the control character '\\x1a'")
    _refused("", "the text holds no computation: it is not HLO text")


# -- the API's arguments ------------------------------------------------------------------------


def test_estimate_module_takes_a_chip_by_name_never_a_path(tmp_path):
    description = (ROOT / "shardscope" / "gpu_descriptions" / "h100.txtpb").read_text()
    (tmp_path / "mine.txtpb").write_text(description)
    for chip in (str(tmp_path / "mine"), "../gpu_descriptions/h100", "gpu_descriptions/h100", "x" * 256, ""):
        with pytest.raises(ChipError, match="no chip called") as caught:
            shardscope.estimate_module(CPU, chip)
        assert isinstance(caught.value, ValueError)
    assert shardscope.estimate_module(CPU, f"gpu:{tmp_path / 'mine.txtpb'}").chip == "mine"
    assert shardscope.estimate_module(CPU, " H100 ").chip == "h100"
    for chip in ("gpu:/dev/zero", f"gpu:{tmp_path / 'missing.txtpb'}"):
        with pytest.raises(ChipError, match="GPU description"):
            shardscope.estimate_module(CPU, chip)
    for chip in (None, 5, b"v5e", ["v5e"]):
        with pytest.raises(ArgumentTypeError, match="not a chip's name") as caught:
            shardscope.estimate_module(CPU, chip)
        assert isinstance(caught.value, TypeError)
    for text in (None, CPU.encode(), 5):
        with pytest.raises(ArgumentTypeError, match="hlo_text is .*, not a str") as caught:
            shardscope.estimate_module(text, "v5e")
        assert isinstance(caught.value, TypeError)


def test_estimate_module_never_estimates_random_or_cut_text():
    import random

    rng = random.Random(5)
    for text in ("".join(chr(rng.randrange(32, 127)) for _ in range(200_000)), CPU[: len(CPU) // 2], TPU[:-3]):
        with pytest.raises(HloTextError):
            shardscope.estimate_module(text, "v5e")


# -- files that are not files --------------------------------------------------------------------


def test_special_files_are_refused_by_their_type_before_they_are_read(tmp_path):
    fifo = tmp_path / "fifo" / DUMP_NAME
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    zero = tmp_path / "zero" / DUMP_NAME
    zero.parent.mkdir()
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder" / DUMP_NAME
    folder.mkdir(parents=True)
    sparse = tmp_path / "sparse" / DUMP_NAME
    sparse.parent.mkdir()
    with open(sparse, "wb") as out:
        out.truncate(MAX_FILE_BYTES + 1)  # no block written: refused by its size
    cases = {fifo: "is a FIFO (a named pipe), not a module's text file", fifo.parent: "is a FIFO",
             zero: "is a character device, not a module's text file", zero.parent: "is a character device",
             Path("/dev/zero"): "is a character device", Path("/dev/null"): "is a character device",
             folder.parent: "is a folder, not a module's text file",
             sparse: f"holds {MAX_FILE_BYTES + 1:,} bytes; shardscope reads module files of at most "
                     f"{MAX_FILE_BYTES:,} (256 MiB)"}
    for path, words in cases.items():
        result = run_main("check", "--xla-dump", path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.count("shardscope: error:") == 1 and words in result.stderr, result.stderr


def test_a_file_that_is_not_utf8_is_refused_with_its_line(tmp_path):
    path = tmp_path / DUMP_NAME
    data = CPU.encode()
    at = data.index(b"%copy.10 = ")
    path.write_bytes(data[:at] + b"\xff" + data[at:])
    result = run_main("check", "--xla-dump", path)
    assert result.returncode == 2
    line = data[:at].count(b"\n") + 1
    assert f"line {line}: byte {at:,} is not UTF-8 text" in result.stderr


# -- interrupts ------------------------------------------------------------------------------------

INTERRUPTED = """
import os, signal, sys, threading, time
from pathlib import Path
from shardscope.activities import current_activity
from shardscope.distributed.interrupts import run_interruptible
from shardscope.engine.hlo.dump_files import dumped_modules

def interrupt():  # as soon as the read starts: the parse of a module this large takes seconds
    while "reading" not in (current_activity() or ""):
        time.sleep(0.001)
    os.kill(os.getpid(), signal.{signal})

threading.Thread(target=interrupt, daemon=True).start()
run_interruptible(lambda: dumped_modules(Path(sys.argv[1])))
print("finished")
"""


@pytest.mark.slow  # a fresh process, a module of 30 MB
@pytest.mark.parametrize(("name", "status"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupt_during_the_parse_ends_the_command_with_its_message(tmp_path, name, status):
    """The parse runs in small steps (no regular expression holds Python's lock for long): the
    handler runs while the module is still being read, and the process leaves with the message."""
    path = tmp_path / DUMP_NAME
    filler = "".join(f"  %f{k} = f32[8]{{0}} negate(%f{k - 1})\n" if k else "  %f0 = f32[8]{0} parameter(3)\n"
                     for k in range(800_000))
    path.write_text(_entry_line(CPU, filler.strip()))
    done = subprocess.run([PYTHON, "-c", INTERRUPTED.format(signal=name), str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == status, done.stderr
    assert f"shardscope: interrupted ({name}) while reading {DUMP_NAME}; nothing was written" in done.stderr
    assert "finished" not in done.stdout and "Traceback" not in done.stderr


# -- real modules read as they were ----------------------------------------------------------------

REAL = sorted([*FIXTURES.glob("xla_ar_code_motion/*.hlo"), *FIXTURES.glob("code_motion/*.hlo"),
               *FIXTURES.glob("hlo/*/*.txt"), *FIXTURES.glob("tpu/*/*.txt"), *FIXTURES.glob("xla_dump/*/*.txt")])


@pytest.mark.parametrize("path", [p for p in REAL if p.name != "listing.txt"], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_real_module_is_read_as_parse_reads_it(path):
    text = path.read_text()
    checked, parsed = read_module(text, str(path)), parse(text)
    assert checked.problems == () and checked.unclosed is None
    assert [(i.name, i.opcode, i.operands) for i in checked.instructions()] == \
           [(i.name, i.opcode, i.operands) for i in parsed.instructions()]
    statements = [n for n, row in enumerate(text.splitlines(), 1) if re.match(r"\s*(ROOT\s+)?%?[\w.\-]+\s*=\s", row)]
    lines = [line for computation in checked.computations.values() for line in computation.lines]
    assert len(lines) == checked.instruction_count and set(lines) <= set(statements)
    rows = text.splitlines()
    for computation in checked.computations.values():  # each instruction's line names it (or its user, inline)
        for inst, line in zip(computation.instructions, computation.lines):
            written = re.match(r"\s*(?:ROOT\s+)?%?([\w.\-]+)", rows[line - 1]).group(1)
            renamed = inst.name.startswith(written + ".")  # a name another computation holds too
            assert inst.name == written or renamed or ".anon" in inst.name or "#" in inst.name, (inst.name, written)
