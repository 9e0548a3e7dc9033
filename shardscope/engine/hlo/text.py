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

from shardscope.engine.hlo.shapes import DTYPE_BITS, ArrayShape, Shape, parse_shape
from shardscope.engine.hlo.source import FileLocation, SourceLocation, StackFrame, StackFrameIndex, parse_stack_frames
from shardscope.engine.hlo.syntax import COMMENT, matching, split_top, to_int, unquote

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
_CALLED = re.compile(r"\b(body|condition|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_CALLED_LISTS = re.compile(r"\b(branch_computations|called_computations|calls)=\{([^}]*)\}")
_INDEX = re.compile(r"\bindex=(\d+)")
_OPERAND_NAME = re.compile(r"([^\s)\]}%]+)$")
_METADATA_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


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
        if self.name not in cache:
            cache[self.name] = self.compute(instance)
        return cast(_T, cache[self.name])  # the cache holds each property's own type under its name


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
        """``(operand text, attribute text)``."""
        end = matching(self.body, -1)
        return self.body[:end], self.body[end + 1 :]

    @_cached
    def operands(self) -> tuple[str, ...]:
        """The names of the instructions this one reads, in operand order."""
        if self.opcode in ("constant", "parameter", "iota", "partition-id", "replica-id"):
            return ()
        names = []
        for part in split_top(self._split[0]):
            token = COMMENT.sub("", part).strip().rsplit(" ", 1)[-1]
            if ")" in token or "]" in token or "}" in token:  # a type written against the name: (f32[], s32[])%w
                match = _OPERAND_NAME.search(token)
                token = match.group(1) if match else ""
            if token:
                names.append(token.lstrip("%"))
        return tuple(names)

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

    @_cached
    def backend_config(self) -> Mapping | str | None:
        """The ``backend_config`` JSON as a dict (the raw text when it is not JSON)."""
        raw = self.attribute("backend_config")
        if raw is None:
            return None
        text = unquote(raw) if raw.startswith('"') else raw
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
    unclosed: str | None = None
    """The computation the text ends inside (its closing ``}`` never came: a truncated file), or None."""

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


_MAY_CALL = re.compile(r"\b(?:body|condition|calls|to_apply|true_computation|false_computation|branch_computations|called_computations)=")


# --------------------------------------------------------------------------- the parse


_HEADER = re.compile(r"^[ \t]*HloModule\s+([^\s,]+),?(.*)$", re.M)
_COMPUTATION = re.compile(r"(ENTRY\s+)?%?([^\s(){}]+)[^{]*\{$")
_STATEMENT = re.compile(r"(ROOT\s+)?%?([^\s=]+)\s*=\s*")
_ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?|[a-z][a-z0-9]*\b")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_NO_OPERANDS = frozenset(("constant", "parameter", "iota", "partition-id", "replica-id", "rng-get-and-update-state"))


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
    """
    header = _HEADER.search(text)
    computations: dict[str, Computation] = {}
    entry = None
    current: str | None = None
    is_entry = False
    statements: list[str] = []
    anonymous = [0]  # how many instructions written inline the module has named so far
    pending = ""
    for line in text.splitlines():
        if "//" in line:
            line = _strip_line_comment(line)
        stripped = line.strip()
        if current is None:
            match = _COMPUTATION.match(stripped) if stripped.endswith("{") and " = " not in stripped else None
            if match is not None and not stripped.startswith("HloModule"):
                current, is_entry, statements, pending = match.group(2), match.group(1) is not None, [], ""
            continue
        if pending and not (stripped == "}" and _closes(pending)):
            pending += " " + stripped
        elif stripped.startswith("}"):
            computations[current] = _computation(current, statements, is_entry, anonymous)
            if is_entry:
                entry = current
            current = None
            continue
        elif not stripped:
            continue
        else:
            pending = stripped
        if _complete(pending):
            statements.append(pending)
            pending = ""
    if entry is None and computations:
        entry = next(reversed(computations))
        computations[entry] = dataclasses.replace(computations[entry], is_entry=True)
    return _unique_names(HloModule(header.group(1) if header else "", header.group(2) if header else "", computations,
                                   entry, parse_stack_frames(text), current))


def _strip_line_comment(line: str) -> str:
    """``line`` without a ``//`` comment (one inside a quoted string is kept)."""
    quoted = False
    for k, char in enumerate(line):
        if char == '"' and (k == 0 or line[k - 1] != "\\"):
            quoted = not quoted
        elif char == "/" and not quoted and line.startswith("//", k):
            return line[:k]
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
        return not statement.endswith(")") or _OPCODE.search(statement) is not None
    return _closes(statement)


