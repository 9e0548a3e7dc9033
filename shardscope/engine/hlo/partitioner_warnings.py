"""The partitioner's warnings of a compile, read in the program's terms.

XLA's SPMD partitioner says when it cannot change a value's layout efficiently ("Involuntary
full rematerialization": it gathers the whole tensor onto every device and slices it again). It
prints both shardings in HLO's notation, which differs by JAX version:

- ``{devices=[2,1,4]<=[4,2]T(1,0)}`` (jax 0.10): a tile count per dimension over the devices
  ``iota([4,2]).transpose(1,0)``, ``last_tile_dim_replicate`` for a replicated rest;
- ``{mesh['x'=4,'y'=2], [{'y'}, {}, {'x'}]}`` (jax 0.12): the mesh axes of each dimension.

:func:`read_warning` turns either into a ``PartitionSpec`` over the program's mesh
(``P('y', None, 'x')``), with the tensor's global shape and size.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from math import prod
from typing import Sequence

import numpy as np

from shardscope.engine.hlo.replica_groups import MeshShape
from shardscope.engine.hlo.text import HloModule, Instruction
from shardscope.collective_kinds import ALL_GATHER, ALL_TO_ALL, COLLECTIVE_PERMUTE

INVOLUNTARY_REMAT = "involuntary-rematerialization"
PARTITIONER_WARNING = "partitioner-warning"

_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_INSTRUCTION = re.compile(r"%(?P<name>[\w.\-]+) = (?P<dtype>\w+)\[(?P<dims>[\d,]*)\]")
_OP_NAME = re.compile(r'op_name="(?P<op>[^"]*)"')
_V2 = re.compile(r"devices=\[(?P<tiles>[\d,]+)\]<=\[(?P<reshape>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?")
_V1 = re.compile(r"devices=\[(?P<tiles>[\d,]+)\](?P<ids>[\d,]+)")


@dataclass(frozen=True)
class FixCheck:
    """The program compiled again with the fix: the value given its target layout as it comes in."""

    warnings_after: int
    """Involuntary rematerializations the partitioner still reports (0: the fix works)."""
    bytes_before: int
    bytes_after: int
    """Bytes every compiled collective moves per call, per device, before and after the fix."""
    through: tuple[str, ...] = ()
    """For a value computed inside the program: the layouts it is resharded through on the way
    to its target (``P('y', 'x', None)``), each step one all-to-all; empty for an input's fix."""
    input: str = ""
    """The program input given the target layout instead (when no reshard in steps worked)."""
    kinds_after: tuple[tuple[str, int], ...] = ()
    """The compiled collectives of the fixed program, by kind: ``(('all-to-all', 2),)``."""

    @property
    def verified(self) -> bool:
        """No rematerialization left and no more bytes moved."""
        return self.warnings_after == 0 and self.bytes_after <= self.bytes_before


@dataclass(frozen=True)
class PartitionerWarning:
    """One warning the partitioner printed while the module compiled.

    ``kind`` is :data:`INVOLUNTARY_REMAT` or :data:`PARTITIONER_WARNING` (any other line).
    For a rematerialization: the instruction it could not reshard (``instruction``, the value's
    ``op_name``), the two layouts in mesh terms (``source_layout``, ``target``: ``P('y', None, 'x')``;
    HLO's own text when the mesh does not explain it), the global shape and bytes of the tensor,
    and ``message``: the whole line as XLA printed it.
    """

    kind: str
    message: str
    instruction: str = ""
    op_name: str = ""
    source_layout: str = ""
    target: str = ""
    shape: tuple[int, ...] = ()
    dtype: str = ""
    bytes: int = 0
    shard_bytes: int = 0
    collectives: tuple[str, ...] = ()
    """The compiled collectives that implement the fallback (the all-gathers of the tensor)."""
    source: str = ""
    """The user's line that needed the other layout (the first of those collectives' lines)."""
    devices: int = 0
    target_axes: tuple[tuple[str, ...], ...] | None = None
    """``target`` as mesh axes per dimension (None when the mesh does not explain it)."""
    fix: "FixCheck | None" = None
    """The fix compiled: None when it was not tried."""
    local_shape: tuple[int, ...] = ()
    """Each device's shard of the tensor, in the layout it comes in."""
    source_axes: tuple[tuple[str, ...], ...] | None = None
    """``source_layout`` as mesh axes per dimension (None when the mesh does not explain it)."""
    value: str = ""
    """A value computed inside the program, as the user wrote it: the variable its line assigns
    (``h``), else the expression (``h + resid``); empty for an input (named by ``op_name``)."""
    value_source: str = ""
    """The user's line that computes that value (``block.py:15 (block)``)."""
    value_line: tuple[str, int] | None = None
    """That line as ``(file, line)``, for a rewrite that reshards the value there."""

    @property
    def is_intermediate(self) -> bool:
        """True for a value computed inside the program: its ``op_name`` is JAX's name of an
        operation (``jit(f)/tanh``), not an argument's path (``a``, ``params['W']``)."""
        return self.op_name.startswith(("jit(", "pjit(")) or ")/" in self.op_name

    @property
    def shown_value(self) -> str:
        """The value as a finding names it: the user's name of an intermediate, an input's path."""
        return self.value or self.op_name or f"%{self.instruction}"

    @property
    def title(self) -> str:
        """``a: P('y', None, 'x') -> P(None, ('x', 'y'), None)``, or the message."""
        if self.kind != INVOLUNTARY_REMAT:
            return self.message
        return f"{self.shown_value}: {self.source_layout_text()}"

    def source_layout_text(self) -> str:
        """``P('y', None, 'x') -> P(None, ('x', 'y'), None)``."""
        return f"{self.source_layout} -> {self.target}"

    @property
    def moved_bytes(self) -> int:
        """Bytes each device receives to hold the whole tensor: all of it but its own shard."""
        return self.bytes - self.shard_bytes


