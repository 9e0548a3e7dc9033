"""A parser of XLA's HLO text (``compiled.as_text()``): computations, instructions, source tables.

Text is the interface: Python's ``HloInstruction`` binding exposes only names and opcodes. The
parse is one pass over the lines that splits each instruction into its name, shape, opcode and
the raw text after the opcode; operands and attributes are parsed when first asked for, since a
module of 100,000 instructions is read to find a few dozen collectives and the loops around
them. Both printings are accepted: with and without ``%`` sigils, operands with or without
their types, ``metadata`` with a ``stack_frame_id`` into the module's stack-frame tables or
with inline ``source_file``/``source_line``.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from math import prod
from typing import Iterator, Mapping


_DTYPE_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
    "s32": 32, "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64,
    "c128": 128, "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8,
    "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 4, "token": 0, "opaque": 0,
}
"""Bits per element of each primitive type as HLO prints it."""


# --------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class ArrayShape:
    """One array: ``f32[16,32]`` (dims as printed; a dynamic ``<=8`` counts its bound)."""

    dtype: str
    dims: tuple[int, ...]

    @property
    def elements(self) -> int:
        """How many elements it holds."""
        return prod(self.dims)

    @property
    def nbytes(self) -> int:
        """Bytes of one copy (sub-byte types packed, rounded up to whole bytes)."""
        return (self.elements * _DTYPE_BITS.get(self.dtype, 0) + 7) // 8

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


@dataclass(frozen=True)
class Shape:
    """An instruction's shape: one array, or a tuple of shapes (``elements``)."""

    text: str
    array: ArrayShape | None
    elements: tuple["Shape", ...] = ()

    @property
    def is_tuple(self) -> bool:
        """True for a tuple shape (a while's carry, a combined collective)."""
        return self.array is None

    @functools.cached_property
    def arrays(self) -> tuple[ArrayShape, ...]:
        """Every array leaf, in order."""
        if self.array is not None:
            return (self.array,)
        return tuple(leaf for element in self.elements for leaf in element.arrays)

    @property
    def nbytes(self) -> int:
        """Bytes of every leaf together."""
        return sum(a.nbytes for a in self.arrays)

    def element(self, index: int) -> "Shape":
        """The tuple element ``index`` (the shape itself for an array and index 0)."""
        if self.array is not None:
            if index != 0:
                raise IndexError(f"{self.text} is not a tuple")
            return self
        return self.elements[index]


_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")


@functools.lru_cache(maxsize=4096)
def parse_shape(text: str) -> Shape:
    """``f32[16,32]{1,0}`` or ``(f32[4]{0}, (s32[], f32[]))`` as a :class:`Shape`."""
    text = _COMMENT.sub("", text).strip()
    if text.startswith("("):
        inner = text[1 : _matching(text, 0)]
        return Shape(text, None, tuple(parse_shape(part) for part in _split_top(inner) if part.strip()))
    match = _ARRAY.match(text)
    if match is None:
        return Shape(text, ArrayShape(text.split("[", 1)[0] or "opaque", ()))
    dims = tuple(int(d.lstrip("<=")) for d in match.group(2).split(",") if d.strip())
    return Shape(text, ArrayShape(match.group(1), dims))


# --------------------------------------------------------------------------- source tables


@dataclass(frozen=True)
class SourceLocation:
    """A Python source position: ``file``, ``line``, the ``function`` it is in."""

    file: str
    line: int
    function: str = ""
    column: int = 0

    def text(self, short: bool = True) -> str:
        """``train.py:42 (loss)`` (the whole path when ``short`` is false)."""
        file = self.file.rsplit("/", 1)[-1] if short else self.file
        return f"{file}:{self.line}" + (f" ({self.function})" if self.function else "")

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class FileLocation:
    """An entry of the ``FileLocations`` table (ids are 1-based positions in the other tables)."""

    file_name_id: int
    function_name_id: int
    line: int
    column: int = 0


@dataclass(frozen=True)
class StackFrame:
    """An entry of the ``StackFrames`` table: a location and the frame that called it (0: none)."""

    file_location_id: int
    parent_frame_id: int


