"""A parser of XLA's HLO text (``compiled.as_text()``, a dump, a module written by hand): computations,
instructions, source tables.

Text is the interface: Python's ``HloInstruction`` binding exposes only names and opcodes. The
parse is one pass over the lines that splits each instruction into its name, shape, opcode and
the raw text after the opcode, into the values of :mod:`shardscope.engine.hlo.module` (operands and
attributes are parsed from that text when first asked for). Operands written inline and tuple
elements read in place are made instructions by :mod:`shardscope.engine.hlo.inline_operands`;
shapes (:mod:`shardscope.engine.hlo.shapes`) and the source tables
(:mod:`shardscope.engine.hlo.source`) have modules of their own. Their names are re-exported here.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping

from shardscope.engine.hlo.inline_operands import MAX_INSTRUCTIONS, Counts, hoist
from shardscope.engine.hlo.module import (
    NO_OPERANDS, Computation, HloModule, Instruction, OpMetadata, header_number, op_primitives,
)
from shardscope.engine.hlo.shapes import DTYPE_BITS, ArrayShape, Shape, parse_shape
from shardscope.engine.hlo.source import FileLocation, SourceLocation, StackFrame, StackFrameIndex, parse_stack_frames
from shardscope.engine.hlo.syntax import (
    ARRAY_SHAPE, OPCODE, OPCODE_ANYWHERE, STATEMENT_TOKENS, STRING_REST, matching,
)

__all__ = [
    "DTYPE_BITS", "ArrayShape", "Shape", "parse_shape", "FileLocation", "SourceLocation", "StackFrame",
    "StackFrameIndex", "OpMetadata", "Instruction", "Computation", "HloModule", "parse", "header_number",
    "op_primitives", "MAX_INSTRUCTIONS",
]


# --------------------------------------------------------------------------- the parse


_HEADER = re.compile(r"^[ \t]*+HloModule\s++([^\s,]++),?(.*)$", re.M)
_COMPUTATION = re.compile(r"(ENTRY\s++)?%?([^\s(){}]++)[^{]*+\{$")
_STATEMENT = re.compile(r"(ROOT\s++)?%?([^\s=]++)\s*+=\s*+")
KEPT_PROBLEMS = 100
"""How many of what the parse read past a module keeps (:attr:`HloModule.problems`)."""


def parse(text: str) -> HloModule:
    """Parse the text of one HLO module as XLA's own parser reads it.

    Both ``compiled.as_text()`` (one instruction a line) and hand-written text (XLA's tests,
    modules written in a notebook) are read: computations and instructions at any indentation,
    the ``HloModule`` line optional, the last computation the entry when none is marked ``ENTRY``,
    ``//`` comments, spaces in shapes (``f32[1024, 1024]``), an instruction over
    several lines (the shape on one, the opcode on the next; attributes after a trailing
    comma), operands written inline (``add(f32[] parameter(0), s32[] constant(1))``: each
    becomes an instruction of its own, named ``<opcode>.anon``), tuple elements read in place
    (``%param.12#2``, how newer XLA's dumps print a get-tuple-element: the get-tuple-element it
    stands for, named ``param.12#2``), and the same instruction name
    in several computations (XLA makes names unique across the module on parsing; so does this,
    with ``.1``, ``.2`` suffixes, and the operands of each computation follow its own names).
    Lines outside computations that are not the module header (a log line, the stack-frame
    tables) are skipped.

    Any text is read, in time and memory linear in its length, without recursion: what is not
    a module's is read past and said in :attr:`HloModule.problems` (and :attr:`HloModule.unclosed`),
    which :func:`~shardscope.engine.hlo.well_formed.read_module` turns into one error with its line.
    """
    header = _HEADER.search(text)
    reader = _Reader()
    statements = None  # the statements of the computation the line is in (None: outside any)
    number = 0
    for number, line in enumerate(text.split("\n"), 1):
        if "//" in line:
            line = _strip_line_comment(line)
        stripped = line.strip()
        if statements is None:
            statements = reader.outside(number, stripped)
        elif reader.pending is not None:
            statements = reader.continued(number, stripped)
        elif not stripped:
            continue
        elif stripped[0] == "}":
            reader.close(number, stripped)
            statements = None
        elif _complete(stripped):
            statements.append((number, stripped))
        else:
            reader.pending = _Statement(number, stripped)
    return reader.module(text, header, number)


class _Reader:
    """The state of one parse, fed a line at a time."""

    def __init__(self) -> None:
        self.computations: dict[str, Computation] = {}
        self.entry: str | None = None
        self.current: str | None = None
        self.current_line = 0
        self.is_entry = False
        self.statements: list[tuple[int, str]] = []
        self.pending: _Statement | None = None
        self.counts = Counts()
        self.problems: list[tuple[int, str]] = []

    def problem(self, line: int, what: str) -> None:
        """Say what was read past at ``line``."""
        if len(self.problems) < KEPT_PROBLEMS:
            self.problems.append((line, what))

    def continued(self, number: int, stripped: str) -> list[tuple[int, str]] | None:
        """A line after one that began an instruction and did not end it: its next line, or the
        ``}`` closing the computation when the instruction's brackets are all closed. Returns
        the statements of the computation the next line is in (None when this one closed it)."""
        pending = self.pending
        assert pending is not None
        if stripped == "}" and pending.closed:
            self.close(number, stripped)
            return None
        pending.add(stripped)
        if pending.complete():
            self.statements.append((pending.line, pending.text()))
            self.pending = None
        return self.statements

    def outside(self, number: int, stripped: str) -> list[tuple[int, str]] | None:
        """A line outside any computation: a computation's header (its statements, empty, are
        returned), or a line skipped (None)."""
        match = _COMPUTATION.match(stripped) if stripped.endswith("{") and " = " not in stripped else None
        if match is not None and not stripped.startswith("HloModule"):
            self.current, self.is_entry, self.statements = match.group(2), match.group(1) is not None, []
            self.current_line, self.pending = number, None
            return self.statements
        if stripped.startswith("}"):
            self.problem(number, "a '}' that closes no computation")
        elif _STATEMENT.match(stripped) and OPCODE_ANYWHERE.search(stripped) and not stripped.startswith("HloModule"):
            self.problem(number, f"an instruction outside any computation: {_quoted(stripped)}")
        return None

    def close(self, number: int, stripped: str) -> None:
        """The ``}`` closing the current computation."""
        name = self.current
        assert name is not None
        if self.pending is not None:
            self.problem(self.pending.line, f"an instruction the computation %{name} closes before it ends: "
                                            f"{_quoted(self.pending.text())}")
            self.pending = None
        if stripped != "}":
            self.problem(number, f"text after the '}}' closing the computation %{name}: {_quoted(stripped[1:])}")
        if name in self.computations:
            first = self.computations[name].line
            self.problem(self.current_line, f"a second computation named %{name} (the first is at line {first})")
        computation, problems = _computation(name, self.statements, self.is_entry, self.counts, self.current_line)
        self.computations[name] = computation
        for line, what in problems:
            self.problem(line, what)
        if self.is_entry:
            if self.entry is not None and self.entry != name:
                self.problem(self.current_line, f"a second ENTRY computation, %{name} (%{self.entry} is the first)")
            else:
                self.entry = name
        self.current = None

    def module(self, text: str, header: re.Match | None, lines: int) -> HloModule:
        """The module read, once every line (``lines`` of them) has been."""
        computations = self.computations
        entry = self.entry
        if entry is None and computations and header is not None and "entry_computation_layout=" in header.group(2):
            self.problem(lines, "no computation is marked ENTRY, though the module's header gives the layout of its "
                                "entry computation: the text ends before its ENTRY computation")
        if self.current is not None:
            self.problem(self.current_line, f"the computation %{self.current} is not closed: the text ends inside it")
            if self.pending is not None:
                self.problem(self.pending.line, f"an instruction the text ends inside ({self.pending.unclosed()}): "
                                                f"{_quoted(self.pending.text())}")
        if entry is None and computations:
            entry = next(reversed(computations))
            computations[entry] = dataclasses.replace(computations[entry], is_entry=True)
        module = HloModule(header.group(1) if header else "", header.group(2) if header else "", computations,
                           entry, parse_stack_frames(text), self.current, tuple(self.problems))
        return _unique_names(module)


def _quoted(text: str, width: int = 60) -> str:
    """``text`` in quotes, cut to ``width`` characters."""
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def _strip_line_comment(line: str) -> str:
    """``line`` without a ``//`` comment (one inside a quoted string is kept)."""
    for match in STATEMENT_TOKENS.finditer(line):
        if match.group() == "//":
            return line[: match.start()]
    return line


