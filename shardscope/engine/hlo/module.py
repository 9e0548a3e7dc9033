"""The values a module's text is read into: :class:`HloModule`, its :class:`Computation` s and their
:class:`Instruction` s (:mod:`shardscope.engine.hlo.text` reads the text into them).

An instruction keeps its name, shape, opcode and the raw text after the opcode; operands and
attributes are parsed from that text when first asked for, since a module of 100,000
instructions is read to find a few dozen collectives and the loops around them. Both printings
are accepted: with and without ``%`` sigils, operands with or without their types, ``metadata``
with a ``stack_frame_id`` into the module's stack-frame tables or with inline
``source_file``/``source_line``. Every property reads any text without an exception: a number
that is none reads as None.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterator, Mapping, TypeVar, cast, overload

from shardscope.engine.hlo.shapes import Shape, parse_shape
from shardscope.engine.hlo.source import SourceLocation, StackFrameIndex
from shardscope.engine.hlo.syntax import COMMENT, QUOTED, integer, matching, split_top, to_int, unquote

__all__ = ["OpMetadata", "Instruction", "Computation", "HloModule", "NO_OPERANDS", "header_number", "op_primitives",
           "name_after_type"]


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
        body = self.body
        end = body.find(")")
        if end >= 0 and _NESTED.search(body, 0, end) is None:  # names and commas up to the ")": they split it
            text = body[:end]
            if text.count(" ") <= text.count(",") and "\t" not in text:  # "%a, %b": no type written against a name
                return tuple(filter(None, text.replace(" ", "").replace("%", "").split(",")))
            return tuple(token.lstrip("%") for part in text.split(",") if (token := part.strip().rsplit(" ", 1)[-1]))
        text = self._split[0]
        names = []
        for part in split_top(text):
            token = COMMENT.sub("", part).strip().rsplit(" ", 1)[-1]
            if ")" in token or "]" in token or "}" in token:  # a type written against the name: (f32[], s32[])%w
                token = name_after_type(token)
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
            body = inst.body
            if any(word in body for word in _CALL_WORDS) and _MAY_CALL.search(body):
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


def name_after_type(token: str) -> str:
    """The name in ``(f32[], s32[])%w``: what follows the last bracket, space or ``%``."""
    end = max(token.rfind(char) for char in _NAME_DELIMITERS)
    return token[end + 1 :]


_CALL_WORDS = ("body=", "condition=", "calls=", "to_apply=", "_computation=", "_computations=")
"""What an instruction that calls a computation holds (a substring search, faster than the pattern)."""
_MAY_CALL = re.compile(r"\b(?:body|condition|calls|to_apply|true_computation|false_computation|branch_computations|called_computations)=")
NO_OPERANDS = frozenset(("constant", "parameter", "iota", "partition-id", "replica-id", "rng-get-and-update-state"))
"""The opcodes whose parentheses hold a literal (a constant's value, a parameter's number), not operands."""
