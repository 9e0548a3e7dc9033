"""A parser of XLA's HLO text (``compiled.as_text()``, a dump, a module written by hand): computations,
instructions, source tables.

Text is the interface: Python's ``HloInstruction`` binding exposes only names and opcodes. The
parse is one pass over the lines that splits each instruction into its name, shape, opcode and
the raw text after the opcode; operands and attributes are parsed when first asked for, since a
module of 100,000 instructions is read to find a few dozen collectives and the loops around
them. Both printings are accepted: with and without ``%`` sigils, operands with or without
their types, ``metadata`` with a ``stack_frame_id`` into the module's stack-frame tables or
with inline ``source_file``/``source_line``. Shapes (:mod:`hlo_shapes`) and the source tables
(:mod:`hlo_source`) have modules of their own; their names are re-exported here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterator, Mapping, TypeVar, cast, overload

from shardscope.engine.hlo.shapes import DTYPE_BITS, MAX_TUPLE_DEPTH, ArrayShape, Shape, parse_shape
from shardscope.engine.hlo.source import FileLocation, SourceLocation, StackFrame, StackFrameIndex, parse_stack_frames
from shardscope.engine.hlo.syntax import COMMENT, QUOTED, integer, matching, split_top, to_int, unquote

__all__ = [
    "DTYPE_BITS", "ArrayShape", "Shape", "parse_shape", "FileLocation", "SourceLocation", "StackFrame",
    "StackFrameIndex", "OpMetadata", "Instruction", "Computation", "HloModule", "parse",
]


# --------------------------------------------------------------------------- instructions


@dataclass(frozen=True)
class OpMetadata:
    """An instruction's ``metadata={...}``: the JAX op path and where the source points."""

    op_name: str = ""
    op_type: str = ""
    source_file: str = ""
    source_line: int = 0
    stack_frame_id: int = 0

    @property
    def primitive(self) -> str:
        """The last component of ``op_name`` (``dot_general``, ``psum``): the JAX primitive."""
        return self.op_name.rsplit("/", 1)[-1] if self.op_name else ""

    @property
    def primitives(self) -> tuple[str, ...]:
        """The JAX primitives ``op_name`` names: one, or one per op of a merged name."""
        return op_primitives(self.op_name)


def op_primitives(op_name: str) -> tuple[str, ...]:
    """The primitives an ``op_name`` ends with: ``(psum,)`` for ``jit(f)/while/body/psum``, and
    each op's for a name XLA merged from several (two collectives combined into one instruction):
    ``.../closed_call/(psum_invariant:transpose(jvp())/psum_invariant)``, the common prefix then
    the ops' own paths joined by ``:`` in parentheses."""
    if not op_name:
        return ()
    head, _, merged = op_name.rpartition("/(")
    if not (head and merged.endswith(")")):
        return (op_name.rsplit("/", 1)[-1],)
    parts, depth, start = [], 0, 0
    for k, char in enumerate(merged[:-1]):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ":" and depth == 0:
            parts.append(merged[start:k])
            start = k + 1
    parts.append(merged[start:-1])
    return tuple(dict.fromkeys(part.rsplit("/", 1)[-1] for part in parts if part))


_NO_METADATA = OpMetadata()
_T = TypeVar("_T")
_CALLED = re.compile(r"\b(body|condition|calls|to_apply|true_computation|false_computation)=%?([\w.\-]++)")
_CALLED_LISTS = re.compile(r"\b(branch_computations|called_computations|calls)=\{([^}]*+)(?:\}|\Z)")
_INDEX = re.compile(r"\bindex=(\d++)")
_METADATA_FIELD = re.compile(r"(?<!\w)(\w++)=(" + QUOTED + r"|[^\s}]++)", re.S)
_NESTED = re.compile(r'[(\[{"/]')
"""What makes an operand list more than names and commas: a bracket, a quote, a comment."""
_NAME_DELIMITERS = " \t)]}%"
"""What ends the type written against an operand's name (``(f32[], s32[])%w``): the name is after the last of these."""


