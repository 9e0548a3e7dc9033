"""An independent reading of compiled module text (CPU or TPU), for the target tests.

Where each all-reduce sits is recounted here from the text (which computations a while loop
runs), never taken from shardscope's own parser; so are the entry parameters' padded sizes.
"""

from __future__ import annotations

import math
import re

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"\b(?:body|condition|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_WHILE_BODY = re.compile(r"\bwhile\(.*\bbody=%?([\w.\-]+)")
_ALL_REDUCE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+all-reduce(?:-start)?\(")


def _computations(text: str) -> tuple[dict[str, list[str]], str]:
    """Each computation's instruction lines, by name, and the entry computation's name."""
    found: dict[str, list[str]] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            match = _HEADER.match(line)
            if match and not line.startswith(" "):
                current = match.group(1)
                found[current] = []
                entry = current if line.startswith("ENTRY") else entry
        elif line.startswith("}"):
            current = None
        else:
            found[current].append(line)
    return found, entry


def all_reduces(text: str) -> list[tuple[str, int]]:
    """``(shape, loop depth)`` of every all-reduce: depth is how many while bodies run it."""
    return collectives(text, _ALL_REDUCE)


def all_gather_depths(text: str) -> set[int]:
    """The loop depths the module's all-gathers run at (an async one's start, fusions included)."""
    return {depth for _, depth in collectives(text, _ALL_GATHER)}


_ALL_GATHER = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+all-gather(?:-start)?\(")


def _loop_depths(computations: dict[str, list[str]], entry: str) -> dict[str, int]:
    """Each computation the entry reaches (through while bodies, fusions and calls) and the
    number of while loops around it (its deepest reach)."""
    depth_of: dict[str, int] = {}

    def visit(name: str, depth: int) -> None:
        if depth_of.get(name, -1) >= depth or name not in computations:
            return
        depth_of[name] = depth
        for line in computations[name]:
            bodies = set(_WHILE_BODY.findall(line))
            for callee in _CALLS.findall(line):
                visit(callee, depth + (callee in bodies or "condition=%" + callee in line))

    visit(entry, 0)
    return depth_of


def collectives(text: str, pattern: re.Pattern) -> list[tuple[str, int]]:
    """``(shape, loop depth)`` of every instruction line ``pattern`` matches, in any computation
    the entry reaches (through while bodies, fusions and calls)."""
    computations, entry = _computations(text)
    depth_of = _loop_depths(computations, entry)
    return [(match.group(1), depth_of[name]) for name, lines in computations.items() if name in depth_of
            for match in map(pattern.match, lines) if match]


def padded_bytes(shape: str) -> int:
    """Bytes of one array as the TPU lays it out: ``f32[4,16,16]{2,1,0:T(8,128)}`` is 4*16*128*4.

    The layout lists the dimensions from the most minor; the tile covers the most minor ones
    (its last size the most minor): each is rounded up to the tile's size along it
    (``f32[16,5]{0,1:T(8,128)}``: 16 is the minor dimension, 128 x 8).
    """
    dtype, dims, order, tile = re.match(r"(\w+)\[([\d,]*)\]\{([\d,]*)(?::T\(([\d,]+)\))?", shape).groups()
    sizes = [int(d) for d in dims.split(",") if d]
    minor_first = [int(d) for d in order.split(",") if d] or list(reversed(range(len(sizes))))
    tiles = [int(t) for t in tile.split(",")] if tile else []
    for dim, t in zip(minor_first, reversed(tiles)):
        sizes[dim] = -(-sizes[dim] // t) * t
    return math.prod(sizes) * {"f32": 4, "bf16": 2, "s32": 4}[dtype]


def entry_parameters(text: str) -> list[str]:
    """The entry computation's parameter shapes, from the module header's layout."""
    layout = re.search(r"entry_computation_layout=\{\((.*?)\)->", text).group(1)
    return re.findall(r"\w+\[[\d,]*\]\{[^}]*\}", layout)


_LOOP_COLLECTIVE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+(all-reduce|reduce-scatter|all-gather)(?:-start)?"
                              r"\(([^)]*)\)")
_DEFINITION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\S+?(?:\{[^}]*\})?)\s+([\w\-]+)\(")
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f64": 8, "s8": 1, "u8": 1, "pred": 1, "s64": 8}


def loop_collectives(text: str) -> list[tuple[str, str, int, tuple[tuple[str, int], ...]]]:
    """``(name, kind, loop depth, values)`` of every all-reduce, reduce-scatter and all-gather the
    module runs inside a while body (an async one by its start; the TPU's async collective fusion,
    printed in three fusions with one channel, once). ``values`` are ``(dtype, elements)`` of each
    value it carries: each operand, or each part of a concatenation it sums at once (XLA:GPU's
    flat form: one operand made by a fusion whose root concatenates the values)."""
    computations, entry = _computations(text)
    depth_of = _loop_depths(computations, entry)
    found, channels = [], set()
    for name, lines in computations.items():
        if depth_of.get(name, 0) == 0:
            continue
        shapes = {m.group(1): (m.group(2), m.group(3), m.string) for m in map(_DEFINITION.match, lines) if m}
        for line in lines:
            match = _LOOP_COLLECTIVE.match(line)
            if not match:
                continue
            channel = re.search(r"channel_id=(\d+)", line)
            if "async_collective_fusion_config" in line and channel:
                if (match.group(3), channel.group(1)) in channels:
                    continue
                channels.add((match.group(3), channel.group(1)))
            listed = re.sub(r"/\*.*?\*/", "", match.group(4))  # ``/*index=5*/`` marks
            operands = [o.strip().lstrip("%") for o in listed.split(",") if o.strip()]
            values = [v for o in operands for v in _values(o, shapes, computations)]
            found.append((match.group(1), match.group(3), depth_of[name], tuple(values)))
    return found


def _values(operand: str, shapes: dict, computations: dict) -> list[tuple[str, int]]:
    shape, opcode, line = shapes.get(operand, ("", "", ""))
    if opcode == "fusion":
        callee = re.search(r"calls=%?([\w.\-]+)", line)
        body = computations.get(callee.group(1), []) if callee else []
        root = next((l for l in body if l.lstrip().startswith("ROOT")), "")
        if " concatenate(" in root:  # the GPU's flat form: the fusion's parameters are the values
            inner = {m.group(1): m.group(2) for m in map(_DEFINITION.match, body) if m}
            parts = re.search(r"concatenate\(([^)]*)\)", root).group(1).split(",")
            return [_array(inner.get(p.strip().lstrip("%"), "")) for p in parts]
    return [_array(shape)]


def _array(shape: str) -> tuple[str, int]:
    found = re.match(r"(\w+)\[([\d,]*)\]", shape)
    if not found:
        return ("?", 0)
    return found.group(1), math.prod(int(d) for d in found.group(2).split(",") if d)


_LISTED_GROUPS = re.compile(r"replica_groups=\{\{([\d,]*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[[\d,]*?(\d+)\]<=")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\] \{([^}]*)\}")


def replica_group_size(instruction: str) -> int:
    """The devices in each replica group of a collective's instruction line, in the three forms
    XLA prints: listed (``{{0,2,4,6},{1,3,5,7}}``: 4), iota (``[2,4]<=[4,2]T(1,0)``: 2 groups of
    4) or the mesh form of newer XLA (``mesh['data'=4,'model'=2] {'data'}``: the listed axes'
    sizes multiplied, 4)."""
    mesh = _MESH_GROUPS.search(instruction)
    if mesh:
        sizes = {name: int(size) for name, size in re.findall(r"'(\w+)'=(\d+)", mesh.group(1))}
        return math.prod(sizes[name] for name in re.findall(r"'(\w+)'", mesh.group(2)))
    iota = _IOTA_GROUPS.search(instruction)
    if iota:
        return int(iota.group(1))
    listed = _LISTED_GROUPS.search(instruction)
    assert listed is not None, f"no replica groups read in {instruction[:200]}"
    return len(listed.group(1).split(","))