@dataclass(frozen=True)
class StackFrameIndex:
    """The module's stack-frame tables, which ``metadata={... stack_frame_id=N}`` points into.

    XLA prints every table 1-based and each parent as ``parent_frame_id + 1`` (the proto's
    1-based id plus one: ``HloModule::PrintStackFrameIndex``), so the printed ``1`` means "no
    parent"; the parse stores the proto's value (0 for none).
    """

    file_names: tuple[str, ...] = ()
    function_names: tuple[str, ...] = ()
    file_locations: tuple[FileLocation, ...] = ()
    frames: tuple[StackFrame, ...] = ()

    def stack(self, frame_id: int) -> tuple[SourceLocation, ...]:
        """The call stack of ``frame_id``, innermost first (empty when the id is unknown)."""
        found: list[SourceLocation] = []
        seen: set[int] = set()
        while 0 < frame_id <= len(self.frames) and frame_id not in seen:
            seen.add(frame_id)
            frame = self.frames[frame_id - 1]
            location = self._location(frame.file_location_id)
            if location is not None:
                found.append(location)
            frame_id = frame.parent_frame_id
        return tuple(found)

    def location(self, frame_id: int) -> SourceLocation | None:
        """The innermost source position of ``frame_id``: the line that made the instruction."""
        stack = self.stack(frame_id)
        return stack[0] if stack else None

    def _location(self, location_id: int) -> SourceLocation | None:
        if not 0 < location_id <= len(self.file_locations):
            return None
        loc = self.file_locations[location_id - 1]
        file = _table_entry(self.file_names, loc.file_name_id)
        function = _table_entry(self.function_names, loc.function_name_id)
        return SourceLocation(file, loc.line, function, loc.column)


def _table_entry(table: tuple[str, ...], one_based: int) -> str:
    return table[one_based - 1] if 0 < one_based <= len(table) else ""


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


_NO_METADATA = OpMetadata()
_CALL_ROLES = ("body", "condition", "calls", "to_apply", "true_computation", "false_computation")
_CALLED = re.compile(r"\b(body|condition|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_CALLED_LISTS = re.compile(r"\b(branch_computations|called_computations|calls)=\{([^}]*)\}")
_INDEX = re.compile(r"\bindex=(\d+)")
_METADATA_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')
_ESCAPE = re.compile(rb"\\([0-7]{1,3}|x[0-9a-fA-F]{2}|.)")
_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r"}