def read_warning(message: str, mesh: MeshShape | None) -> PartitionerWarning:
    """The :class:`PartitionerWarning` of one partitioner log message (without its log prefix)."""
    if "Involuntary full rematerialization" not in message:
        return PartitionerWarning(PARTITIONER_WARNING, message)
    shardings = _braced_after(message, "from sharding ")
    target = _braced_after(message, " to ")
    instruction = _INSTRUCTION.search(message, message.find("HLO operation"))
    if shardings is None or target is None or instruction is None:
        return PartitionerWarning(INVOLUNTARY_REMAT, message)
    op = _OP_NAME.search(message, instruction.end())
    local = tuple(int(d) for d in instruction.group("dims").split(",") if d)
    tiles = _tile_counts(shardings, len(local), mesh)
    shape = tuple(n * t for n, t in zip(local, tiles))
    width = _DTYPE_BYTES.get(instruction.group("dtype"), 0)
    return PartitionerWarning(
        INVOLUNTARY_REMAT, message, instruction.group("name"), op.group("op") if op else "",
        source_layout=spec_text(shardings, len(local), mesh), target=spec_text(target, len(local), mesh),
        target_axes=_spec(target, len(local), mesh), source_axes=_spec(shardings, len(local), mesh),
        shape=shape, dtype=instruction.group("dtype"), bytes=prod(shape) * width, shard_bytes=prod(local) * width,
        local_shape=local)


def spec_text(sharding: str, rank: int, mesh: MeshShape | None) -> str:
    """``P('y', None, 'x')`` of an HLO sharding over ``mesh`` (HLO's text when it does not fit)."""
    spec = _spec(sharding, rank, mesh)
    if spec is None:
        return sharding
    return "P(" + ", ".join(_entry(axes) for axes in spec) + ")"


def _spec(sharding: str, rank: int, mesh: MeshShape | None) -> tuple[tuple[str, ...], ...] | None:
    """The mesh axes of each dimension of an HLO sharding, in either notation."""
    if "replicated" in sharding and "devices" not in sharding and "mesh[" not in sharding:
        return ((),) * rank
    spec = _mesh_notation(sharding) if "mesh[" in sharding else _tiled_spec(sharding, rank, mesh)
    return None if spec is None else tuple(spec)


def _entry(axes: tuple[str, ...]) -> str:
    if not axes:
        return "None"
    if len(axes) == 1:
        return repr(axes[0])
    return "(" + ", ".join(repr(a) for a in axes) + ")"


def _mesh_notation(sharding: str) -> list[tuple[str, ...]] | None:
    """``{mesh['x'=4,'y'=2], [{'y'}, {}, {'x'}]}`` -> ``[('y',), (), ('x',)]``."""
    start = sharding.find("[{")
    if start < 0:
        start = sharding.find("], [")
        if start < 0:
            return None
        start += 3
    end = sharding.find("}]", start)
    if end < 0:
        return None
    dims = re.findall(r"\{([^{}]*)\}", sharding[start:end + 2])
    return [tuple(re.findall(r"'([^']+)'", dim)) for dim in dims]


def _tiled_spec(sharding: str, rank: int, mesh: MeshShape | None) -> list[tuple[str, ...]] | None:
    """The mesh axes of each dimension of a tiled sharding: the ``PartitionSpec`` whose device
    layout over ``mesh`` is the sharding's, tried over every way of giving axes to dimensions."""
    layout = _tile_layout(sharding)
    if layout is None or mesh is None:
        return None
    tiles, devices = layout
    counts = tiles[:rank]
    ids = np.arange(prod(mesh.sizes)).reshape(mesh.sizes)
    if devices.size != ids.size:
        return None
    wanted = _tile_sets(devices, rank)
    axes = range(len(mesh.names))
    for assignment in itertools.product(range(rank + 1), repeat=len(axes)):  # rank: not used
        groups = [[a for a in axes if assignment[a] == d] for d in range(rank)]
        if any(prod(mesh.sizes[a] for a in g) != counts[d] for d, g in enumerate(groups)):
            continue
        for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
            order = [a for g in orders for a in g] + [a for a in axes if assignment[a] == rank]
            laid = np.transpose(ids, order).reshape(tuple(counts) + (-1,))
            if _tile_sets(laid, rank) == wanted:
                return [tuple(mesh.names[a] for a in g) for g in orders]
    return None