class _cached(Generic[_T]):
    """``functools.cached_property`` for the slotted :class:`Instruction`: the value is computed
    on first use and kept in the instance's ``_cache`` dictionary (made then)."""

    def __init__(self, compute: "Callable[[Instruction], _T]") -> None:
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> "_cached[_T]": ...

    @overload
    def __get__(self, instance: "Instruction", owner: type | None = None) -> _T: ...

    def __get__(self, instance: "Instruction | None", owner: type | None = None) -> "_T | _cached[_T]":
        if instance is None:
            return self
        cache = instance._cache
        if cache is None:
            cache = {}
            object.__setattr__(instance, "_cache", cache)
        try:
            return cache[self.name]  # type: ignore[return-value]  # the cache holds each property's own type under its name
        except KeyError:
            value = cache[self.name] = self.compute(instance)
            return value


@dataclass(frozen=True, slots=True)
class Instruction:
    """One HLO instruction: ``name = shape opcode(operands), attributes``.

    ``body`` is the text after ``opcode(``; :attr:`operands` and :attr:`attributes` are parsed
    from it on first use. Slotted, with the parsed parts kept in a dictionary made on first
    use: a module of 100,000 instructions makes 100,000 objects, not 200,000, for the caller's
    garbage collector to walk (the engine leaves that collector running).
    """

    name: str
    shape_text: str
    opcode: str
    computation: str
    body: str = field(repr=False)
    is_root: bool = False
    _cache: dict[str, object] | None = field(default=None, repr=False, compare=False)

    @_cached
    def shape(self) -> Shape:
        """The parsed :class:`Shape`."""
        return parse_shape(self.shape_text)

    @_cached
    def _split(self) -> tuple[str, str]:
        """``(operand text, attribute text)``: the operand list ends at the first ``)`` when no
        bracket or quote comes before it (most lines), else where the brackets say."""
        body = self.body
        end = body.find(")")
        if end < 0 or _NESTED.search(body, 0, end) is not None:
            end = matching(body, -1)
        return body[:end], body[end + 1 :]

    @_cached
    def operands(self) -> tuple[str, ...]:
        """The names of the instructions this one reads, in operand order."""
        if self.opcode in ("constant", "parameter", "iota", "partition-id", "replica-id"):
            return ()
        text = self._split[0]
        if _NESTED.search(text) is None:  # no brackets, quotes or comments: the commas split it
            return tuple(token.lstrip("%") for part in text.split(",") if (token := part.strip().rsplit(" ", 1)[-1]))
        names = []
        for part in split_top(text):
            token = COMMENT.sub("", part).strip().rsplit(" ", 1)[-1]
            if ")" in token or "]" in token or "}" in token:  # a type written against the name: (f32[], s32[])%w
                token = _after_type(token)
            if token:
                names.append(token.lstrip("%"))
        return tuple(names)

    @property
    def attribute_text(self) -> str:
        """The raw text after the operand list: ``""``, or ``, key=value, ...``."""
        return self._split[1]

    @property
    def literal(self) -> str:
        """What is inside the parentheses: a constant's value, a parameter's number."""
        return self._split[0].strip()

    @_cached
    def attributes(self) -> Mapping[str, str]:
        """``{key: raw value}`` of the attributes after the operands, in print order."""
        found: dict[str, str] = {}
        last = None
        for part in split_top(self._split[1]):
            key, sep, value = part.strip().partition("=")
            if not sep:
                continue
            if key == "device_ids" and last is not None and found[last].startswith("mesh["):
                found[last] += ", " + part.strip()  # mesh replica groups print a comma of their own
                continue
            found[key] = value
            last = key
        return found

    def attribute(self, key: str) -> str | None:
        """One attribute's raw text, or None."""
        return self.attributes.get(key)

    @_cached
    def metadata(self) -> OpMetadata:
        """The parsed ``metadata={op_name=... stack_frame_id=...}`` (empty when absent)."""
        raw = self.attribute("metadata")
        if not raw:
            return _NO_METADATA
        fields = {key: unquote(value) for key, value in _METADATA_FIELD.findall(raw.strip()[1:-1])}
        return OpMetadata(
            op_name=fields.get("op_name", ""),
            op_type=fields.get("op_type", ""),
            source_file=fields.get("source_file", ""),
            source_line=to_int(fields.get("source_line")),
            stack_frame_id=to_int(fields.get("stack_frame_id")),
        )

    @_cached
    def frontend_attributes(self) -> Mapping[str, str]:
        """``frontend_attributes={key="value", ...}`` as a dict."""
        raw = self.attribute("frontend_attributes")
        if not raw:
            return {}
        pairs = (part.strip().partition("=") for part in split_top(raw.strip()[1:-1]))
        return {key: unquote(value) for key, _, value in pairs if key}

    @_cached
    def called_computations(self) -> tuple[tuple[str, str], ...]:
        """``(role, computation)`` of every computation this instruction calls, in print order.

        Roles: ``body``, ``condition`` (a while), ``branch`` (a conditional), ``calls`` (call,
        fusion, async-start), ``to_apply`` (a reduction's combiner, a map, a sort).
        """
        text = self.body  # operands never hold "name=": no need to split them off first
        if "=" not in text:
            return ()
        called = [(role, name) for role, name in _CALLED.findall(text)]
        for role, names in _CALLED_LISTS.findall(text):
            role = "branch" if role == "branch_computations" else "calls"
            called += [(role, n.strip().lstrip("%")) for n in names.split(",") if n.strip()]
        return tuple(called)

    @property
    def channel_id(self) -> int | None:
        """The ``channel_id`` of a collective (None when it has none, or not a number)."""
        return integer(self.attribute("channel_id"))

    @property
    def replica_groups(self) -> str | None:
        """The raw ``replica_groups`` text in whichever form it is printed."""
        return self.attribute("replica_groups")

    @property
    def source_target_pairs(self) -> str | None:
        """The raw ``source_target_pairs`` of a collective-permute."""
        return self.attribute("source_target_pairs")

    @property
    def use_global_device_ids(self) -> bool:
        """True when the replica groups hold flattened device ids (``use_global_device_ids=true``)."""
        return self.attribute("use_global_device_ids") == "true"

    @_cached
    def backend_config(self) -> Mapping | str | None:
        """The ``backend_config`` JSON as a dict (the raw text when it is not JSON)."""
        raw = self.attribute("backend_config")
        if raw is None:
            return None
        text = unquote(raw) if raw.startswith('"') else raw
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the interpreter's stack
            return text

    @property
    def known_trip_count(self) -> int | None:
        """A while loop's ``known_trip_count`` from its backend config (None when XLA did not know it)."""
        config = self.backend_config
        if not isinstance(config, dict):
            return None
        count = config.get("known_trip_count", {})
        written = count.get("n") if isinstance(count, dict) else None
        if isinstance(written, bool) or not isinstance(written, (str, int)):
            return None
        return integer(str(written))

    @property
    def dimensions(self) -> tuple[int, ...] | None:
        """The ``dimensions={...}`` of an all-gather, reduce-scatter, broadcast or transpose."""
        raw = self.attribute("dimensions")
        if raw is None:
            return None
        dims = tuple(integer(d) for d in raw.strip("{}").split(",") if d.strip())
        return None if None in dims else cast(tuple[int, ...], dims)

    @property
    def tuple_index(self) -> int | None:
        """A get-tuple-element's ``index``."""
        if self.opcode != "get-tuple-element":
            return None
        match = _INDEX.search(self._split[1])
        return integer(match.group(1)) if match else None

    @property
    def parameter_number(self) -> int | None:
        """A parameter's number (None for another instruction, or a number that is not one)."""
        return integer(self.literal) if self.opcode == "parameter" else None

    @property
    def is_spmd_generated(self) -> bool:
        """True when the partitioner marked it (``frontend_attributes={is_spmd_generated="true"}``, jax >= 0.11)."""
        return self.frontend_attributes.get("is_spmd_generated") == "true"


