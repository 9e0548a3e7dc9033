"""What an interconnect model gives for one run of a collective, and the cost models the
collectives follow (by the JAX primitive whose cost each compiled collective has:
:func:`shardscope.costmodel.projection.compiled_model`)."""

from __future__ import annotations

from dataclasses import dataclass

from shardscope import collective_kinds as kinds

REDUCE = kinds.of_shape(kinds.REDUCE)
GATHER = kinds.of_shape(kinds.GATHER)
SCATTER = kinds.of_shape(kinds.SCATTER)
ALL_TO_ALL = kinds.of_shape(kinds.EXCHANGE)
PAIRS = kinds.of_shape(kinds.PAIRS)
BROADCAST = kinds.of_shape(kinds.BROADCAST)
"""The primitives of each cost shape (:data:`shardscope.collective_kinds.KINDS`' rows)."""


@dataclass(frozen=True)
class CollectiveTime:
    """One run of a collective: ``seconds`` (its latency and bandwidth parts, as the formula
    combines them), the ``algorithm`` in words and the ``devices`` of its largest group."""

    seconds: float
    latency_s: float
    bandwidth_s: float
    algorithm: str
    devices: int
