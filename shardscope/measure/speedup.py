"""How much faster one plan runs than another, and whether the difference is measurable.

:func:`shardscope.measure.timing.time_interleaved` runs every plan once per round, so the rounds are
aligned: each round gives one ratio (baseline time over candidate time) measured under the same
conditions. The speedup is the median of those ratios. How sure it is says a 95% confidence
interval of that median, taken from the sorted ratios themselves (the sign test's interval: no
assumption about how the ratios are distributed, only that the rounds are alike): the verdict
names a winner only when the interval lies on one side of 1. The interquartile range of the
ratios says how much single rounds scatter (a loaded machine's), which more rounds do not
shrink; the interval of the median does shrink, which is why :func:`settled` asks for more rounds
until it is narrow or names a winner. Every rendering (report, JSON, app, docs) uses
:func:`speedup_text`, so there is one wording.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

CONFIDENCE = 0.95
"""The confidence of the interval of the median ratio."""

NARROW = 1.10
"""An interval whose high end is at most this many times its low end (about +-5% around the
median) is narrow: more rounds would not change what it says."""

CLEAR = 1.02
"""A winner is settled when the whole interval lies beyond this ratio (or its inverse): an
interval that only just excludes 1 (``1.00-1.56x``) may hold it after a few more rounds."""


def median_rank(rounds: int, confidence: float = CONFIDENCE) -> int:
    """``k``: the interval ``[r(k), r(n - k + 1)]`` of the ``n`` sorted ratios (1-based) holds the
    median with at least ``confidence``, the largest such ``k``; 0 when no ``k`` does.

    The number of ratios below the true median is Binomial(n, 1/2); ``k`` is the largest count
    with ``P(B <= k - 1) <= (1 - confidence) / 2`` (20 rounds: ``P(B <= 5) = 21,700 / 2**20 =
    0.0207``, so ``k = 6``).
    """
    tail = (1.0 - confidence) / 2
    below = 0.0
    log_half = rounds * math.log(0.5)
    for j in range(rounds // 2 + 1):
        below += math.exp(math.lgamma(rounds + 1) - math.lgamma(j + 1) - math.lgamma(rounds - j + 1) + log_half)
        if below > tail:
            return j
    return rounds // 2  # not reached for confidence > 0


MIN_ROUNDS = next(n for n in range(1, 100) if median_rank(n) >= 1)
"""The fewest aligned rounds for which the 95% interval of the median exists (6: with 5 the
chance that every ratio lies on one side of the median is already 2 / 32 > 5%): no verdict below."""

HOW = (
    "speedup: the median of the per-round ratios (each round runs every program once, in an order that rotates), "
    f"with a {CONFIDENCE:.0%} confidence interval of that median read from the sorted ratios (no assumption about "
    "their distribution); a winner is named only when the interval excludes 1. The interquartile range of single "
    "rounds does not shrink with more rounds, the interval of the median does: past the rounds asked for, rounds go "
    "on within the timing budget until every comparison names a winner clearly (its interval beyond 2% of 1) or its "
    "interval is within +-5%. Two programs "
    "that compile to the same collectives and memory differ by noise only, and are said to."
)
"""How the speedup is measured, in the words the report and the Timings tab print under it."""

FASTER, SLOWER, NO_DIFFERENCE, TOO_FEW_ROUNDS = "faster", "slower", "no measurable difference", "too few rounds"
"""The verdicts (``report --json`` key ``speedup_verdict``)."""


@dataclass(frozen=True)
class Speedup:
    """The per-round ratios baseline/candidate, summarised.

    ``median`` is the median ratio (above 1: the candidate is faster); ``low``/``high`` the 95%
    confidence interval of that median (``nan`` below :data:`MIN_ROUNDS` rounds); ``q1``/``q3``
    the interquartile range of the ratios (how much single rounds scatter); ``rounds`` how many.
    """

    median: float
    low: float
    high: float
    rounds: int
    q1: float = math.nan
    q3: float = math.nan

    @property
    def measurable(self) -> bool:
        """True when enough rounds were timed and the interval of the median does not contain 1."""
        return self.rounds >= MIN_ROUNDS and not self.low <= 1.0 <= self.high

    @property
    def narrow(self) -> bool:
        """True when the interval of the median is within :data:`NARROW` (about +-5%)."""
        return self.rounds >= MIN_ROUNDS and self.high <= NARROW * self.low

    @property
    def settled(self) -> bool:
        """True when more rounds would not change the verdict much: the interval is narrow, or it
        names a winner clearly (the whole of it beyond :data:`CLEAR`)."""
        clear = self.low >= CLEAR or self.high <= 1 / CLEAR
        return self.narrow or (self.measurable and clear)

    @property
    def verdict(self) -> str:
        """``faster``, ``slower``, ``no measurable difference`` or ``too few rounds`` (the candidate's)."""
        if self.rounds < MIN_ROUNDS:
            return TOO_FEW_ROUNDS
        if not self.measurable:
            return NO_DIFFERENCE
        return FASTER if self.median > 1 else SLOWER


def speedup_of(baseline_samples: Sequence[float], candidate_samples: Sequence[float]) -> Speedup:
    """The :class:`Speedup` from two plans' aligned per-round run times (seconds)."""
    ratios = sorted(b / c for b, c in zip(baseline_samples, candidate_samples, strict=True) if c > 0)
    if not ratios:
        return Speedup(math.nan, math.nan, math.nan, 0)
    n = len(ratios)
    k = median_rank(n)
    low, high = (ratios[k - 1], ratios[n - k]) if k else (math.nan, math.nan)
    q1, q3 = (ratios[0], ratios[-1]) if n < 2 else statistics.quantiles(ratios, n=4, method="inclusive")[::2]
    return Speedup(statistics.median(ratios), low, high, n, q1, q3)


def settled(samples: Mapping[str, Sequence[float]], pairs: Iterable[tuple[str, str]]) -> bool:
    """True when every pair's :class:`Speedup` over the aligned ``samples`` so far is settled."""
    return all(speedup_of(samples[a], samples[b]).settled for a, b in pairs)


def speedup_text(speedup: Speedup, baseline: str, candidate: str, same_work: bool = False) -> str:
    """The one wording: ``deferred is 2.22x faster than naive (median of 20 per-round ratios;
    95% confidence interval 2.10-2.35x)``.

    Or ``no measurable difference between naive and deferred (median of 20 per-round ratios
    1.03x; 95% confidence interval 0.93-1.12x)`` when the interval contains 1: the median is
    stated, so a reader who divides the two plans' median times (a different number) sees which
    ratio the verdict is about. ``same_work``: the two compile to the same collectives and memory,
    so whatever the times say is noise, and the sentence says that instead of a winner. Says so
    when too few rounds were timed to tell.
    """
    median = f"median of {speedup.rounds} per-round ratios"
    interval = f"{CONFIDENCE:.0%} confidence interval {speedup.low:.2f}-{speedup.high:.2f}x"
    verdict = speedup.verdict
    if same_work:
        measured = f"{median} {speedup.median:.2f}x" + ("" if verdict == TOO_FEW_ROUNDS else f"; {interval}")
        return (f"{baseline} and {candidate} compile to the same collectives and memory: their times differ by "
                f"noise only ({measured})")
    if verdict == TOO_FEW_ROUNDS:
        return (
            f"{speedup.rounds} timed round(s) are too few to tell {candidate} from {baseline} "
            f"(median ratio {speedup.median:.2f}x; time {MIN_ROUNDS} or more)"
        )
    if verdict == NO_DIFFERENCE:
        return f"no measurable difference between {baseline} and {candidate} ({median} {speedup.median:.2f}x; {interval})"
    if verdict == FASTER:
        return f"{candidate} is {speedup.median:.2f}x faster than {baseline} ({median}; {interval})"
    return f"{candidate} is {1 / speedup.median:.2f}x slower than {baseline} ({median}; {interval})"


def speedup_short_text(speedup: Speedup, baseline: str, candidate: str, same_work: bool = False) -> str:
    """The same verdict in a few words, for a status line: ``deferred 2.22x faster``."""
    verdict = speedup.verdict
    if same_work:
        return "same compiled work: noise only"
    if verdict == TOO_FEW_ROUNDS:
        return verdict
    if verdict == FASTER:
        return f"{candidate} {speedup.median:.2f}x faster"
    if verdict == SLOWER:
        return f"{candidate} {1 / speedup.median:.2f}x slower"
    return verdict
