"""Compile, time and check the plans: the numbers that need the programs to run."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    import jax

MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "temp_size_in_bytes",
    "alias_size_in_bytes",
    "generated_code_size_in_bytes",
)


@dataclass(frozen=True)
class RunTimes:
    """Wall-clock seconds of one call, over repeated runs after warm-up."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median run time."""
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        """The fastest run."""
        return min(self.samples)

    @property
    def max(self) -> float:
        """The slowest run."""
        return max(self.samples)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Call ``fn`` and return its result with the seconds it took."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


Samples = Mapping[str, Sequence[float]]
"""Each program's run times so far, round by round (aligned: the i-th of each is round i)."""


def time_interleaved(
    compiled: Mapping[str, Callable],
    args: tuple,
    repeats: int,
    warmup: int = 2,
    on_round: Callable[[float], None] | None = None,
    *,
    until: Callable[[Samples], bool] | None = None,
    budget_s: float = 0.0,
) -> dict[str, RunTimes]:
    """Time each program ``repeats`` times, taking turns so drift hits all of them alike; then, with
    ``until`` and a ``budget_s``, more rounds until ``until(samples)`` holds or the rounds after
    the first ``repeats`` have taken ``budget_s`` seconds.

    Each round runs every program once; the order rotates from round to round.
    The inputs must already be placed with their sharding, so only the call is measured.
    ``on_round(done)`` runs between rounds (progress, cancellation): ``done`` is the fraction of
    the work done, the first ``repeats`` rounds half of it when more may follow, the budget the
    other half. ``until`` is asked after the first ``repeats`` rounds, then every tenth more.
    """
    import jax

    for _ in range(warmup):
        for fn in compiled.values():
            jax.block_until_ready(fn(*args))
    samples: dict[str, list[float]] = {name: [] for name in compiled}
    order = list(compiled.items())
    more = until is not None and budget_s > 0
    first_share = 0.5 if more else 1.0
    i, more_since, ask_at = 0, 0.0, repeats
    while True:
        if i >= repeats:
            if not more:
                break
            if i == repeats:
                more_since = time.perf_counter()
            elif time.perf_counter() - more_since >= budget_s:
                break
            if i >= ask_at:
                assert until is not None  # ``more``
                if until(samples):
                    break
                ask_at = i + max(1, i // 10)  # the question costs a sort per pair: ask less often as rounds pile up
        # Whoever runs first after ``on_round`` shares the CPU with what it triggered (the app
        # repaints its progress): rotate the order so that cost is spread over every program.
        shift = i % len(order)
        for name, fn in order[shift:] + order[:shift]:
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            samples[name].append(time.perf_counter() - start)
        i += 1
        if on_round is not None:
            spent = 0.0 if i <= repeats else min(1.0, (time.perf_counter() - more_since) / budget_s)
            on_round(first_share * min(i, repeats) / repeats + (1 - first_share) * spent)
    return {name: RunTimes(tuple(s)) for name, s in samples.items()}


def memory(compiled: jax.stages.Compiled) -> dict[str, int]:
    """The compiled module's memory analysis, in bytes (empty if the backend has none)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    return {name: int(getattr(stats, name)) for name in MEMORY_FIELDS if hasattr(stats, name)}


GRADIENT_CHECK = (
    "max_abs_err: the largest |plan gradient - reference gradient| over every parameter; the reference is "
    "the unchunked VJP (jax.vjp over the whole batch) pulled back with the same random cotangent. "
    "A plan can only match it for a model that is separable over the batch (each example's output depends "
    "on that example alone: no batch norm, no mean over the batch)."
)
"""What the gradient check compares, in the words every rendering shows next to ``max_abs_err``."""


def cost_summary(compiled: jax.stages.Compiled) -> dict[str, float] | None:
    """``flops`` and ``bytes_accessed`` from XLA's ``cost_analysis()`` (None if the backend has none).

    XLA costs a while loop as one iteration of its body: these numbers do not grow with the trip
    count, which is why shardscope counts collectives per call itself.
    """
    try:
        cost = compiled.cost_analysis()
    except Exception:  # some backends do not implement it
        return None
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    if not cost:
        return None
    return {"flops": float(cost.get("flops", 0.0)), "bytes_accessed": float(cost.get("bytes accessed", 0.0))}


def max_abs_err(result: Any, expected: Any) -> float:  # Any: the user's output pytrees
    """The largest absolute difference over all leaves (complex values by modulus).

    NaN when any difference is not finite (a NaN or inf in either gradient): Python's ``max``
    and a plain comparison skip NaN, which reported a small error for a NaN gradient.
    Works in blocks, so the temporaries stay small whatever the size of the gradient.
    """
    import jax
    import numpy as np

    worst = 0.0
    for a, b in zip(jax.tree.leaves(result), jax.tree.leaves(expected), strict=True):
        a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
        for start in range(0, a.size, _BLOCK):
            block = np.abs(a[start:start + _BLOCK] - b[start:start + _BLOCK])
            if not np.all(np.isfinite(block)):
                return float("nan")
            worst = max(worst, float(np.max(block, initial=0.0)))
    return worst


_BLOCK = 1 << 20
