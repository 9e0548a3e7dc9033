"""Every collective kind shardscope knows, in one table: the HLO instruction (the compiled
view's kind), the JAX primitives that compile to it (the jaxpr view's) with their asynchronous
``*_start`` forms, the ``jax.lax`` functions that bind them, whether it sums (what may be deferred
out of a loop) or scatters, and the shape of its cost (what the ring, torus and NCCL models charge).

The parser (:mod:`shardscope.engine.hlo.sites`), the pairing of the two views
(:mod:`shardscope.engine.hlo.pairing`), the jaxpr model and verdicts, the cost models
(:mod:`shardscope.costmodel.projection`, :mod:`shardscope.hardware.collective_models`) and the
what-if's rewrites read it; a new collective kind is one row here, and every list of primitives,
opcodes or calls elsewhere is derived from :data:`KINDS` (``tests/test_kinds.py`` holds them to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

REDUCE, GATHER, SCATTER, EXCHANGE, PAIRS, BROADCAST = "reduce", "gather", "scatter", "exchange", "pairs", "broadcast"
"""The cost shapes, for ``n`` devices and a per-device operand of ``S`` bytes (NCCL's performance
notes; :mod:`shardscope.costmodel.projection`):

- ``reduce``: an all-reduce, ``2(n-1)`` steps and ``2(n-1)/n · S`` bytes on each link;
- ``gather``: ``n-1`` steps and ``(n-1)/n · nS`` (the gathered array) on each link;
- ``scatter``: ``n-1`` steps and ``(n-1)/n · S`` (the operand is the unscattered array);
- ``exchange``: an all-to-all, the same ring cost as ``scatter``; the torus and NCCL load each link
  by its share of the pairs;
- ``pairs``: point to point, one step and ``S`` bytes;
- ``broadcast``: one device's ``S`` bytes to every other, pipelined down a chain: ``n-1`` steps and
  ``S`` bytes on each link (XLA's collective-broadcast; NCCL's ring broadcast moves ``S`` per link).