def _complete(statement: str) -> bool:
    """True when ``statement`` is a whole instruction: its operand list closed and no trailing
    comma asking for another attribute. Counting brackets settles the lines ``as_text()`` prints;
    the exact check (quotes skipped) runs only when the counts do not balance."""
    if statement.endswith(","):
        return False
    if "(" not in statement:
        return False
    if (statement.count("(") == statement.count(")") and statement.count("{") == statement.count("}")
            and statement.count("[") == statement.count("]")):
        return not statement.endswith(")") or OPCODE_ANYWHERE.search(statement) is not None
    return _Statement(0, statement).closed


class _Statement:
    """An instruction written over several lines, read a line at a time: its brackets' depth
    and whether a quoted string runs on are kept, so each line is scanned once."""

    def __init__(self, line: int, first: str) -> None:
        self.line = line
        self.parts: list[str] = []
        self.depth = 0
        self.quoted = False
        self.opened = False
        self.opcode = False
        self.searched = 0  # the parts searched for an opcode so far
        self.add(first)

    @property
    def closed(self) -> bool:
        """True when every bracket opened so far is closed, outside any quoted string."""
        return self.depth <= 0 and not self.quoted

    def add(self, part: str) -> None:
        """One more line of the statement: its brackets counted between its quoted strings."""
        self.parts.append(part)
        self.opened = self.opened or "(" in part
        position = 0
        if self.quoted:
            rest = STRING_REST.match(part)
            assert rest is not None  # it matches the empty string
            if rest.group(1) is None:
                return
            self.quoted, position = False, rest.end()
        while True:
            quote = part.find('"', position)
            segment = part[position:] if quote < 0 else part[position:quote]
            self.depth += (segment.count("(") + segment.count("[") + segment.count("{")
                           - segment.count(")") - segment.count("]") - segment.count("}"))
            if quote < 0:
                return
            string = STRING_REST.match(part, quote + 1)
            assert string is not None  # it matches the empty string
            if string.group(1) is None:
                self.quoted = True
                return
            position = string.end()

    def complete(self) -> bool:
        """:func:`_complete` of the statement so far."""
        last = self.parts[-1]
        if not (self.opened and self.closed) or last.endswith(","):
            return False
        if not last.endswith(")"):
            return True
        while not self.opcode and self.searched < len(self.parts):  # each part searched once
            part = self.parts[self.searched]
            self.opcode = "(" in part and OPCODE_ANYWHERE.search(part) is not None
            self.searched += 1
        return self.opcode

    def unclosed(self) -> str:
        """What is left open: ``a quoted string``, ``3 brackets``."""
        if self.quoted:
            return "a quoted string never closed"
        return f"{self.depth} bracket{'' if self.depth == 1 else 's'} never closed"

    def text(self) -> str:
        """The statement, its lines joined by spaces."""
        return " ".join(self.parts)


