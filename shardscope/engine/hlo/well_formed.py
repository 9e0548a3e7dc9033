"""Module text from outside shardscope, held to what XLA prints before anything reads it.

``compiled.as_text()`` of a program shardscope compiled is XLA's own printing and is read as it is
(:func:`~shardscope.engine.hlo.text.parse`). The text a user points shardscope at
(``check --xla-dump``'s files, :func:`shardscope.estimate_module`'s string) may be cut off by a
run killed while it wrote its dump, edited by hand, or not HLO at all: :func:`read_module` parses
it and refuses it, with the line to blame, unless it holds together as XLA's modules do:

- text, not binary: no NUL byte nor other control character;
- every computation closed, one ENTRY (a dumped module's header names its entry's layout, so a
  text that ends before its ENTRY is told from a hand-written module without one), every line
  of a computation an instruction, no name given twice;
- every opcode one of XLA's, every shape well formed (an element type XLA has, dimensions that
  are numbers an int64 holds), every operand an instruction of the same computation and no
  instruction its own operand through others, one ROOT, parameters numbered 0 to n-1;
- every called computation there, each while with its body and condition, no computation that
  calls itself (directly or through others), calls nested at most :data:`MAX_CALL_DEPTH` deep
  and expanding to at most :data:`EXPANSION_PER_INSTRUCTION` times the module's instructions (a
  diamond of 40 calls reaches its last computation along 2**40 paths);
- the numbers the plan reads well formed: a while's ``known_trip_count`` a positive count, a
  get-tuple-element's index inside its tuple, a collective's ``replica_groups`` and
  ``source_target_pairs`` readable and inside the module's devices, ``channel_id`` a number,
  the header's ``num_partitions`` and ``replica_count`` positive, every ``stack_frame_id`` a row
  of the stack-frame tables and those tables whole.

Every check reads the module once (the call graph and each computation's operands with a
stack, no recursion), so the time is linear in the text's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from shardscope.collective_kinds import NAMES as COLLECTIVE_NAMES, SUM_KINDS
from shardscope.engine.hlo import replica_groups
from shardscope.engine.hlo.shapes import MAX_TUPLE_DEPTH, shape_error
from shardscope.engine.hlo.source import stack_frame_problem
from shardscope.engine.hlo.syntax import QUOTED, integer
from shardscope.engine.hlo.text import Computation, HloModule, Instruction, header_number, parse
from shardscope.errors import ArgumentTypeError, HloTextError

__all__ = ["MAX_TEXT_CHARACTERS", "MAX_CALL_DEPTH", "MAX_EXPANSION", "EXPANSION_PER_INSTRUCTION", "OPCODES", "read_module",
           "first_problem", "value_kind"]

MAX_TEXT_CHARACTERS = 256 * 2**20
"""The longest text read (256 Mi characters): the modules of large programs on large slices run to
tens of megabytes; a longer text is refused before it is parsed, whatever it holds. With
:data:`~shardscope.engine.hlo.text.MAX_INSTRUCTIONS`, it bounds the memory a parse takes (about
1.3 KB an instruction, parsed and planned: 2.6 GB at most)."""
MAX_CALL_DEPTH = 64
"""How deep computations may call one another from the entry (XLA's compiled modules: a few levels)."""
MAX_EXPANSION = 10_000_000
"""The most instructions a module's calls may expand to, each computation counted once per call path
from the entry (XLA flattens the call graph of what it compiles: each computation is called from one
place, so a real module expands to about its own size; reduction combiners are shared)."""
EXPANSION_PER_INSTRUCTION = 16
"""Nor more than this many times the module's own instructions (and 10,000): the readers that walk
every call path (the step estimate's) then read each module in time linear in its size. XLA's 65
test modules, the stored real modules and the TPU corpus expand to at most 2.2 times theirs."""

_OTHER_OPCODES = frozenset((
    "abs", "add", "add-dependency", "after-all", "and", "async-done", "async-start", "async-update", "atan2",
    "batch-norm-grad", "batch-norm-inference", "batch-norm-training", "bitcast", "bitcast-convert", "broadcast",
    "call", "cbrt", "ceil", "cholesky", "clamp", "compare", "complex", "concatenate", "conditional", "constant",
    "convert", "convolution", "copy", "copy-done", "copy-start", "cosine", "count-leading-zeros", "custom-call",
    "divide", "domain", "dot", "dynamic-reshape", "dynamic-slice", "dynamic-update-slice", "erf", "exponential",
    "exponential-minus-one", "fft", "floor", "fusion", "gather", "get-dimension-size", "get-tuple-element", "imag",
    "infeed", "iota", "is-finite", "log", "log-plus-one", "logistic", "map", "maximum", "minimum", "multiply",
    "negate", "not", "opt-barrier", "or", "outfeed", "pad", "parameter", "partition-id", "popcnt", "power",
    "ragged-dot", "real", "recv", "recv-done", "reduce", "reduce-precision", "reduce-window", "remainder",
    "replica-id", "reshape", "reverse", "rng", "rng-bit-generator", "rng-get-and-update-state", "round-nearest-afz",
    "round-nearest-even", "rsqrt", "scatter", "select", "select-and-scatter", "send", "send-done",
    "set-dimension-size", "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "slice",
    "sort", "sqrt", "stochastic-convert", "subtract", "tan", "tanh", "topk", "transpose", "triangular-solve", "tuple",
    "while", "xor",
))
"""XLA's opcodes (``xla/hlo/ir/hlo_opcode.h``) but the collectives, which :mod:`shardscope.collective_kinds` lists."""
OPCODES = _OTHER_OPCODES | frozenset(COLLECTIVE_NAMES) | frozenset(
    f"{name}-{phase}" for name in COLLECTIVE_NAMES for phase in ("start", "done"))
"""Every opcode XLA prints; an asynchronous wrapper also prints as ``<opcode>-start``, ``-update``
and ``-done`` of the instruction it wraps (``slice-start``, ``fusion-done``)."""

_NEEDS = {"while": ("body", "condition"), "fusion": ("calls",), "async-start": ("calls",), "reduce": ("to_apply",),
          "reduce-window": ("to_apply",), "map": ("to_apply",), "sort": ("to_apply",),
          **{f"{kind}{phase}": ("to_apply",) for kind in SUM_KINDS for phase in ("", "-start")}}
"""The computations an instruction cannot be without, by the role it calls them in (a summing
collective's combiner too)."""
_ONE_OF = {"call": ("to_apply", "calls"), "conditional": ("branch", "true_computation")}
_PASSES_NOTHING = frozenset(("constant", "parameter", "iota", "partition-id", "replica-id", "rng-get-and-update-state"))
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MAX_NUMBER_DIGITS = 40
"""The longest run of digits read outside a quoted string: XLA's longest numbers (a u64 constant,
a double) have about 20; 5,000 digits are no number XLA printed (nor one Python reads quickly)."""
_LONG_NUMBER = re.compile(r"\d{%d}" % (MAX_NUMBER_DIGITS + 1))
_ASCII_DIGITS = {code: "1" if chr(code).isdigit() else "." for code in range(128)}
"""Each ASCII digit as ``1``, every other ASCII character as ``.``: a text so translated holds a run of
digits where it holds a run of ``1`` (``str.translate`` and ``in``: ten times the speed of a pattern)."""
_QUOTED_OR_LONG = re.compile(QUOTED + r"|(\d{%d,}+)" % (MAX_NUMBER_DIGITS + 1), re.S)
_INTEGERS = re.compile(r"\{\s*+(?:-?\d++\s*+(?:,\s*+-?\d++\s*+)*+)?\}")
_SLICES = re.compile(r"\{\s*+(?:\[\d++:\d++(?::\d++)?\](?:\s*+,\s*+\[\d++:\d++(?::\d++)?\])*+)?\s*+\}")
_LISTS = tuple((key, f"{key}=", form) for key, form in (
    ("dimensions", _INTEGERS), ("dynamic_slice_sizes", _INTEGERS), ("slice_sizes", _INTEGERS), ("slice", _SLICES)))
"""The attributes the plan reads as lists of numbers (each as written before its value), and the form each must have."""
_DIRECTIONS = frozenset(("EQ", "NE", "LT", "LE", "GT", "GE"))
_STACK_FRAME_ID = re.compile(r"stack_frame_id=(-?\w++)")
_TRUNCATION_HINT = ("copy the module again from the run's dump folder, or dump it again "
                    "(XLA_FLAGS=--xla_dump_to=DIR python train.py)")
_EDIT_HINT = ("shardscope reads the modules XLA prints (compiled.as_text(), an XLA dump's *after_optimizations.txt); "
              "this one was edited or damaged: take it from XLA again")


@dataclass(frozen=True)
class Problem:
    """What is wrong with a module's text: the line to blame (None: the text as a whole), what,
    and whether it is what a cut-off text looks like; ``at``, the instruction to blame, whose line
    is looked up once the problem is the one said (:meth:`Computation.line_of`)."""

    line: int | None
    what: str
    truncated: bool = False
    at: Instruction | None = None

    @classmethod
    def of(cls, inst: Instruction, what: str) -> "Problem":
        """The problem of the instruction ``inst``, on its line."""
        return cls(None, what, at=inst)


def read_module(text: str, origin: str = "the text") -> HloModule:
    """The module of ``text``, a module's text from outside shardscope (``origin`` says where from in
    messages: ``--xla-dump module_0014.jit_step.cpu_after_optimizations.txt``, ``the text``).

    Raises :class:`~shardscope.errors.HloTextError` (a ``ValueError``) naming the line and what is
    wrong when the text is not a module XLA would print (see the module's docstring), and
    :class:`~shardscope.errors.ArgumentTypeError` (a ``TypeError``) when it is not a string.
    """
    if not isinstance(text, str):
        raise ArgumentTypeError(f"{origin} is {value_kind(text)}, not a str.",
                                "pass compiled.as_text(), or the text of an XLA dump's *after_optimizations.txt "
                                "(bytes: decode them first)")
    if len(text) > MAX_TEXT_CHARACTERS:
        raise HloTextError(f"{origin} holds {len(text):,} characters; shardscope reads modules of at most "
                           f"{MAX_TEXT_CHARACTERS:,}.", "is it a module? XLA's largest dumps run to tens of megabytes")
    problem = _control_character(text) or _long_number(text)
    module = parse(text) if problem is None else None
    if module is not None:
        problem = first_problem(module, text)
    if problem is None:
        assert module is not None
        return module
    where = f"{origin}, line {problem.line}:" if problem.line is not None else origin
    line = (origin, problem.line) if problem.line is not None else None
    if problem.truncated:
        raise HloTextError(f"{where} {problem.what}; was the run killed while writing its dump?", _TRUNCATION_HINT,
                           line=line)
    raise HloTextError(f"{where} {problem.what}.", _EDIT_HINT, line=line)


def value_kind(value: object) -> str:
    """``None``, ``bytes``, ``an int (5)``: what a value handed to a function is, for a message."""
    if value is None:
        return "None"
    name = type(value).__name__
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{name} ({shown})" if name in ("bytes", "bytearray") else \
        f"a{'n' if name[:1] in 'aeiou' else ''} {name} ({shown})"


def _control_character(text: str) -> Problem | None:
    """A NUL byte or other control character (a binary file, a text damaged on its way)."""
    found = _CONTROL.search(text)
    if found is None:
        return None
    char = found.group()
    what = "a NUL byte" if char == "\x00" else f"the control character {char!r}"
    column = found.start() - text.rfind("\n", 0, found.start())
    return Problem(_line_of(text, found.start()), f"{what} at column {column}: it is binary, not HLO text")


def _long_number(text: str) -> Problem | None:
    """A run of more than :data:`MAX_NUMBER_DIGITS` digits outside quoted strings (inside one, a
    name may hold any digits)."""
    if text.isascii():
        if "1" * (MAX_NUMBER_DIGITS + 1) not in text.translate(_ASCII_DIGITS):
            return None
    elif _LONG_NUMBER.search(text) is None:  # other digits than ASCII's are digits to int() too
        return None
    for found in _QUOTED_OR_LONG.finditer(text):
        if found.group(1) is not None:
            return Problem(_line_of(text, found.start()), f"a number of {len(found.group(1)):,} digits: no number XLA "
                                                          f"prints has more than {MAX_NUMBER_DIGITS}")
    return None


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def first_problem(module: HloModule, text: str) -> Problem | None:
    """The first thing that makes ``module`` (the parse of ``text``) no module XLA would print, or None."""
    if module.problems:
        line, what = min(module.problems)
        return Problem(line, what, truncated="not closed" in what or "text ends" in what)
    if not module.computations:
        return Problem(None, "holds no computation: it is not HLO text")
    header = _header_problem(module, _line_of(text, max(text.find("HloModule"), 0)))
    if header is not None:
        return header
    for check in (_instruction_problem, _call_problem):
        found = check(module)
        if found is not None and found.at is not None:
            return Problem(module.computations[found.at.computation].line_of(found.at), found.what)
        if found is not None:
            return found
    frames = stack_frame_problem(text, module.stack_frames)
    if frames is not None:
        return Problem(*frames)
    return _stack_frame_id_problem(module, text)


def _header_problem(module: HloModule, line: int) -> Problem | None:
    """A count of devices in the module's header (on ``line``) that is none."""
    for key in ("num_partitions", "replica_count"):
        if f"{key}=" in module.header:
            value = header_number(module.header, key)
            if value is None or not 0 < value <= replica_groups.MAX_DEVICES:
                return Problem(line, f"the header's {key} is not a count of devices (1 to {replica_groups.MAX_DEVICES:,})")
    if module.num_partitions * module.replica_count > replica_groups.MAX_DEVICES:
        return Problem(line, f"the header's num_partitions x replica_count is more than {replica_groups.MAX_DEVICES:,} "
                             "devices")
    return None


# --------------------------------------------------------------------------- computations


def _instruction_problem(module: HloModule) -> Problem | None:
    devices = module.num_partitions * module.replica_count
    stated = "num_partitions=" in module.header or "replica_count=" in module.header
    for computation in module.computations.values():
        position = {inst.name: k for k, inst in enumerate(computation.instructions)}
        found = _computation_problem(computation, position)
        if found is not None:
            return found
        for inst in computation.instructions:
            found = _values_problem(inst, computation, position, devices if stated else None)
            if found is not None:
                return found
    return None


def _computation_problem(computation: Computation, position: dict[str, int]) -> Problem | None:
    """A computation without instructions, with two ROOTs, with parameters numbered out of turn, with an
    operand that is none of its instructions or instructions that are their own operands."""
    if not computation.instructions:
        return Problem(computation.line, f"the computation %{computation.name} holds no instruction")
    roots = [inst for inst in computation.instructions if inst.is_root]
    if len(roots) > 1:
        return Problem.of(roots[1], f"a second ROOT in %{computation.name} (%{roots[0].name} is its first)")
    numbers: dict[int, Instruction] = {}
    for inst in computation.instructions:
        if inst.opcode not in OPCODES and not _wrapped_opcode(inst.opcode):
            return Problem.of(inst, f"%{inst.name} has the opcode {inst.opcode[:40]!r}, which XLA does not have")
        error = shape_error(inst.shape_text)
        if error is not None:
            return Problem.of(inst, f"the shape of %{inst.name} ({inst.shape_text[:60]}): {error}")
        if inst.opcode == "parameter":
            number = inst.parameter_number
            if number is None or number < 0 or number in numbers:
                taken = f" (%{numbers[number].name} has it)" if number in numbers else ""
                return Problem.of(inst, f"%{inst.name} is parameter({inst.literal[:40]}): not a parameter number"
                                          f"{taken}")
            numbers[number] = inst
    if numbers and max(numbers) >= len(numbers):
        return Problem.of(numbers[max(numbers)], f"%{computation.name} has {len(numbers)} parameters and one "
                                                    f"numbered {max(numbers)}")
    return _dataflow_problem(computation, position)


def _wrapped_opcode(opcode: str) -> bool:
    """True for an asynchronous wrapper printed after what it wraps: ``slice-start``, ``fusion-done``."""
    base, _, phase = opcode.rpartition("-")
    return phase in ("start", "update", "done") and base in OPCODES


def _dataflow_problem(computation: Computation, position: dict[str, int]) -> Problem | None:
    """An operand that names no instruction of ``computation`` (``position``: each instruction's
    place in it), or instructions that read their own results through others. Printed modules
    list each instruction after its operands (one pass settles it); a hand-written one in another
    order is sorted first."""
    ordered = True
    for k, inst in enumerate(computation.instructions):
        for operand in inst.operands:
            at = position.get(operand)
            if at is None:
                return Problem.of(inst, _undefined(inst, operand, computation))
            ordered = ordered and at < k
    return None if ordered else _cycle_problem(computation, position)


def _undefined(inst: Instruction, operand: str, computation: Computation) -> str:
    if operand.count("#") > MAX_TUPLE_DEPTH:  # an element read in place is made an instruction unless so deep
        return f"%{inst.name} reads the tuple element %{operand[:60]}, nested deeper than tuples nest"
    return f"%{inst.name} reads %{operand[:60]}, which is no instruction of %{computation.name}"


def _cycle_problem(computation: Computation, position: dict[str, int]) -> Problem | None:
    """Instructions of ``computation`` that read their own results (Kahn's sort: what is left unsorted)."""
    instructions = computation.instructions
    waiting = [len(set(inst.operands)) for inst in instructions]
    users: dict[int, list[int]] = {}
    for k, inst in enumerate(instructions):
        for operand in set(inst.operands):
            users.setdefault(position[operand], []).append(k)
    ready = [k for k, count in enumerate(waiting) if count == 0]
    done = 0
    while ready:
        k = ready.pop()
        done += 1
        for user in users.get(k, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    if done == len(instructions):
        return None
    stuck = next(inst for k, inst in enumerate(instructions) if waiting[k] > 0)
    return Problem.of(stuck, f"%{stuck.name} reads its own result (through its operands): instructions of "
                               f"%{computation.name} form a loop")


def _values_problem(inst: Instruction, computation: Computation, position: dict[str, int],
                    devices: int | None) -> Problem | None:
    """A number the plan reads that is not one: a while's trip count, a get-tuple-element's index,
    a collective's groups, pairs and channel."""
    attributes = inst.attribute_text
    if attributes.strip() and not attributes.lstrip().startswith(","):
        return Problem.of(inst, f"text after the operands of %{inst.name} that is no attribute: "
                                  f"{attributes.strip()[:40]!r}")
    for key, written, form in _LISTS:
        if written in attributes and (value := inst.attribute(key)) is not None and form.fullmatch(value) is None:
            return Problem.of(inst, f"{key}={value[:40]} of %{inst.name} is not a list of numbers")
    if inst.opcode == "compare" and inst.attribute("direction") not in _DIRECTIONS:
        return Problem.of(inst, f"the compare %{inst.name} has no direction of {', '.join(sorted(_DIRECTIONS))}")
    if inst.opcode == "while" and "known_trip_count" in inst.body:
        return _trip_count_problem(inst)
    if inst.opcode == "get-tuple-element":
        index = inst.tuple_index
        source = computation.instructions[position[inst.operands[0]]] if len(inst.operands) == 1 else None
        if index is None or source is None or not source.shape.is_tuple or index >= len(source.shape.elements):
            return Problem.of(inst, f"%{inst.name} takes an element that its operand's tuple does not have")
    if inst.opcode.removesuffix("-start") in COLLECTIVE_NAMES:
        return _collective_problem(inst, devices)
    return None


def _trip_count_problem(inst: Instruction) -> Problem | None:
    """A while's ``known_trip_count`` that is not a positive count (its backend config none of JSON)."""
    config = inst.backend_config
    if config is None:
        return None
    if not isinstance(config, dict):
        return Problem.of(inst, f"the backend_config of the while loop %{inst.name} is no JSON object (or one "
                                  "nested deeper than Python reads)")
    count = config.get("known_trip_count")
    if count is None:
        return None
    written = count.get("n") if isinstance(count, dict) else count
    if inst.known_trip_count is None:
        return Problem.of(inst, f"the while loop %{inst.name} gives known_trip_count {str(written)[:40]!r}, "
                                  "which is not a count")
    if inst.known_trip_count < 1:
        return Problem.of(inst, f"the while loop %{inst.name} runs {inst.known_trip_count} times (known_trip_count): "
                                  "XLA removes a loop that never runs")
    return None


def _collective_problem(inst: Instruction, devices: int | None) -> Problem | None:
    """A collective's channel that is no number, its groups or pairs unreadable or past the module's ``devices``."""
    if "channel_id=" in inst.body and inst.channel_id is None:
        return Problem.of(inst, f"the channel_id of %{inst.name} is not a number")
    try:
        if inst.source_target_pairs is not None:
            ids = [i for pair in replica_groups.decode_pairs(inst.source_target_pairs) for i in pair]
        elif inst.replica_groups is not None:
            ids = [i for group in replica_groups.decode(inst.replica_groups, devices) for i in group]
        else:
            return None
    except replica_groups.ReplicaGroupsError as exc:
        return Problem.of(inst, f"the devices of %{inst.name}: {exc}")
    if devices is not None and ids and max(ids) >= devices:
        return Problem.of(inst, f"%{inst.name} names device {max(ids)}, and the module runs on {devices}")
    return None


def _stack_frame_id_problem(module: HloModule, text: str) -> Problem | None:
    """A ``stack_frame_id`` that is no row of the module's StackFrames table."""
    frames = len(module.stack_frames.frames)
    for written in set(_STACK_FRAME_ID.findall(text)):  # a module repeats a few hundred ids
        number = integer(written)
        if number is None or not 0 <= number <= frames:
            found = _STACK_FRAME_ID.search(text, text.find(f"stack_frame_id={written}"))
            assert found is not None
            return Problem(_line_of(text, found.start()), f"stack_frame_id={written[:20]} is no row of the "
                                                          f"StackFrames table ({frames} rows)")
    return None


# --------------------------------------------------------------------------- the call graph


def _calls(module: HloModule) -> Iterator[tuple[Instruction, str, str]]:
    """``(instruction, role, callee)`` of every call of the module (from :attr:`HloModule.callers`,
    which the plan reads after)."""
    for callee, calls in module.callers.items():
        for inst, role in calls:
            yield inst, role, callee


def _call_problem(module: HloModule) -> Problem | None:
    """A callee missing or missing from an instruction that needs it, a computation that calls
    itself, calls nested too deep or expanding to too much."""
    callees: dict[str, list[tuple[str, Instruction]]] = {name: [] for name in module.computations}
    roles: dict[str, set[str]] = {}
    for inst, role, callee in _calls(module):
        if callee not in module.computations:
            return Problem.of(inst, f"%{inst.name} calls %{callee[:60]} (as its {role}), and no computation has "
                                      "that name")
        callees[inst.computation].append((callee, inst))
        roles.setdefault(inst.name, set()).add(role)
    for inst in module.instructions():
        found = _missing_role(inst, roles.get(inst.name, set()))
        if found is not None:
            return found
    order, cycle = _sorted_calls(module, callees)
    if cycle is not None:
        return cycle
    return _expansion_problem(module, callees, order)


def _missing_role(inst: Instruction, roles: set[str]) -> Problem | None:
    missing = [role for role in _NEEDS.get(inst.opcode, ()) if role not in roles]
    one_of = _ONE_OF.get(inst.opcode)
    if one_of is not None and not roles & set(one_of):
        missing.append(" or ".join(one_of))
    if missing:
        return Problem.of(inst, f"the {inst.opcode} %{inst.name} has no {missing[0]} computation")
    return None


def _sorted_calls(module: HloModule, callees: dict[str, list[tuple[str, Instruction]]]
                  ) -> tuple[list[str], Problem | None]:
    """The computations, each before every computation it calls (depth-first, with a stack); or the
    problem of a computation that calls itself."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    order: list[str] = []
    for start in module.computations:
        if start in state:
            continue
        stack = [(start, 0)]
        state[start] = 1
        while stack:
            name, next_call = stack[-1]
            calls = callees[name]
            if next_call == len(calls):
                stack.pop()
                state[name] = 2
                order.append(name)
                continue
            stack[-1] = (name, next_call + 1)
            callee, inst = calls[next_call]
            if state.get(callee) == 1:
                path = [n for n, _ in stack[[n for n, _ in stack].index(callee):]] + [callee]
                through = " -> ".join(f"%{n}" for n in path[:6]) + (" -> ..." if len(path) > 6 else "")
                return [], Problem.of(inst, f"%{callee} calls itself ({through}, through %{inst.name}): "
                                              "HLO's calls never loop")
            if callee not in state:
                state[callee] = 1
                stack.append((callee, 0))
    order.reverse()
    return order, None


def _expansion_problem(module: HloModule, callees: dict[str, list[tuple[str, Instruction]]],
                       order: list[str]) -> Problem | None:
    """Calls nested deeper than :data:`MAX_CALL_DEPTH` from the entry, or expanding to more than
    :data:`EXPANSION_PER_INSTRUCTION` times the module's instructions, or :data:`MAX_EXPANSION`
    (counted in order, callers first, each count capped)."""
    entry = module.entry_name
    if entry is None:
        return Problem(None, "holds no entry computation")
    limit = min(MAX_EXPANSION, EXPANSION_PER_INSTRUCTION * module.instruction_count + 10_000)
    paths = {entry: 1}
    depth = {entry: 0}
    expanded = 0
    for name in order:
        count = paths.get(name)
        if count is None:
            continue
        expanded += count * (len(module.computations[name].instructions) + 1)
        if expanded > limit:
            return Problem(module.computations[name].line, f"the calls expand to more than {limit:,} instructions "
                           f"({EXPANSION_PER_INSTRUCTION} times the module's own, and 10,000): %{name} is reached "
                           f"along {count:,} call paths from the entry (XLA calls each computation it compiles from "
                           "one place)")
        for callee, inst in callees[name]:
            paths[callee] = min(paths.get(callee, 0) + count, limit + 1)
            depth[callee] = max(depth.get(callee, 0), depth[name] + 1)
            if depth[callee] > MAX_CALL_DEPTH:
                return Problem.of(inst, f"calls nest more than {MAX_CALL_DEPTH} deep from the entry (%{callee}, "
                                          f"called by %{inst.name})")
    return None
