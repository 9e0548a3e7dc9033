"""What an interconnect model gives for one run of a collective, and the cost models the
collectives follow (by the JAX primitive whose cost each compiled collective has:
:func:`shardscope.costmodel.projection.compiled_model`)."""

from __future__ import annotations

from dataclasses import dataclass

REDUCE = frozenset({"psum", "psum_invariant", "unreduced_psum", "pmax", "pmin"})
GATHER = frozenset({"all_gather", "all_gather_invariant", "all_gather_reduced"})
SCATTER = frozenset({"reduce_scatter", "unreduced_reduce_scatter", "pbroadcast"})
ALL_TO_ALL = frozenset({"all_to_all", "ragged_all_to_all"})
PAIRS = frozenset({"ppermute", "psend", "precv"})


@dataclass(frozen=True)
class CollectiveTime:
    """One run of a collective: ``seconds`` (its latency and bandwidth parts, as the formula
    combines them), the ``algorithm`` in words and the ``devices`` of its largest group."""

    seconds: float
    latency_s: float
    bandwidth_s: float
    algorithm: str
    devices: int