def _closes(statement: str) -> bool:
    """The exact form of :func:`_complete`'s bracket check."""
    depth = 0
    for match in _BRACKETS.finditer(statement):
        token = match.group()
        if token in "([{":
            depth += 1
        elif token in ")]}":
            depth -= 1
    return depth <= 0


_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[()\[\]{}]')


def _computation(name: str, statements: list[str], is_entry: bool, anonymous: list[int]) -> Computation:
    """The computation of the whole instruction statements of its body (``anonymous`` counts the
    module's inline operands named so far)."""
    instructions: list[Instruction] = []
    known: dict[str, Instruction] = {}
    for statement in statements:
        parsed = _instruction(statement, name)
        if parsed is None:
            continue
        inst, inline = parsed
        if inline:
            inst = _hoist(inst, instructions, anonymous, known)
        instructions.append(inst)
        known[inst.name] = inst
    return Computation(name, tuple(instructions), is_entry)


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


def _hoist(inst: Instruction, before: list[Instruction], anonymous: list[int],
           known: dict[str, Instruction]) -> Instruction:
    """``inst`` with each operand written inline (``s32[] constant(16)``) made an instruction of
    its own, appended to ``before`` as XLA's parser adds it ahead of its user; and each tuple
    element read in place (``%param.12#2``, how newer XLA prints a get-tuple-element it folded
    into its user) made the get-tuple-element it stands for, named as written (``param.12#2``).
    ``known`` holds the computation's instructions so far by name."""
    operand_text = inst.body[: matching(inst.body, -1)]
    names = []
    for part in split_top(operand_text):
        part = COMMENT.sub("", part).strip()
        split = _shape_and_opcode(part, 0) if part[:1] != "%" else None
        if split is None:
            token = part.rsplit(" ", 1)[-1]
            if "#" in token:
                match = _OPERAND_NAME.search(token)
                part = "%" + _element(match.group(1) if match else token.lstrip("%"), inst.computation, before, known)
            names.append(part)
            continue
        shape, opcode, body = split
        anonymous[0] += 1
        name = f"{opcode}.anon" + (f".{anonymous[0] - 1}" if anonymous[0] > 1 else "")
        inner = Instruction(name, shape, opcode, inst.computation, body)
        if opcode not in _NO_OPERANDS and _holds_parenthesis(body):
            inner = _hoist(inner, before, anonymous, known)
        before.append(inner)
        known[name] = inner
        names.append("%" + name)
    body = ", ".join(names) + inst.body[len(operand_text):]
    return dataclasses.replace(inst, body=body, _cache=None)


def _element(name: str, computation: str, before: list[Instruction], known: dict[str, Instruction]) -> str:
    """The get-tuple-element ``name`` (``param.12#2``, ``param#1#0`` for a nested tuple) stands
    for, made once per computation and appended to ``before``; its name."""
    if name in known or "#" not in name:
        return name
    base, _, index = name.rpartition("#")
    base = _element(base, computation, before, known)
    source = known.get(base)
    shape = ""
    if source is not None and source.shape.is_tuple and index.isdigit() and int(index) < len(source.shape.elements):
        shape = source.shape.elements[int(index)].text
    element = Instruction(name, shape, "get-tuple-element", computation, f"%{base}), index={index}")
    before.append(element)
    known[name] = element
    return name


def _unique_names(module: HloModule) -> HloModule:
    """``module`` with every instruction name unique across it, as XLA's parser leaves a module:
    a name an earlier computation holds gets the next free ``.N`` suffix, and the operands of
    its own computation follow the new name. Printed modules already have unique names: they
    are returned as they are."""
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
    used: set[str] = set()
    computations = {}
    for computation in module.computations.values():
        renames: dict[str, str] = {}
        for inst in computation.instructions:
            if inst.name in used:
                base, k = inst.name, 1
                while f"{base}.{k}" in taken:
                    k += 1
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
        instructions.append(dataclasses.replace(inst, name=renames.get(inst.name, inst.name), body=body, _cache=None))
    return Computation(computation.name, tuple(instructions), computation.is_entry)
