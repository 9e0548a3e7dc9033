"""Operands written inline and tuple elements read in place, made instructions of their own.

XLA's parser takes an operand written as an instruction (``add(f32[] parameter(0), s32[]
constant(1))``, nested to any depth in hand-written text) and, in newer XLA's dumps, a tuple element
read where it is used (``%param.12#2``, ``%p#1#0``). :func:`hoist` makes each of them the
instruction XLA's parser makes, ahead of its user, in one pass over the operand list with a stack
of the lists open: an operand list nested 10,000 deep is neither a recursion nor read again at each
level. :class:`Counts` keeps what the parse has made, so that no text makes more than
:data:`MAX_INSTRUCTIONS` instructions.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from shardscope.engine.hlo.module import NO_OPERANDS, Instruction, name_after_type
from shardscope.engine.hlo.shapes import MAX_TUPLE_DEPTH
from shardscope.engine.hlo.syntax import ARRAY_SHAPE, COMMENT, OPCODE, STATEMENT_TOKENS, integer

__all__ = ["MAX_INSTRUCTIONS", "Counts", "hoist"]

MAX_INSTRUCTIONS = 2_000_000
"""The most instructions a module may have (a real module of 256 MiB has about 1.7 million; each costs
about 1.3 KB once parsed and planned): past it, the parse makes no more and says so, so that no text
(operands written inline, one every 13 characters) makes more than that many objects."""


@dataclass
class Counts:
    """What the parse has made so far: instructions, and those written inline (named
    ``<opcode>.anon.N``); and the most it may make (:data:`MAX_INSTRUCTIONS` when it began)."""

    made: int = 0
    inline: int = 0
    limit: int = field(default_factory=lambda: MAX_INSTRUCTIONS)

    @property
    def over(self) -> bool:
        """True once the module holds more than :attr:`limit` instructions."""
        return self.made > self.limit


class _Brackets:
    """Where each bracket of a text closes and the commas directly inside it (the text's own
    level is the bracket ``-1``), found in one pass: an operand list nested 10,000 deep is then
    split at every level without scanning its text again."""

    def __init__(self, text: str) -> None:
        self.closes: dict[int, int] = {}
        self.commas: dict[int, list[int]] = {-1: []}
        self.parenthesised: set[int] = set()  # the brackets holding a "(" (at any depth)
        opened = [-1]
        for match in STATEMENT_TOKENS.finditer(text):
            token = match.group()
            if token == ",":
                self.commas.setdefault(opened[-1], []).append(match.start())
            elif token in "([{":
                if token == "(":
                    self.parenthesised.add(opened[-1])
                opened.append(match.start())
            elif token in ")]}" and len(opened) > 1:
                inner = opened.pop()
                self.closes[inner] = match.start()
                if inner in self.parenthesised:
                    self.parenthesised.add(opened[-1])
            elif token in ")]}":
                self.closes.setdefault(-1, match.start())
        self.closes.setdefault(-1, len(text))

    def parts(self, bracket: int, end: int) -> list[tuple[int, int]]:
        """The spans of the parts of the list that ``bracket`` opens, split at its own commas."""
        cuts = [c for c in self.commas.get(bracket, ()) if c < end]
        starts = [bracket + 1, *(c + 1 for c in cuts)]
        return [(a, b) for a, b in zip(starts, [*cuts, end])]


def hoist(inst: Instruction, before: list[Instruction], counts: Counts, known: dict[str, Instruction]) -> Instruction:
    """``inst`` with each operand written inline (``s32[] constant(16)``) made an instruction of
    its own, appended to ``before`` as XLA's parser adds it ahead of its user (the inner ones
    first, each named in the order written); and each tuple element read in place
    (``%param.12#2``, how newer XLA prints a get-tuple-element it folded into its user) made the
    get-tuple-element it stands for, named as written (``param.12#2``). ``known`` holds the
    computation's instructions so far by name; ``counts`` what the module has made so far (a
    module already full is left as written). One pass over the operands, with a stack of the
    lists open: no recursion, and each inline instruction's own text is its names and its end."""
    body = inst.body
    brackets = _Brackets(body)
    end = brackets.closes[-1]
    stack = [_OpenList(None, brackets.parts(-1, end), body[end:])]
    while True:
        if counts.over:  # a module already past its most instructions: left as written
            return inst
        frame = stack[-1]
        if frame.next == len(frame.parts):
            stack.pop()
            text = ", ".join(frame.names) + frame.tail
            if frame.owner is None:
                return dataclasses.replace(inst, body=text, _cache=None)
            name, shape, opcode = frame.owner
            _add(Instruction(name, shape, opcode, inst.computation, text), before, known, counts)
            stack[-1].names.append("%" + name)
            continue
        start, stop = frame.parts[frame.next]
        frame.next += 1
        inline = _inline_operand(body, start, stop, brackets)
        if inline is None:
            frame.names.append(_operand_reference(body[start:stop], inst, before, known, counts))
            continue
        shape, opcode, opening = inline
        counts.inline += 1
        name = f"{opcode}.anon" + (f".{counts.inline - 1}" if counts.inline > 1 else "")
        closing = brackets.closes.get(opening, stop)
        if opcode in NO_OPERANDS or opening not in brackets.parenthesised:
            _add(Instruction(name, shape, opcode, inst.computation, body[opening + 1 : stop].rstrip()), before, known,
                 counts)
            frame.names.append("%" + name)
            continue
        tail = body[closing:stop].rstrip()
        stack.append(_OpenList((name, shape, opcode), brackets.parts(opening, closing), tail))


@dataclass
class _OpenList:
    """An operand list :func:`_hoist` is inside: whose it is (None: the instruction's own), its
    parts' spans, how many are read, the names they became, the text after the list."""

    owner: tuple[str, str, str] | None
    parts: list[tuple[int, int]]
    tail: str
    next: int = 0
    names: list[str] = field(default_factory=list)


def _add(inst: Instruction, before: list[Instruction], known: dict[str, Instruction], counts: Counts) -> None:
    before.append(inst)
    known[inst.name] = inst
    counts.made += 1


_LEADING = re.compile(r"(?:\s++|/\*.*?(?:\*/|\Z))*+", re.S)
"""Spaces and comments at the start of an operand."""


def _inline_operand(body: str, start: int, stop: int, brackets: _Brackets) -> tuple[str, str, int] | None:
    """``(shape, opcode, where its "(" is)`` when the operand at ``body[start:stop]`` is an
    instruction written inline (``s32[] constant(16)``); None for a name."""
    leading = _LEADING.match(body, start, stop)
    at = leading.end() if leading is not None else start
    if at >= stop or body[at] == "%":
        return None
    if body[at] == "(":
        end = brackets.closes.get(at, stop) + 1
    else:
        array = ARRAY_SHAPE.match(body, at, stop)
        if array is None:
            return None
        end = array.end()
    opcode = OPCODE.match(body, end, stop)
    if opcode is None:
        return None
    return body[at:end].strip(), opcode.group(1), opcode.end() - 1


def _operand_reference(part: str, inst: Instruction, before: list[Instruction], known: dict[str, Instruction],
                       counts: Counts) -> str:
    """An operand that names an instruction, as the operand list of ``inst`` writes it; a tuple
    element read in place (``%param.12#2``) made the get-tuple-element it stands for."""
    part = COMMENT.sub("", part).strip() if "/*" in part else part.strip()
    token = part.rsplit(" ", 1)[-1]
    if "#" not in token:
        return part
    name = name_after_type(token) or token.lstrip("%")
    return "%" + _element(name, inst.computation, before, known, counts)


def _element(name: str, computation: str, before: list[Instruction], known: dict[str, Instruction],
             counts: Counts) -> str:
    """The get-tuple-element ``name`` (``param.12#2``, ``param#1#0`` for a nested tuple) stands
    for, made once per computation (each level of a nested one too) and appended to ``before``;
    its name. A name indexing deeper than tuples nest (:data:`MAX_TUPLE_DEPTH`) is left as it is
    written: no instruction has it."""
    if name in known or "#" not in name:
        return name
    base, *indices = name.split("#")
    if len(indices) > MAX_TUPLE_DEPTH:
        return name
    for index in indices:
        element = f"{base}#{index}"
        if element not in known:
            source = known.get(base)
            number = integer(index) if index.isdigit() else None
            shape = ""
            if source is not None and source.shape.is_tuple and number is not None and number < len(source.shape.elements):
                shape = source.shape.elements[number].text
            _add(Instruction(element, shape, "get-tuple-element", computation, f"%{base}), index={index}"), before,
                 known, counts)
        base = element
    return name