def _computation(name: str, statements: list[tuple[int, str]], is_entry: bool, counts: Counts,
                 line: int) -> tuple[Computation, list[tuple[int, str]]]:
    """The computation of the whole instruction statements of its body (``counts``: what the
    module has made so far), and what of them it read past: a statement that is no instruction,
    a name given twice, the instructions past :attr:`Counts.limit`. This loop is the parse's own:
    it does no more per statement than the instruction needs (the rarer checks run after it)."""
    instructions: list[Instruction] = []
    lines: list[int] = []
    known: dict[str, Instruction] = {}
    problems: list[tuple[int, str]] = []
    before = counts.made
    room = counts.limit - before  # instructions the module may still make: one past them is said
    for number, statement in statements[: max(room + 1, 0)]:
        parsed = _instruction(statement, name)
        if parsed is None:
            if len(problems) < KEPT_PROBLEMS:
                problems.append((number, f"not an instruction: {_quoted(statement)}"))
            continue
        inst, inline = parsed
        if inline:
            counts.made = before + len(instructions)  # what hoist may still make is counted from here
            inst = hoist(inst, instructions, counts, known)
            lines.extend([number] * (len(instructions) - len(lines)))  # what it wrote inline, on its line
        instructions.append(inst)
        lines.append(number)
        known[inst.name] = inst
        if inline and before + len(instructions) > counts.limit:
            break
    counts.made = before + len(instructions)
    if before <= counts.limit < counts.made:  # this computation went past it: said once, on its last line
        problems.append((lines[-1], f"the module holds more than {counts.limit:,} instructions: shardscope "
                                    "reads modules of at most that many"))
    if len(known) < len(instructions):
        problems += _names_given_twice(name, instructions, lines)[:KEPT_PROBLEMS]
    return Computation(name, tuple(instructions), is_entry, line, tuple(lines)), problems