@dataclass(frozen=True)
class Instruction:
    """One HLO instruction: ``name = shape opcode(operands), attributes``.

    ``body`` is the text after ``opcode(``; :attr:`operands` and :attr:`attributes` are parsed
    from it on first use.
    """

    name: str
    shape_text: str
    opcode: str
    computation: str
    body: str = field(repr=False)
    is_root: bool = False

    @functools.cached_property
    def shape(self) -> Shape:
        """The parsed :class:`Shape`."""
        return parse_shape(self.shape_text)

    @functools.cached_property
    def _split(self) -> tuple[str, str]:
        """``(operand text, attribute text)``."""
        end = _matching(self.body, -1)
        return self.body[:end], self.body[end + 1 :]

    @functools.cached_property
    def operands(self) -> tuple[str, ...]:
        """The names of the instructions this one reads, in operand order."""
        if self.opcode in ("constant", "parameter", "iota", "partition-id", "replica-id"):
            return ()
        names = []
        for part in _split_top(self._split[0]):
            token = _COMMENT.sub("", part).strip().rsplit(" ", 1)[-1]
            if token:
                names.append(token.lstrip("%"))
        return tuple(names)

    @property
    def literal(self) -> str:
        """What is inside the parentheses: a constant's value, a parameter's number."""
        return self._split[0].strip()

    @functools.cached_property
    def attributes(self) -> Mapping[str, str]:
        """``{key: raw value}`` of the attributes after the operands, in print order."""
        found: dict[str, str] = {}
        last = None
        for part in _split_top(self._split[1]):
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

    @functools.cached_property
    def metadata(self) -> OpMetadata:
        """The parsed ``metadata={op_name=... stack_frame_id=...}`` (empty when absent)."""
        raw = self.attribute("metadata")
        if not raw:
            return _NO_METADATA
        fields = {key: _unquote(value) for key, value in _METADATA_FIELD.findall(raw.strip()[1:-1])}
        return OpMetadata(
            op_name=fields.get("op_name", ""),
            op_type=fields.get("op_type", ""),
            source_file=fields.get("source_file", ""),
            source_line=_int(fields.get("source_line")),
            stack_frame_id=_int(fields.get("stack_frame_id")),
        )

    @functools.cached_property
    def frontend_attributes(self) -> Mapping[str, str]:
        """``frontend_attributes={key="value", ...}`` as a dict."""
        raw = self.attribute("frontend_attributes")
        if not raw:
            return {}
        pairs = (part.strip().partition("=") for part in _split_top(raw.strip()[1:-1]))
        return {key: _unquote(value) for key, _, value in pairs if key}

    @functools.cached_property
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
        """The ``channel_id`` of a collective (None when it has none)."""
        raw = self.attribute("channel_id")
        return int(raw) if raw is not None else None

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

    @functools.cached_property
    def backend_config(self) -> Mapping | str | None:
        """The ``backend_config`` JSON as a dict (the raw text when it is not JSON)."""
        raw = self.attribute("backend_config")
        if raw is None:
            return None
        text = _unquote(raw) if raw.startswith('"') else raw
        try:
            return json.loads(text)
        except ValueError:
            return text

    @property
    def known_trip_count(self) -> int | None:
        """A while loop's ``known_trip_count`` from its backend config (None when XLA did not know it)."""
        config = self.backend_config
        if not isinstance(config, dict):
            return None
        count = config.get("known_trip_count", {})
        return int(count["n"]) if isinstance(count, dict) and "n" in count else None

    @property
    def dimensions(self) -> tuple[int, ...] | None:
        """The ``dimensions={...}`` of an all-gather, reduce-scatter, broadcast or transpose."""
        raw = self.attribute("dimensions")
        if raw is None:
            return None
        return tuple(int(d) for d in raw.strip("{}").split(",") if d.strip())

    @property
    def tuple_index(self) -> int | None:
        """A get-tuple-element's ``index``."""
        if self.opcode != "get-tuple-element":
            return None
        match = _INDEX.search(self._split[1])
        return int(match.group(1)) if match else None

    @property
    def parameter_number(self) -> int | None:
        """A parameter's number."""
        return int(self.literal) if self.opcode == "parameter" else None

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
        """``num_partitions`` from the module header (1 when not printed)."""
        match = re.search(r"\bnum_partitions=(\d+)", self.header)
        return int(match.group(1)) if match else 1

    @property
    def replica_count(self) -> int:
        """``replica_count`` from the module header (1 when not printed)."""
        match = re.search(r"\breplica_count=(\d+)", self.header)
        return int(match.group(1)) if match else 1

    def source(self, inst: Instruction) -> SourceLocation | None:
        """Where the instruction comes from: its stack frame's innermost position, or the
        inline ``source_file``/``source_line`` older XLA printed (None when it has neither)."""
        meta = inst.metadata
        if meta.stack_frame_id:
            location = self.stack_frames.location(meta.stack_frame_id)
            if location is not None:
                return location
        if meta.source_file:
            return SourceLocation(meta.source_file, meta.source_line)
        return None


_MAY_CALL = re.compile(r"\b(?:body|condition|calls|to_apply|true_computation|false_computation|branch_computations|called_computations)=")


# --------------------------------------------------------------------------- the parse


_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_STRING_ENTRY = re.compile(r'^\s*\d+\s+"((?:[^"\\]|\\.)*)"\s*$')
_FIELDS_ENTRY = re.compile(r"(\w+)=(-?\d+)")
_HEADER = re.compile(r"^HloModule\s+([^\s,]+),?(.*)$", re.M)
_LINE = re.compile(
    r"^[ \t]+(ROOT )?%?([^\s=]+) = (\(.*?\)|\S+) ([a-z][\w\-]*)\((.*)$"  # an instruction
    r"|^(ENTRY )?%?([^\s(]+)[^\n]*\{[ \t]*$"  # a computation's first line
    r"|^\}",  # its end
    re.M,
)