@dataclass(frozen=True)
class Computation:
    """One computation: its instructions in print order (the ROOT among them)."""

    name: str
    instructions: tuple[Instruction, ...]
    is_entry: bool = False
    line: int = field(default=0, compare=False)
    """The line of the module's text its header is on."""
    lines: tuple[int, ...] = field(default=(), repr=False, compare=False)
    """The line each instruction starts on, in :attr:`instructions`' order (an operand written
    inline, or a tuple element read in place, on its user's line): kept beside the instructions,
    not in them, so that a module of 100,000 instructions is made no slower for them."""

    def line_of(self, inst: Instruction) -> int:
        """The line ``inst`` (one of :attr:`instructions`) starts on (0 when unknown)."""
        for k, candidate in enumerate(self.instructions):
            if candidate is inst:
                return self.lines[k] if k < len(self.lines) else 0
        return 0

    @functools.cached_property
    def root(self) -> Instruction | None:
        """The ROOT instruction (the last one when none is marked)."""
        for inst in reversed(self.instructions):
            if inst.is_root:
                return inst
        return self.instructions[-1] if self.instructions else None

    @functools.cached_property
    def users(self) -> Mapping[str, tuple[tuple[Instruction, int], ...]]:
        """``{name: ((user, operand position), ...)}`` of the instructions in this computation."""
        found: dict[str, list[tuple[Instruction, int]]] = {}
        for inst in self.instructions:
            for position, operand in enumerate(inst.operands):
                found.setdefault(operand, []).append((inst, position))
        return {name: tuple(users) for name, users in found.items()}

    @functools.cached_property
    def parameters(self) -> tuple[Instruction, ...]:
        """The parameter instructions, by parameter number."""
        found = [inst for inst in self.instructions if inst.opcode == "parameter"]
        return tuple(sorted(found, key=lambda inst: inst.parameter_number or 0))


