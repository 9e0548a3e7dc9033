"""Which devices a compiled collective groups, and which mesh axes those groups are.

XLA prints ``replica_groups`` in three forms (``xla/hlo/ir/replica_group.h``):

- explicit: ``{{0,4},{1,5},{2,6},{3,7}}`` (``{}``: every device in one group);
- iota: ``[4,2]<=[2,4]T(1,0)``: ``iota(8).reshape(2,4).transpose(1,0).reshape(4,2)``, one group a row;
- mesh axes: ``mesh['axis_0'=4,'axis_1'=2] {'axis_0'}``, with ``device_ids=(...)`` when the
  mesh's devices are not in iota order and ``'a':(2)2`` for a sub-axis; the axis names are the
  program's (``mesh['data'=4,...]``) or synthetic (``axis_N``, sometimes with size-1 axes).

Ids are positions in the program mesh's ``mesh.devices.flat`` (the executable's device
assignment), not ``device.id``. :func:`mesh_axes_of` names the groups after the program's own
mesh by comparing them with the groups of each subset of its axes: users read ``data``, not
``axis_0``.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from math import prod
from typing import Sequence

import numpy as np

from shardscope.engine.hlo.syntax import integer

Groups = tuple[tuple[int, ...], ...]
"""Device groups: each a tuple of positions in the mesh, in the collective's order."""