def parse(text: str) -> HloModule:
    """Parse the text of one HLO module (``compiled.as_text()``).

    One regular expression finds the instruction lines and computation boundaries; lines that
    are neither (a log line, a note printed around the module) are skipped.
    """
    header = _HEADER.search(text)
    computations: dict[str, Computation] = {}
    entry = None
    current: str | None = None
    is_entry = False
    instructions: list[Instruction] = []
    append = instructions.append
    for match in _LINE.finditer(text):
        root, name, shape, opcode, body, entry_mark, computation = match.groups()
        if name is not None:
            if current is not None:
                append(Instruction(name, shape, opcode, current, body, root is not None))
        elif computation is not None:
            current, is_entry, instructions = computation, entry_mark is not None, []
            append = instructions.append
            if is_entry:
                entry = current
        elif current is not None:
            computations[current] = Computation(current, tuple(instructions), is_entry)
            current = None
    return HloModule(header.group(1) if header else "", header.group(2) if header else "", computations, entry,
                     _stack_frames({table: _table_rows(text, table) for table in _TABLES}))


def _table_rows(text: str, table: str) -> list[str]:
    """The numbered rows under the line ``table`` (``FileNames``, ...), up to the next other line."""
    start = text.find("\n" + table + "\n")
    if start < 0:
        return []
    rows = []
    end = text.find("\n\n", start + 1)
    for line in text[start + len(table) + 2 : end if end >= 0 else len(text)].splitlines():
        line = line.strip()
        if not line[:1].isdigit():
            break
        rows.append(line)
    return rows


def _stack_frames(tables: dict[str, list[str]]) -> StackFrameIndex:
    def strings(rows: list[str]) -> tuple[str, ...]:
        found = []
        for row in rows:
            match = _STRING_ENTRY.match(row)
            found.append(_unquote('"' + match.group(1) + '"') if match else "")
        return tuple(found)

    def fields(rows: list[str]) -> list[dict[str, int]]:
        return [{k: int(v) for k, v in _FIELDS_ENTRY.findall(row)} for row in rows]

    locations = tuple(
        FileLocation(f.get("file_name_id", 0), f.get("function_name_id", 0), f.get("line", 0), f.get("column", 0))
        for f in fields(tables["FileLocations"])
    )
    # printed as parent_frame_id + 1 (HloModule::PrintStackFrameIndex): store the proto's value
    frames = tuple(
        StackFrame(f.get("file_location_id", 0), max(f.get("parent_frame_id", 0) - 1, 0))
        for f in fields(tables["StackFrames"])
    )
    return StackFrameIndex(strings(tables["FileNames"]), strings(tables["FunctionNames"]), locations, frames)


# --------------------------------------------------------------------------- text helpers


_OPEN, _CLOSE = "([{", ")]}"
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[()\[\]{},]')


def _matching(text: str, start: int) -> int:
    """The index of the bracket closing the one at ``start`` (``start=-1``: an implied opening
    bracket before the text). The length of the text when it is never closed."""
    depth = 0
    for match in _TOKENS.finditer(text, start + 1 if start >= 0 else 0):
        token = match.group()
        if token in _OPEN:
            depth += 1
        elif token in _CLOSE:
            if depth == 0:
                return match.start()
            depth -= 1
    return len(text)


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes."""
    parts, depth, last = [], 0, 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token == ",":
            if depth == 0:
                parts.append(text[last : match.start()])
                last = match.end()
        elif token in _OPEN:
            depth += 1
        elif token in _CLOSE:
            depth -= 1
    parts.append(text[last:])
    return [part for part in parts if part.strip()]


def _unquote(value: str) -> str:
    """A C-escaped quoted string (``"params[\\'W\\']"``) as its text; other values unchanged."""
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return value
    raw = value[1:-1]
    if "\\" not in raw:
        return raw
    return _ESCAPE.sub(_unescape, raw.encode("utf-8")).decode("utf-8", "replace")


def _unescape(match: re.Match) -> bytes:
    code = match.group(1)
    if code[:1].isdigit():
        return bytes([int(code, 8) & 0xFF])
    if code[:1] == b"x" and len(code) == 3:
        return bytes([int(code[1:], 16)])
    return _ESCAPES.get(code, code)


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0