@dataclass(frozen=True)
class HloModule:
    """A parsed module: computations by name (print order), the entry, the stack-frame tables."""

    name: str
    header: str
    computations: Mapping[str, Computation]
    entry_name: str | None
    stack_frames: StackFrameIndex = StackFrameIndex()
    unclosed: str | None = None
    """The computation the text ends inside (its closing ``}`` never came: a truncated file), or None."""
    problems: tuple[tuple[int, str], ...] = field(default=(), compare=False)
    """What the parse read past, ``(line, what)`` in text order (at most :data:`KEPT_PROBLEMS`): a
    line inside a computation that is no instruction, an instruction never closed, a name or a
    computation given twice. A module printed by XLA has none;
    :func:`~shardscope.engine.hlo.well_formed.read_module` refuses a text that has one."""

    @property
    def entry(self) -> Computation | None:
        """The ENTRY computation."""
        return self.computations.get(self.entry_name) if self.entry_name else None

    def instructions(self) -> Iterator[Instruction]:
        """Every instruction of every computation, in print order."""
        for computation in self.computations.values():
            yield from computation.instructions

    @property
    def instruction_count(self) -> int:
        """How many instructions the module has."""
        return sum(len(c.instructions) for c in self.computations.values())

    @functools.cached_property
    def by_name(self) -> Mapping[str, Instruction]:
        """Every instruction by name (names are unique in a module)."""
        return {inst.name: inst for inst in self.instructions()}

    def instruction(self, name: str) -> Instruction | None:
        """The instruction called ``name``."""
        return self.by_name.get(name)

    @functools.cached_property
    def callers(self) -> Mapping[str, tuple[tuple[Instruction, str], ...]]:
        """``{computation: ((calling instruction, role), ...)}`` for every called computation."""
        found: dict[str, list[tuple[Instruction, str]]] = {}
        for inst in self.instructions():
            if "=" in inst.body and _MAY_CALL.search(inst.body):
                for role, callee in inst.called_computations:
                    found.setdefault(callee, []).append((inst, role))
        return {name: tuple(calls) for name, calls in found.items()}

    @property
    def num_partitions(self) -> int:
        """``num_partitions`` from the module header (1 when not printed, or not a number)."""
        return header_number(self.header, "num_partitions") or 1

    @property
    def replica_count(self) -> int:
        """``replica_count`` from the module header (1 when not printed, or not a number)."""
        return header_number(self.header, "replica_count") or 1

    def source(self, inst: Instruction, users: bool = False) -> SourceLocation | None:
        """Where the instruction comes from: its stack frame's innermost position (with
        ``users``, the innermost in the user's own files, past flax's or equinox's), or the
        inline ``source_file``/``source_line`` older XLA printed (None when it has neither)."""
        meta = inst.metadata
        if meta.stack_frame_id:
            location = self.stack_frames.location(meta.stack_frame_id, users)
            if location is not None:
                return location
        if meta.source_file:
            return SourceLocation(meta.source_file, meta.source_line)
        return None


