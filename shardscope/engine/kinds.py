"""Every collective kind shardscope knows, in one table: the HLO instruction (the compiled
view's kind), the JAX primitives that compile to it (the jaxpr view's), whether it sums (what
may be deferred out of a loop), and the JAX primitive whose ring model the cost model uses.

The parser (:mod:`shardscope.engine.hlo.sites`), the pairing of the two views
(:mod:`shardscope.engine.hlo.pairing`), the verdicts and the cost model
(:mod:`shardscope.costmodel.projection`) read it; a new collective kind is one row here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CollectiveKind:
    """One HLO collective instruction and what the rest of shardscope needs to know of it."""

    name: str
    """The HLO opcode (``all-reduce``): the kind a compiled plan lists it under."""
    primitives: tuple[str, ...]
    """The JAX primitives (the jaxpr's equations) that compile to it."""
    sums: bool
    """True for a reduction whose combiner may add: such a sum commutes with a loop's sum."""
    model: str
    """The JAX primitive whose ring model (:mod:`shardscope.costmodel.projection`) costs it."""


KINDS: tuple[CollectiveKind, ...] = (
    CollectiveKind("all-reduce", ("psum", "psum_invariant", "pmax", "pmin", "unreduced_psum"), True, "psum"),
    CollectiveKind("all-gather", ("all_gather", "all_gather_invariant", "all_gather_reduced"), False, "all_gather"),
    CollectiveKind("reduce-scatter", ("reduce_scatter", "psum_scatter", "unreduced_reduce_scatter"), True,
                   "reduce_scatter"),
    CollectiveKind("all-to-all", ("all_to_all",), False, "all_to_all"),
    CollectiveKind("ragged-all-to-all", ("ragged_all_to_all",), False, "ragged_all_to_all"),
    CollectiveKind("collective-permute", ("ppermute",), False, "ppermute"),
    CollectiveKind("collective-broadcast", ("pbroadcast",), False, "pbroadcast"),
)

BY_NAME: dict[str, CollectiveKind] = {kind.name: kind for kind in KINDS}
"""Each kind by its HLO opcode."""

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL = "all-reduce", "all-gather", "reduce-scatter", "all-to-all"
"""The kinds the verdicts and fixes name one by one."""

NAMES: tuple[str, ...] = tuple(kind.name for kind in KINDS)
"""Every kind's opcode, in the table's order (the order plans list kinds in)."""

SUM_KINDS: frozenset[str] = frozenset(kind.name for kind in KINDS if kind.sums)
"""The kinds that sum over devices: ``all-reduce`` and ``reduce-scatter``."""

OF_PRIMITIVE: dict[str, str] = {primitive: kind.name for kind in KINDS for primitive in kind.primitives}
"""The HLO kind each JAX collective primitive compiles to."""