def _tile_sets(devices: np.ndarray, rank: int) -> dict[tuple[int, ...], frozenset[int]]:
    """Each tile's index -> the devices holding it (a replicated rest in the last dimension)."""
    shaped = devices.reshape(devices.shape[:rank] + (-1,))
    return {index: frozenset(int(d) for d in shaped[index]) for index in np.ndindex(*shaped.shape[:rank])}


def _tile_layout(sharding: str) -> tuple[tuple[int, ...], np.ndarray] | None:
    """The tile counts and the device array of ``{devices=[...]...}`` (iota or explicit ids)."""
    v2 = _V2.search(sharding)
    if v2 is not None:
        tiles = _ints(v2.group("tiles"))
        reshape = _ints(v2.group("reshape"))
        perm = _ints(v2.group("perm")) if v2.group("perm") else tuple(range(len(reshape)))
        devices = np.transpose(np.arange(prod(reshape)).reshape(reshape), perm).reshape(tiles)
        return tiles, devices
    v1 = _V1.search(sharding)
    if v1 is not None:
        tiles = _ints(v1.group("tiles"))
        return tiles, np.array(_ints(v1.group("ids"))).reshape(tiles)
    return None


def _tile_counts(sharding: str, rank: int, mesh: MeshShape | None) -> tuple[int, ...]:
    """How many tiles each dimension is cut into (1 each when the sharding is not read)."""
    layout = _tile_layout(sharding)
    if layout is not None:
        return layout[0][:rank]
    spec = _mesh_notation(sharding) if "mesh[" in sharding else None
    sizes = dict(re.findall(r"'(\w+)'=(\d+)", sharding))
    if spec is None:
        return (1,) * rank
    return tuple(prod(int(sizes.get(a, 1)) for a in axes) for axes in spec[:rank]) + (1,) * (rank - len(spec))


def _braced_after(text: str, marker: str) -> str | None:
    """The balanced ``{...}`` that starts right after ``marker``."""
    start = text.find(marker)
    if start < 0:
        return None
    start += len(marker)
    if not text.startswith("{", start):
        return None
    depth = 0
    for k in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return text[start:k + 1]
    return None


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t)


def implementing(warning: PartitionerWarning, module: HloModule | None,
                 collectives: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """The compiled collectives among ``collectives`` that read ``warning``'s instruction,
    directly or through copies, reshapes and other collectives (the gather the partitioner fell
    back to), and the user's line of the first instruction on the way that has one (the
    operation that needed the other layout), ``""`` when none has."""
    if module is None or not warning.instruction:
        return (), ""
    names = set(collectives)
    users: dict[str, list[str]] = {}
    for computation in module.computations.values():
        for instruction in computation.instructions:
            for operand in instruction.operands:
                users.setdefault(operand, []).append(instruction.name)
    # the warning names the instruction before partitioning: its name may have changed since
    # (GSPMD's %param is the module's %param.1), the value's op_name has not
    starts = [i.name for i in value_instructions(warning, module)] or [warning.instruction]
    found: list[str] = []
    line = ""
    frontier, seen = list(starts), set(starts)
    while frontier:
        current = frontier.pop(0)
        for user in users.get(current, ()):
            read = module.instruction(user)
            if user in seen or read is None:
                continue
            seen.add(user)
            location = module.source(read, users=True)
            if not line and location is not None:
                line = location.text()
            if read.opcode in _PASSING:
                if user in names:
                    found.append(user)
                frontier.append(user)
    return tuple(found), line


def value_instructions(warning: PartitionerWarning, module: HloModule) -> list[Instruction]:
    """The compiled instructions that hold the value the partitioner could not reshard: the
    parameter of that name (an input; GSPMD's %param is the module's %param.1), else those made
    by the same JAX operation (its ``op_name``) with the shard's shape (a value computed inside
    the program, fused with its neighbours: ``%copy_tanh_fusion``)."""
    if not warning.op_name:
        return []
    named = [i for c in module.computations.values() for i in c.instructions if i.metadata.op_name == warning.op_name]
    parameters = [i for i in named if i.opcode == "parameter"]
    if parameters or not warning.is_intermediate:
        return parameters
    return [i for i in named if len(i.shape.arrays) == 1 and i.shape.arrays[0].dims == warning.local_shape]


_PASSING = frozenset({"copy", "fusion", "bitcast", "reshape", "transpose", ALL_GATHER, ALL_TO_ALL, COLLECTIVE_PERMUTE,
                      "dynamic-slice"})
"""What the gather of a rematerialization goes through on its way to the operation that reads it."""