"""


RING_TERMS: dict[str, Callable[[int, int], tuple[float, float]]] = {
    REDUCE: lambda n, s: (2 * (n - 1), 2 * (n - 1) / n * s),
    GATHER: lambda n, s: (n - 1, (n - 1) / n * (n * s)),
    SCATTER: lambda n, s: (n - 1, (n - 1) / n * s),
    EXCHANGE: lambda n, s: (n - 1, (n - 1) / n * s),
    PAIRS: lambda n, s: (1, s),
    BROADCAST: lambda n, s: (n - 1, s),
}
"""Each cost shape as the list above writes it, for ``n`` devices and ``S`` bytes per device:
``(latency steps, bytes over each link)`` of one run on a ring (the projection's alpha-beta
model); a TPU torus moves the same bytes over the links its group spans (but an exchange's)."""


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
    """The JAX primitive whose cost model costs the compiled instruction."""
    shape: str
    """Its cost shape: one of :data:`REDUCE` ... :data:`BROADCAST`."""
    starts: tuple[str, ...] = ()
    """The asynchronous forms of its primitives (``psum_start``): a ``*_start`` equation moves the data."""
    sends: tuple[str, ...] = ()
    """Point-to-point primitives costed like it (``psend``/``precv``), which compile to HLO send/recv."""
    scatters: bool = False
    """True when each device keeps one shard of the result."""
    calls: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(primitive, the jax.lax functions a user calls that bind it)``."""
    reduces_by: tuple[tuple[str, str], ...] = ()
    """``(primitive, its combiner)`` for a reduction that is not a sum (``pmax``: ``max``)."""
    async_pair: bool = False
    """True when HLO has its own ``-start``/``-done`` opcodes for it (``all-reduce-start``)."""

    @property
    def every_primitive(self) -> tuple[str, ...]:
        """Its primitives, their ``*_start`` forms and the point-to-point ones costed like it."""
        return self.primitives + self.starts + self.sends


KINDS: tuple[CollectiveKind, ...] = (
    CollectiveKind("all-reduce", ("psum", "psum_invariant", "pmax", "pmin", "unreduced_psum", "unreduced_pmax",
                                  "unreduced_pmin"), True, "psum", REDUCE,
                   async_pair=True,
                   starts=("psum_start", "psum_invariant_start", "unreduced_psum_start"),
                   calls=(("psum", ("psum", "pmean")), ("psum_invariant", ("psum", "pmean")), ("pmax", ("pmax",)),
                          ("pmin", ("pmin",))),
                   reduces_by=(("pmax", "max"), ("pmin", "min"), ("unreduced_pmax", "max"), ("unreduced_pmin", "min"))),
    CollectiveKind("all-gather", ("all_gather", "all_gather_invariant", "all_gather_reduced"), False, "all_gather",
                   GATHER, starts=("all_gather_start", "all_gather_reduced_start"), async_pair=True,
                   calls=(("all_gather", ("all_gather",)), ("all_gather_invariant", ("all_gather",)))),
    CollectiveKind("reduce-scatter", ("reduce_scatter", "psum_scatter", "unreduced_reduce_scatter"), True,
                   "reduce_scatter", SCATTER, starts=("reduce_scatter_start", "unreduced_reduce_scatter_start"),
                   scatters=True, calls=(("reduce_scatter", ("psum_scatter",)),)),
    CollectiveKind("all-to-all", ("all_to_all",), False, "all_to_all", EXCHANGE, starts=("all_to_all_start",),
                   calls=(("all_to_all", ("all_to_all",)),)),
    CollectiveKind("ragged-all-to-all", ("ragged_all_to_all",), False, "ragged_all_to_all", EXCHANGE),
    CollectiveKind("collective-permute", ("ppermute",), False, "ppermute", PAIRS, starts=("ppermute_start",),
                   async_pair=True,
                   sends=("psend", "precv"), calls=(("ppermute", ("ppermute", "pshuffle")),)),
    CollectiveKind("collective-broadcast", ("pbroadcast", "pbroadcast_dynamic"), False, "pbroadcast", BROADCAST,
                   starts=("pbroadcast_start",),
                   calls=(("pbroadcast", ("pbroadcast",)), ("pbroadcast_dynamic", ("pbroadcast",)))),
)

BY_NAME: dict[str, CollectiveKind] = {kind.name: kind for kind in KINDS}
"""Each kind by its HLO opcode."""

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL = "all-reduce", "all-gather", "reduce-scatter", "all-to-all"
COLLECTIVE_PERMUTE = "collective-permute"
"""The kinds the verdicts and fixes name one by one."""
ALL_REDUCE_START, ALL_REDUCE_DONE = f"{ALL_REDUCE}-start", f"{ALL_REDUCE}-done"
"""The start of an asynchronous all-reduce (a GPU's), which reads the operand, and its end,
whose result is the sum."""

PSUM, PSUM_INVARIANT = "psum", "psum_invariant"
"""The sum a user writes (``lax.psum``), and the primitive JAX writes for the transpose of an
implicit ``pvary`` (a gradient's sum): the primitives the verdicts name one by one."""

NAMES: tuple[str, ...] = tuple(kind.name for kind in KINDS)
"""Every kind's opcode, in the table's order (the order plans list kinds in)."""

SUM_KINDS: frozenset[str] = frozenset(kind.name for kind in KINDS if kind.sums)
"""The kinds that sum over devices: ``all-reduce`` and ``reduce-scatter``."""

OF_PRIMITIVE: dict[str, str] = {primitive: kind.name for kind in KINDS for primitive in kind.primitives}
"""The HLO kind each JAX collective primitive compiles to."""

DONE_OPCODES: frozenset[str] = frozenset(f"{kind.name}-done" for kind in KINDS if kind.async_pair)
"""The ends of HLO's async collective pairs (``all-reduce-done``): they move no data of their own."""

MOVING_OPCODES: frozenset[str] = frozenset(op for kind in KINDS if not kind.sums for op in (kind.name, f"{kind.name}-start"))
"""The opcodes of the collectives that only move data (no sum: ``all-gather``, ``collective-permute``,
``all-to-all``...) and their async starts: inside XLA:TPU's async collective fusion a step of one
runs beside the fusion's compute and computes nothing itself."""

PRIMITIVES: frozenset[str] = frozenset(p for kind in KINDS for p in kind.every_primitive)
"""Every JAX primitive that moves data between devices, ``*_start`` forms and send/recv included."""

REDUCES_BY: dict[str, str] = {p: combiner for kind in KINDS for p, combiner in kind.reduces_by}
"""Reductions over devices that are not sums (``pmax``: ``max``): they do not commute with a loop's sum."""

SUMS: frozenset[str] = frozenset(p for kind in KINDS if kind.sums for p in kind.primitives) - set(REDUCES_BY)
"""The primitives that add over devices, so they commute with a sum over loop iterations."""

REDUCING: frozenset[str] = frozenset(p for kind in KINDS if kind.sums for p in kind.primitives + kind.starts)
"""Every primitive whose result is a reduction over devices (sums, ``pmax``/``pmin``, their ``*_start`` forms)."""

SCATTERING: frozenset[str] = frozenset(p for kind in KINDS if kind.scatters for p in kind.primitives + kind.starts)
"""The primitives that keep one shard of their result on each device."""

SHAPE_OF: dict[str, str] = {p: kind.shape for kind in KINDS for p in kind.every_primitive}
"""The cost shape of every collective primitive (``*_start`` forms and send/recv included)."""

LAX_FUNCTIONS: dict[str, tuple[str, ...]] = {p: functions for kind in KINDS for p, functions in kind.calls}
"""The ``jax.lax`` functions a user calls that bind each collective primitive."""

CALLS: frozenset[str] = frozenset(f for functions in LAX_FUNCTIONS.values() for f in functions)
"""Every ``jax.lax`` function that binds a collective (``psum``, ``pmean``, ``psum_scatter``...)."""

CALL_NOUNS: dict[str, str] = {"all_gather": "gathered", "psum": "summed", "pmean": "mean", "ppermute": "permuted",
                              "pshuffle": "permuted", "all_to_all": "exchanged", "psum_scatter": "scattered"}
"""What each call's result is, in a name for it (``grads_summed``)."""


def called(primitive: str) -> str:
    """The ``jax.lax`` function a user wrote for ``primitive`` (``psum_invariant``: ``psum``)."""
    return LAX_FUNCTIONS.get(primitive, (primitive,))[0]


def of_shape(shape: str) -> frozenset[str]:
    """Every primitive whose cost has ``shape``."""
    return frozenset(p for p, s in SHAPE_OF.items() if s == shape)
