"""Which jaxpr collectives each compiled collective comes from.

A ``shard_map`` program writes its collectives; the compiler keeps them (or merges several into
one combined instruction, or moves one out of a loop) and the partitioner adds its own. A jaxpr
collective pairs with a compiled one of its kind (a reduction may also compile to an
all-reduce) whose ``op_name`` ends with its primitive and whose source line is its own, inside
loops whose trip counts are among its own (the compiler removes loops, never adds one); among
several such, the one that fits the operand: its bytes (a manual shard_map's types are per
device), or inside a partial-auto shard_map (whose types are whole along the axes the
partitioner splits) its dimensions, each a multiple of the operand's. A combined instruction
takes one jaxpr collective per operand: the others carry the ``op_name`` of none, so they pair
by kind and that fit. A sum a TPU compiler moved out of a loop keeps its op_name on jax 0.12 and takes the
loop's on jax 0.10.2: then it pairs by kind and bytes with a jaxpr collective that ran in more
loops. A compiled collective that pairs with none was written by the partitioner, unless its
``op_name`` names a JAX collective. An operand's bytes are compared in the program's own type:
XLA:CPU sums a bf16 value in f32 (:mod:`~shardscope.engine.hlo.promotion`), twice the jaxpr's bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol, Sequence

from shardscope.engine.hlo.text import op_primitives
from shardscope.engine.pytree_paths import is_source_line
from shardscope.collective_kinds import ALL_REDUCE, OF_PRIMITIVE, REDUCE_SCATTER

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledOperand

PROGRAM, PARTITIONER = "program", "partitioner"

HLO_KIND = OF_PRIMITIVE
"""The HLO collective each JAX collective primitive compiles to (:mod:`~shardscope.collective_kinds`)."""

JAX_COLLECTIVE_PRIMITIVES = frozenset(HLO_KIND) | {"reshard"}
"""Names an ``op_name`` ends with when the program itself wrote the collective (``reshard`` too)."""


class JaxprCollective(Protocol):
    """What pairing needs of a jaxpr collective (:class:`shardscope.engine.jaxpr.dataflow.Collective` has it)."""

    @property
    def equation_id(self) -> str: ...

    @property
    def primitive(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def loop_trip_counts(self) -> tuple[int | None, ...]: ...

    @property
    def bytes_per_execution(self) -> int: ...

    @property
    def auto_axes(self) -> tuple[tuple[str, int], ...]: ...

    @property
    def operand_dims(self) -> tuple[tuple[int, ...], ...]: ...


@dataclass(frozen=True)
class JaxprCollectiveRef:
    """A jaxpr collective as pairing sees it (for a plan built from text alone, in tests)."""

    equation_id: str
    primitive: str
    source: str
    loop_trip_counts: tuple[int | None, ...]
    value: str = ""
    bytes_per_execution: int = 0
    auto_axes: tuple[tuple[str, int], ...] = ()
    operand_dims: tuple[tuple[int, ...], ...] = ()


def pair(built: Sequence["CompiledCollective"], refs: Sequence[JaxprCollective]
         ) -> tuple[list["CompiledCollective"], list[str]]:
    """``(each compiled collective with its equations and author, the jaxpr collectives that
    paired with none)``.

    The free jaxpr collectives are kept by identity in the program's order: a program of a
    thousand psums on one line has a thousand candidates for each instruction, and comparing
    them as values (or finding their place in a list) made pairing cubic in their number."""
    free: dict[int, JaxprCollective] = {id(r): r for r in refs}
    paired = []
    for c in built:
        chosen, placed = _chosen(c, free)
        for r in chosen:
            del free[id(r)]
        written = c.written_by or (PROGRAM if chosen else PARTITIONER)
        paired.append(dataclasses.replace(c, equations=tuple(r.equation_id for r in chosen), written_by=written,
                                          operand_equations=placed))
    return paired, [r.equation_id for r in free.values()]


def _chosen(c: "CompiledCollective", free: dict[int, JaxprCollective]
            ) -> tuple[list[JaxprCollective], tuple[str, ...]]:
    """The jaxpr collectives ``c`` carries: one whose op_name and line are its own (the first in
    the program's order that fits an operand, else the one whose bytes are nearest), then one per
    further operand of a combined instruction, by what it carries: a sum of the same kind that
    fits that operand (:func:`_fit`), in loops the instruction's are among (a combiner keeps one
    op_name of all it merged; a sum moved out of a loop keeps the loop's), nearest to the first
    in the program's order; with each operand's collective where the partitioner split it
    (:attr:`~shardscope.engine.hlo.plan.CompiledCollective.operand_equations`)."""
    operands = list(c.operands)
    first = _first((r for r in free.values() if _matches(c, r)), operands)
    moved = False
    if first is None:
        sizes = [op.written_bytes for op in operands]
        first = _first((r for r in free.values() if _moved_out_of_a_loop(c, r, sizes)), operands)
        moved = first is not None
    if first is None:
        return [], ()
    if not c.combined:
        return [first], _split_places(c, {0: first})
    places = {_place_of_first(first, operands): first}
    for rank in _FIT_RANKS:
        for k, op in enumerate(operands):
            if k in places:
                continue
            taken = places.values()
            r = next((r for r in free.values() if all(r is not t for t in taken) and _fit(r, op) == rank
                      and (_moved_out_of_a_loop(c, r, None) if moved else _carried(c, r))), None)
            if r is not None:
                places[k] = r
    chosen = [first, *(places[k] for k in sorted(places) if places[k] is not first)]
    if len(places) == len(operands) and all(_fit(r, operands[k]) is not None for k, r in places.items()):
        return chosen, _split_places(c, places)
    return _whole(c, free, chosen, moved), _split_places(c, places)


_FIT_RANKS = (0, 1, 2)
""":func:`_fit`'s ranks, the closest first."""


def _fit(r: JaxprCollective, op: "CompiledOperand") -> int | None:
    """How closely the jaxpr collective ``r`` fits the compiled operand ``op`` (0 the closest),
    None when it cannot be that operand. A collective of a manual shard_map is typed per device:
    its bytes are the operand's (0), as the program typed it (a sum the compiler promoted from
    bf16 to f32 is compared at its bf16 bytes). One of a partial-auto shard_map is typed whole along the
    axes the partitioner splits (:attr:`~shardscope.engine.jaxpr.dataflow.Collective.auto_axes`):
    its dimensions are the operand's (0), or each a multiple of the operand's with the parts
    together dividing those axes' devices (1: ``f32[16,32]`` split over a ``model`` of 2 is
    ``f32[16,16]``); its bytes alone (2) say little, two gradients split differently may have
    equal bytes."""
    auto = r.auto_axes
    if not auto:
        return 0 if r.bytes_per_execution == op.written_bytes else None
    dims = r.operand_dims
    if len(dims) == 1 and tuple(dims[0]) == op.dims and r.bytes_per_execution == op.written_bytes:
        return 0
    if len(dims) == 1 and _split_of(tuple(dims[0]), op.dims, math.prod(size for _, size in auto)) \
            and op.written_bytes * math.prod(dims[0]) == r.bytes_per_execution * math.prod(op.dims):
        return 1
    return 2 if r.bytes_per_execution == op.written_bytes else None


def _split_of(whole: tuple[int, ...], part: tuple[int, ...], devices: int) -> bool:
    """``part`` is a device's shard of ``whole`` split over at most ``devices`` devices: each
    dimension a multiple of its part, the multiples' product dividing ``devices``."""
    if len(whole) != len(part) or any(p <= 0 or w % p for w, p in zip(whole, part)):
        return False
    split = math.prod(w // p for w, p in zip(whole, part))
    return split > 1 and devices % split == 0


def _place_of_first(first: JaxprCollective, operands: "list[CompiledOperand]") -> int:
    """The operand the first collective of a combined instruction carries: the one it fits most
    closely (the first among equals), else the one whose bytes are nearest its own."""
    fits = [(rank, k) for k, op in enumerate(operands) if (rank := _fit(first, op)) is not None]
    if fits:
        return min(fits)[1]
    return min(range(len(operands)), key=lambda k: abs(operands[k].written_bytes - first.bytes_per_execution))


def _split_places(c: "CompiledCollective", places: "dict[int, JaxprCollective]") -> tuple[str, ...]:
    """Each operand's collective where pairing placed a partial-auto shard_map's collective on it
    (its bytes are the partitioner's split, not the jaxpr's: naming by bytes would miss it), else
    ``""``; empty when none was."""
    if not any(r.auto_axes for r in places.values()):
        return ()
    return tuple(places[k].equation_id if k in places and bool(places[k].auto_axes) else ""
                 for k in range(len(c.operands)))


def _whole(c: "CompiledCollective", free: dict[int, JaxprCollective], chosen: list[JaxprCollective],
           moved: bool) -> list[JaxprCollective]:
    """``chosen``, or every sum the combined instruction ``c`` can carry when their bytes add up to
    its own and ``chosen``'s do not: a target's compiler may carry a value in several operands
    (XLA:TPU all-reduces a complex gradient as its real and imaginary parts), so no operand's bytes
    are that value's, but the instruction's bytes are the sum of the values it
    carries."""
    total = sum(op.written_bytes for op in c.operands)
    if sum(r.bytes_per_execution for r in chosen) == total:
        return chosen
    first = chosen[0]
    whole = [r for r in free.values() if r is not first
             and (_moved_out_of_a_loop(c, r, None) if moved else _carried(c, r))]
    if first.bytes_per_execution + sum(r.bytes_per_execution for r in whole) != total:
        return chosen
    return [first, *whole]


def _carried(c: "CompiledCollective", r: JaxprCollective) -> bool:
    """``r`` could be one of the values the combined instruction ``c`` carries: a sum of its kind
    in loops its own are among (the op_name and line are those of another value it merged)."""
    kind = HLO_KIND.get(r.primitive)
    if kind is None or (c.kind != kind and not (kind == REDUCE_SCATTER and c.kind == ALL_REDUCE)):
        return False
    return _loops_among(c.loop_trip_counts, r.loop_trip_counts)


def _loops_among(compiled: tuple[int | None, ...], written: tuple[int | None, ...]) -> bool:
    """The compiled loops' trip counts are a subsequence of the jaxpr's (the compiler removes loops,
    of one iteration or around a collective it hoists, and never adds one). A jaxpr loop whose trip
    count is unknown (None: a ``while_loop``, even one whose bound is a constant) stands for any:
    XLA's loop analysis finds the trip count of ``while_loop(lambda c: c[0] < 10, ...)``
    (``known_trip_count`` 10) that the jaxpr does not say."""
    remaining = iter(u for u in written if u != 1)
    return all(any(u is None or t == u for u in remaining) for t in compiled if t != 1)


def _first(candidates: Iterator[JaxprCollective], operands: "list[CompiledOperand]") -> JaxprCollective | None:
    """The first candidate that fits one of ``operands`` (:func:`_fit`); else the one whose bytes
    are nearest one of theirs by ratio, the first in the program's order among equals (a target's
    compiler may carry a value in a narrower type: XLA:TPU gathers f32 weights as bf16, half their
    bytes); None if none. It stops at the first that fits, so a long program's pairing reads few
    of them."""
    fallback, distance = None, math.inf
    for r in candidates:
        if any(_fit(r, op) is not None for op in operands):
            return r
        nearest = min((_ratio(r.bytes_per_execution, op.written_bytes) for op in operands), default=math.inf)
        if fallback is None or nearest < distance:
            fallback, distance = r, nearest
    return fallback


def _ratio(a: int, b: int) -> float:
    """How many times the larger of two byte counts is the smaller (infinite with a zero)."""
    return max(a, b) / min(a, b) if min(a, b) > 0 else math.inf


def _moved_out_of_a_loop(c: "CompiledCollective", r: JaxprCollective, sizes: list[int] | None) -> bool:
    """A sum a TPU compiler moved out of a loop, printed by jax 0.10.2 under the ``op_name`` of the
    loop it left (``.../while``, and that loop's line): the jaxpr collective of its kind and
    bytes (one of ``sizes``; any, with None) that ran inside loops it no longer runs in."""
    kind = HLO_KIND.get(r.primitive)
    if not c.op_name.endswith("/while") or kind is None or (c.kind != kind and not (kind == REDUCE_SCATTER and c.kind == ALL_REDUCE)):
        return False
    return (sizes is None or r.bytes_per_execution in sizes) and len(r.loop_trip_counts) > len(c.loop_trip_counts)


def _matches(c: "CompiledCollective", r: JaxprCollective, by_source: bool = True) -> bool:
    kind = HLO_KIND.get(r.primitive)
    if kind is None or (c.kind != kind and not (kind == REDUCE_SCATTER and c.kind == ALL_REDUCE)):
        return False
    if c.op_name and r.primitive not in op_primitives(c.op_name):
        return False
    traced = getattr(r, "traced_source", "") or r.source  # a custom_vjp rule's: the line JAX's frames keep
    # a source that is no line (a demo plan's own psum, named for the user) says nothing to compare
    if by_source and is_source_line(traced) and c.source and traced.split(" ")[0] != c.source.split(" ")[0]:
        return False
    return _loops_among(c.loop_trip_counts, r.loop_trip_counts)