@dataclass(frozen=True)
class MeshShape:
    """A program's mesh as the decoder needs it: axis names and sizes, major to minor."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, mesh: object) -> "MeshShape":
        """From a ``jax.sharding.Mesh`` (or anything with ``axis_names`` and ``shape``)."""
        names = tuple(mesh.axis_names)  # type: ignore[attr-defined]
        shape = mesh.shape  # type: ignore[attr-defined]
        return cls(names, tuple(int(shape[n]) for n in names))

    @property
    def size(self) -> int:
        """How many devices it holds."""
        return prod(self.sizes)


class ReplicaGroupsError(ValueError):
    """The text is in none of the forms this decoder reads, or not one XLA prints (a size that
    is no number, a permutation that is none, a shape its devices do not fill)."""


MAX_DEVICES = 1 << 20
"""The most devices a ``replica_groups`` text may group (1,048,576): a decoded iota or mesh is an
array of that many ids, never one of the 3 billion a broken text could ask for."""


def decode(text: str, num_devices: int | None = None) -> Groups:
    """The device groups of a ``replica_groups`` text, each in the collective's order.

    ``num_devices`` is needed for ``{}`` (one group of every device); without it ``{}`` decodes
    to no group. Any text either decodes or raises :class:`ReplicaGroupsError` (never another
    error, nor an array of more than :data:`MAX_DEVICES` ids).
    """
    try:
        return _decode(text.strip(), num_devices)
    except ReplicaGroupsError:
        raise
    except (ValueError, IndexError, TypeError, OverflowError) as exc:  # numpy's reshape, transpose; a missing bracket
        raise ReplicaGroupsError(f"unreadable replica groups {text.strip()[:80]!r}: {exc}") from None


def _decode(text: str, num_devices: int | None) -> Groups:
    if text.startswith("mesh[") or text.startswith("maximal_mesh["):
        return _decode_mesh(text)
    if text.startswith("["):
        return _decode_iota(text)
    if text.startswith("{"):
        if not text.endswith("}"):
            raise ReplicaGroupsError(f"unclosed replica groups: {text[:80]!r}")
        groups = tuple(_ids(group) for group in re.findall(r"\{([^{}]*+)\}", text[1:-1]))
        if not groups and num_devices:
            return (tuple(range(min(num_devices, MAX_DEVICES))),)
        return groups
    raise ReplicaGroupsError(f"unknown replica_groups form: {text[:80]!r}")


def decode_pairs(text: str) -> tuple[tuple[int, int], ...]:
    """A collective-permute's ``source_target_pairs={{0,1},{1,2}}`` as ``((0, 1), (1, 2))``
    (:class:`ReplicaGroupsError` for a device that is not a number)."""
    pairs = re.findall(r"\{\s*+(\d++)\s*+,\s*+(\d++)\s*+\}", text)
    return tuple(_ids(f"{a},{b}") for a, b in pairs)  # type: ignore[misc]  # two ids each


def _ids(text: str) -> tuple[int, ...]:
    """``0,4, 8`` as device ids: each a number of at most 19 digits, none negative."""
    ids = tuple(integer(part) for part in text.split(",") if part.strip())
    if any(i is None or i < 0 for i in ids):
        raise ReplicaGroupsError(f"a device id that is not one: {text[:80]!r}")
    return ids  # type: ignore[return-value]  # None refused above


# --------------------------------------------------------------------------- the three forms


_IOTA = re.compile(r"^\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?$")


def _decode_iota(text: str) -> Groups:
    match = _IOTA.match(text.replace(" ", ""))
    if match is None:
        raise ReplicaGroupsError(f"unknown iota replica groups: {text[:80]!r}")
    shape = _ints(match.group(1))
    ids = _iota(_ints(match.group(2)), _ints(match.group(3)) if match.group(3) else None)
    if not shape or prod(shape) != ids.size:
        raise ReplicaGroupsError(f"iota replica groups whose shape {list(shape)} its {ids.size} devices do not fill")
    return tuple(tuple(int(i) for i in row) for row in ids.reshape(shape[0], -1))


_MESH_AXIS = re.compile(r"\s*+'?([^'=,\[\]]+?)'?\s*+=\s*+(\d++)\s*+")
_AXIS_REF = re.compile(r"'?([^':,{}]++)'?(?::\((\d++)\)(\d++))?")


def _decode_mesh(text: str) -> Groups:
    if text.startswith("maximal_mesh["):
        found = re.search(r"device_id=(\d+)", text)
        if found is None:
            raise ReplicaGroupsError(f"maximal mesh without a device_id: {text[:80]!r}")
        device = int(found.group(1))
        return ((device,),)
    close = text.index("]")
    axes = [_MESH_AXIS.fullmatch(part) for part in text[len("mesh[") : close].split(",")]
    if not all(axes):
        raise ReplicaGroupsError(f"unknown mesh axes: {text[:80]!r}")
    names = [axis.group(1).strip() for axis in axes if axis]
    sizes = list(_ints(",".join(axis.group(2) for axis in axes if axis)))
    rest = text[close + 1 :].strip()
    devices = np.arange(_devices(sizes))
    if rest.startswith(","):
        rest = rest[1:].strip()
    if rest.startswith("device_ids="):
        end = _closing_paren(rest, len("device_ids="))
        devices = _device_ids(rest[len("device_ids=") + 1 : end], prod(sizes))
        rest = rest[end + 1 :].strip()
    refs_text = rest[rest.index("{") + 1 : rest.rindex("}")] if "{" in rest else ""
    refs = [m for m in (_AXIS_REF.fullmatch(part.strip()) for part in refs_text.split(",") if part.strip()) if m]
    unknown = [m.group(1).strip() for m in refs if m.group(1).strip() not in names]
    if unknown:
        raise ReplicaGroupsError(f"replica groups over {unknown[0]!r}, which is not an axis of {text[:80]!r}")
    # every axis (and sub-axis) as its own dimension, then the grouped ones moved last, in the
    # order the text lists them (MeshAxesReplicaGroupList::flattened_replica_groups)
    dims, grouped = _split_axes(names, sizes, [(m.group(1).strip(), _sub(m)) for m in refs])
    array = devices.reshape(dims)
    order = [d for d in range(len(dims)) if d not in grouped] + grouped
    per_group = prod(dims[d] for d in grouped)
    return tuple(tuple(int(i) for i in row) for row in array.transpose(order).reshape(-1, per_group))


def _sub(match: re.Match) -> tuple[int, int] | None:
    if not match.group(2):
        return None
    pre, size = _ints(f"{match.group(2)},{match.group(3)}")
    if pre < 1 or size < 1:
        raise ReplicaGroupsError(f"a sub-axis of no devices: {match.group()[:80]!r}")
    return pre, size


def _split_axes(names: list[str], sizes: list[int], refs: list[tuple[str, tuple[int, int] | None]]) -> tuple[list[int], list[int]]:
    """The mesh's dimensions with each referenced sub-axis split out, and the grouped dimensions.

    A sub-axis ``'a':(pre)size`` is Shardy's: the axis reshaped major to minor as
    ``[pre, size, rest]``, the group over ``size`` (``pre`` is the product of the sizes to its
    left). Each axis is cut at every such boundary; a part is known by the product of the parts
    to its left (its prefix).
    """
    cuts: dict[int, set[int]] = {i: set() for i in range(len(names))}
    for name, sub in refs:
        if sub is not None:
            pre, size = sub
            cuts[names.index(name)] |= {pre, pre * size}
    dims: list[int] = []
    where: dict[tuple[int, int], int] = {}  # (axis, prefix) -> dimension
    for axis, size in enumerate(sizes):
        bounds = sorted({1, size} | {c for c in cuts[axis] if 1 < c < size})
        for low, high in zip(bounds, bounds[1:]) if len(bounds) > 1 else [(1, size)]:
            where[(axis, low)] = len(dims)
            dims.append(high // low)
    grouped = []
    for name, sub in refs:
        axis = names.index(name)
        low, high = (1, sizes[axis] + 1) if sub is None else (sub[0], sub[0] * sub[1])
        grouped += [where[(a, p)] for a, p in sorted(where) if a == axis and low <= p < high]
    return dims, grouped


def _device_ids(text: str, count: int) -> np.ndarray:
    """``device_ids=(...)``: an iota ``[4,2]T(1,0)`` (optionally ``[dims]<=[...]T(...)``) or a list."""
    text = text.strip()
    if text.startswith("["):
        match = re.match(r"^\[([\d,\s]++)\](?:<=\[([\d,\s]++)\])?(?:T\(([\d,\s]++)\))?$", text)
        if match is None:
            raise ReplicaGroupsError(f"unknown device_ids: {text[:80]!r}")
        reshape = _ints(match.group(2) or match.group(1))
        return _iota(reshape, _ints(match.group(3)) if match.group(3) else None).reshape(-1)
    ids = np.array(_ints(text))
    if ids.size != count:
        raise ReplicaGroupsError(f"device_ids lists {ids.size} devices, the mesh holds {count}")
    return ids


def _iota(reshape: tuple[int, ...], perm: tuple[int, ...] | None) -> np.ndarray:
    """``iota(prod(reshape)).reshape(reshape).transpose(perm)``, its size and permutation checked first."""
    if perm is not None and sorted(perm) != list(range(len(reshape))):
        raise ReplicaGroupsError(f"T{perm} is not a permutation of the {len(reshape)} dimensions {list(reshape)}")
    ids = np.arange(_devices(reshape)).reshape(reshape)
    return ids.transpose(perm) if perm else ids


def _devices(sizes: Sequence[int]) -> int:
    """How many devices axes of ``sizes`` hold (:class:`ReplicaGroupsError` past :data:`MAX_DEVICES`)."""
    count = prod(sizes)
    if any(size < 1 for size in sizes):
        raise ReplicaGroupsError(f"replica groups over an axis of no devices ({' x '.join(map(str, sizes))})")
    if count > MAX_DEVICES:
        raise ReplicaGroupsError(f"replica groups over {' x '.join(map(str, sizes))} devices: at most "
                                 f"{MAX_DEVICES:,} are read")
    return count


def _closing_paren(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ReplicaGroupsError(f"unclosed device_ids: {text[:80]!r}")


def _ints(text: str) -> tuple[int, ...]:
    numbers = tuple(integer(t) for t in text.split(",") if t.strip())
    if None in numbers:
        raise ReplicaGroupsError(f"a size that is not a number of at most 19 digits: {text[:80]!r}")
    return numbers  # type: ignore[return-value]  # None refused above


# --------------------------------------------------------------------------- naming the axes


def axis_groups(mesh: MeshShape, axes: Sequence[str]) -> Groups:
    """The groups a collective over ``axes`` (in that order) of ``mesh`` makes: positions in
    ``mesh.devices.flat``, each group in the order of the axes listed, major first."""
    ids = np.arange(mesh.size).reshape(mesh.sizes)
    grouped = [mesh.names.index(a) for a in axes]
    order = [d for d in range(len(mesh.names)) if d not in grouped] + grouped
    per_group = prod(mesh.sizes[d] for d in grouped)
    return tuple(tuple(int(i) for i in row) for row in ids.transpose(order).reshape(-1, per_group))


def mesh_axes_of(groups: Groups, mesh: MeshShape) -> tuple[str, ...] | None:
    """The program mesh's axes whose collective makes exactly ``groups`` (as sets of devices).

    The order is the one the groups list their members in when some order of the axes gives it
    exactly (an all-gather's concatenation order), else the mesh's order. Axes of size one
    change no group: they are left out. ``()`` for groups of one device each; None when no
    subset of the axes, nor of the axes with one split in parts (``data:(1)4``,
    :func:`_sub_axes_of`), makes these groups (a collective over another mesh).
    """
    if not groups or sum(len(g) for g in groups) != mesh.size:
        return None
    whole = _whole_axes_of(groups, mesh)
    return whole if whole is not None else _sub_axes_of(groups, mesh)


def _whole_axes_of(groups: Groups, mesh: MeshShape) -> tuple[str, ...] | None:
    """:func:`mesh_axes_of` over whole axes only."""
    wanted = frozenset(frozenset(g) for g in groups)
    candidates = [name for name, size in zip(mesh.names, mesh.sizes) if size > 1]
    for count in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, count):
            if frozenset(frozenset(g) for g in axis_groups(mesh, subset)) != wanted:
                continue
            for order in itertools.permutations(subset):
                if set(axis_groups(mesh, order)) == set(groups):
                    return order
            return subset
    return None


@functools.lru_cache(maxsize=256)
def _sub_axes_of(groups: Groups, mesh: MeshShape) -> tuple[str, ...] | None:
    """The axes, one of them a part of a program axis, whose collective makes ``groups``.

    A reshape that splits a sharded dimension (a batch ``[B]`` into ``[MICRO, B/MICRO]``) leaves
    each part of the axis sharding one dimension, and the partitioner's collectives then run
    over one part: groups of 4 among the 8 devices of ``data``, every second one. Such a part
    is named as Shardy names a sub-axis, ``data:(1)4``: the axis split into a major part of 1
    (``(1)``, the devices before it), then this part of 4; the rest of the axis is minor.
    """
    for k, (name, size) in enumerate(zip(mesh.names, mesh.sizes)):
        for before in _divisors(size):
            for part in _divisors(size // before):
                if part == 1 or part == size:
                    continue
                after = size // before // part
                sub = f"{name}:({before}){part}"
                names = (*mesh.names[:k], f"{name}:<", sub, f"{name}:>", *mesh.names[k + 1:])
                split = MeshShape(names, (*mesh.sizes[:k], before, part, after, *mesh.sizes[k + 1:]))
                found = _whole_axes_of(groups, split)
                if found is not None and sub in found and not any(a.endswith((":<", ":>")) for a in found):
                    return found
    return None


def whole_axes(axes: Sequence[str]) -> tuple[str, ...]:
    """The program's axes that ``axes`` span, a sub-axis as its whole axis (``data:(1)4`` ->
    ``data``): what code names, since ``shard_map``, ``psum`` and ``P(...)`` take whole axes."""
    return tuple(dict.fromkeys(a.split(":(", 1)[0] for a in axes))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def pair_axes_of(pairs: Sequence[tuple[int, int]], mesh: MeshShape) -> tuple[str, ...] | None:
    """The mesh axes a collective-permute moves data along: the axes on which some source and
    its target differ (None when a position is outside the mesh)."""
    if not pairs:
        return ()
    ends = np.array(pairs)
    if ends.min() < 0 or ends.max() >= mesh.size:
        return None
    sources, targets = (np.unravel_index(ends[:, k], mesh.sizes) for k in (0, 1))
    return tuple(name for name, a, b in zip(mesh.names, sources, targets) if np.any(a != b))