def header_number(header: str, key: str) -> int | None:
    """The number ``key=N`` of a module's header says (None when it says none, or not a number)."""
    match = re.search(r"\b" + key + r"=([^\s,]++)", header)
    return integer(match.group(1)) if match else None


def _after_type(token: str) -> str:
    """The name in ``(f32[], s32[])%w``: what follows the last bracket, space or ``%``."""
    end = max(token.rfind(char) for char in _NAME_DELIMITERS)
    return token[end + 1 :]


_MAY_CALL = re.compile(r"\b(?:body|condition|calls|to_apply|true_computation|false_computation|branch_computations|called_computations)=")


# --------------------------------------------------------------------------- the parse


_HEADER = re.compile(r"^[ \t]*+HloModule\s++([^\s,]++),?(.*)$", re.M)
_COMPUTATION = re.compile(r"(ENTRY\s++)?%?([^\s(){}]++)[^{]*+\{$")
_STATEMENT = re.compile(r"(ROOT\s++)?%?([^\s=]++)\s*+=\s*+")
_ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*+\[[^\]]*+\](?:\{[^}]*+\})?|[a-z][a-z0-9]*+\b")
_OPCODE = re.compile(r"\s*+([a-z][\w\-]*+)\(")
_OPCODE_ANYWHERE = re.compile(r"(?<![\w\-])[a-z][\w\-]*+\(")
_NO_OPERANDS = frozenset(("constant", "parameter", "iota", "partition-id", "replica-id", "rng-get-and-update-state"))
_SCAN = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(")?|[()\[\]{},]|//', re.S)
"""The tokens of a statement's brackets: a quoted string (its closing quote captured: missing when
the string runs on past the text), a bracket, a comma, a ``//`` comment's start."""
_STRING_REST = re.compile(r'[^"\\]*+(?:\\.[^"\\]*+)*+(")?', re.S)
KEPT_PROBLEMS = 100
"""How many of what the parse read past a module keeps (:attr:`HloModule.problems`)."""
MAX_INSTRUCTIONS = 2_000_000
"""The most instructions a module may have (a real module of 256 MiB has about 1.7 million; each costs
about 1.3 KB once parsed and planned): past it, the parse makes no more and says so, so that no text
(operands written inline, one every 13 characters) makes more than that many objects."""


@dataclass
class _Counts:
    """What the parse has made so far: instructions, and those written inline (named ``<opcode>.anon.N``)."""

    made: int = 0
    inline: int = 0

    @property
    def over(self) -> bool:
        """True once the module holds more than :data:`MAX_INSTRUCTIONS`."""
        return self.made > MAX_INSTRUCTIONS


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
        self.counts = _Counts()
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
        elif _STATEMENT.match(stripped) and _OPCODE_ANYWHERE.search(stripped) and not stripped.startswith("HloModule"):
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
    for match in _SCAN.finditer(line):
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
        return not statement.endswith(")") or _OPCODE_ANYWHERE.search(statement) is not None
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
            rest = _STRING_REST.match(part)
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
            string = _STRING_REST.match(part, quote + 1)
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
            self.opcode = "(" in part and _OPCODE_ANYWHERE.search(part) is not None
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


def _computation(name: str, statements: list[tuple[int, str]], is_entry: bool, counts: _Counts,
                 line: int) -> tuple[Computation, list[tuple[int, str]]]:
    """The computation of the whole instruction statements of its body (``counts``: what the
    module has made so far), and what of them it read past: a statement that is no instruction,
    a name given twice, the instructions past :data:`MAX_INSTRUCTIONS`."""
    instructions: list[Instruction] = []
    lines: list[int] = []
    known: dict[str, Instruction] = {}
    problems: list[tuple[int, str]] = []
    room = MAX_INSTRUCTIONS - counts.made  # how many more the module may make (kept here: this loop is the parse's)
    for number, statement in statements:
        if room < 0:  # said once, at the instruction that went past it
            break
        parsed = _instruction(statement, name)
        if parsed is None:
            if len(problems) < KEPT_PROBLEMS:
                problems.append((number, f"not an instruction: {_quoted(statement)}"))
            continue
        inst, inline = parsed
        if inline:
            counts.made = MAX_INSTRUCTIONS - room
            inst = _hoist(inst, instructions, counts, known)
            room = MAX_INSTRUCTIONS - counts.made
            lines.extend([number] * (len(instructions) - len(lines)))  # what it wrote inline, on its line
        room -= 1
        if inst.name in known and len(problems) < KEPT_PROBLEMS:
            first = lines[next(k for k, i in enumerate(instructions) if i is known[inst.name])]
            problems.append((number, f"%{inst.name} is defined twice in %{name} (first at line {first})"))
        instructions.append(inst)
        lines.append(number)
        known[inst.name] = inst
        if room < 0:
            problems.append((number, f"the module holds more than {MAX_INSTRUCTIONS:,} instructions: shardscope "
                                     "reads modules of at most that many"))
    counts.made = MAX_INSTRUCTIONS - room
    return Computation(name, tuple(instructions), is_entry, line, tuple(lines)), problems


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
    inline = opcode not in _NO_OPERANDS and (_holds_parenthesis(body) or "#" in body[: body.find(")")])
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
        array = _ARRAY_SHAPE.match(text, at)
        if array is None:
            return None
        end = array.end()
    opcode = _OPCODE.match(text, end)
    if opcode is None:
        return None
    return text[at:end].strip(), opcode.group(1), text[opcode.end():]


class _Brackets:
    """Where each bracket of a text closes and the commas directly inside it (the text's own
    level is the bracket ``-1``), found in one pass: an operand list nested 10,000 deep is then
    split at every level without scanning its text again."""

    def __init__(self, text: str) -> None:
        self.closes: dict[int, int] = {}
        self.commas: dict[int, list[int]] = {-1: []}
        self.parenthesised: set[int] = set()  # the brackets holding a "(" (at any depth)
        opened = [-1]
        for match in _SCAN.finditer(text):
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


def _hoist(inst: Instruction, before: list[Instruction], counts: _Counts, known: dict[str, Instruction]) -> Instruction:
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
        if opcode in _NO_OPERANDS or opening not in brackets.parenthesised:
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


def _add(inst: Instruction, before: list[Instruction], known: dict[str, Instruction], counts: _Counts) -> None:
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
        array = _ARRAY_SHAPE.match(body, at, stop)
        if array is None:
            return None
        end = array.end()
    opcode = _OPCODE.match(body, end, stop)
    if opcode is None:
        return None
    return body[at:end].strip(), opcode.group(1), opcode.end() - 1


def _operand_reference(part: str, inst: Instruction, before: list[Instruction], known: dict[str, Instruction],
                       counts: _Counts) -> str:
    """An operand that names an instruction, as the operand list of ``inst`` writes it; a tuple
    element read in place (``%param.12#2``) made the get-tuple-element it stands for."""
    part = COMMENT.sub("", part).strip() if "/*" in part else part.strip()
    token = part.rsplit(" ", 1)[-1]
    if "#" not in token:
        return part
    name = _after_type(token) or token.lstrip("%")
    return "%" + _element(name, inst.computation, before, known, counts)


def _element(name: str, computation: str, before: list[Instruction], known: dict[str, Instruction],
             counts: _Counts) -> str:
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
        if inst.opcode not in _NO_OPERANDS and any(o in renames for o in inst.operands):
            operand_text = body[: matching(body, -1)]
            names = ", ".join("%" + renames.get(o, o) for o in inst.operands)
            body = names + body[len(operand_text):]
        instructions.append(Instruction(renames.get(inst.name, inst.name), inst.shape_text, inst.opcode, inst.computation,
                                        body, inst.is_root))
    return Computation(computation.name, tuple(instructions), computation.is_entry, computation.line, computation.lines)