def _names_given_twice(computation: str, instructions: list[Instruction], lines: list[int]) -> list[tuple[int, str]]:
    """Each instruction of ``computation`` whose name an earlier one has, on its line."""
    first: dict[str, int] = {}
    found = []
    for inst, line in zip(instructions, lines):
        if inst.name in first:
            found.append((line, f"%{inst.name} is defined twice in %{computation} (first at line {first[inst.name]})"))
        first.setdefault(inst.name, line)
    return found


def _instruction(statement: str, computation: str) -> tuple[Instruction, bool] | None:
    """``[ROOT] name = shape opcode(body`` as an :class:`Instruction`, and whether its operands
    hold an instruction written inline (None when the statement is not an instruction)."""
    match = _STATEMENT.match(statement)
    if match is None:
        return None
    root, name = match.group(1) is not None, match.group(2)
    split = _shape_and_opcode(statement, match.end())
    if split is None:
        return None
    shape, opcode, body = split
    inline = opcode not in NO_OPERANDS and (_holds_parenthesis(body) or "#" in body[: body.find(")")])
    return Instruction(name, shape, opcode, computation, body, root), inline


def _holds_parenthesis(body: str) -> bool:
    """True when the operand list at the start of ``body`` holds a parenthesis (an instruction
    written inline, or a tuple type): the first ``(`` comes before the ``)`` closing the list."""
    opening = body.find("(")
    return opening != -1 and opening < body.find(")") and "(" in body[: matching(body, -1)]


def _shape_and_opcode(text: str, at: int) -> tuple[str, str, str] | None:
    """``(shape, opcode, text after "opcode(")`` of ``shape opcode(...`` at ``at``."""
    if text.startswith("(", at):
        end = matching(text, at) + 1
    else:
        array = ARRAY_SHAPE.match(text, at)
        if array is None:
            return None
        end = array.end()
    opcode = OPCODE.match(text, end)
    if opcode is None:
        return None
    return text[at:end].strip(), opcode.group(1), text[opcode.end():]


def _unique_names(module: HloModule) -> HloModule:
    """``module`` with every instruction name unique across it, as XLA's parser leaves a module:
    a name an earlier computation holds gets the next free ``.N`` suffix, and the operands of
    its own computation follow the new name. Printed modules already have unique names: they
    are returned as they are. Each name's next suffix is kept, so 60,000 uses of one name cost
    60,000 steps, not 60,000 squared."""
    seen: set[str] = set()
    repeated = False
    for inst in module.instructions():
        if inst.name in seen:
            repeated = True
            break
        seen.add(inst.name)
    if not repeated:
        return module
    taken = {inst.name for inst in module.instructions()}
    suffixes: dict[str, int] = {}
    used: set[str] = set()
    computations = {}
    for computation in module.computations.values():
        renames: dict[str, str] = {}
        for inst in computation.instructions:
            if inst.name in used:
                base, k = inst.name, suffixes.get(inst.name, 1)
                while f"{base}.{k}" in taken:
                    k += 1
                suffixes[base] = k + 1
                renames[inst.name] = f"{base}.{k}"
                taken.add(renames[inst.name])
            used.add(renames.get(inst.name, inst.name))
        computations[computation.name] = _renamed(computation, renames) if renames else computation
    return dataclasses.replace(module, computations=computations)


def _renamed(computation: Computation, renames: Mapping[str, str]) -> Computation:
    """``computation`` with its instructions and their operands renamed by ``renames``."""
    instructions = []
    for inst in computation.instructions:
        body = inst.body
        if inst.opcode not in NO_OPERANDS and any(o in renames for o in inst.operands):
            operand_text = body[: matching(body, -1)]
            names = ", ".join("%" + renames.get(o, o) for o in inst.operands)
            body = names + body[len(operand_text):]
        instructions.append(Instruction(renames.get(inst.name, inst.name), inst.shape_text, inst.opcode, inst.computation,
                                        body, inst.is_root))
    return Computation(computation.name, tuple(instructions), computation.is_entry, computation.line, computation.lines)
