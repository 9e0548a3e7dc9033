"""How much faster one plan runs than another, and whether the difference is measurable.

:func:`shardscope.measure.timing.time_interleaved` runs every plan once per round, so the rounds are
aligned: each round gives one ratio (baseline time over candidate time) measured under the same
conditions. The speedup is the median of those ratios, its spread their interquartile range;
when the spread contains 1 the two plans are not told apart and the wording says so. Every
rendering (report, JSON, app, docs) uses :func:`speedup_text`, so there is one wording.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

MIN_ROUNDS = 3
"""Fewer aligned rounds than this give no spread worth the name: no verdict is drawn."""

FASTER, SLOWER, NO_DIFFERENCE, TOO_FEW_ROUNDS = "faster", "slower", "no measurable difference", "too few rounds"
"""The verdicts (``report --json`` key ``speedup_verdict``)."""


@dataclass(frozen=True)
class Speedup:
    """The per-round ratios baseline/candidate, summarised.

    ``median`` is the median ratio (above 1: the candidate is faster), ``low``/``high`` the
    interquartile range of the ratios (their extremes below 4 rounds), ``rounds`` how many.
    """

    median: float
    low: float
    high: float
    rounds: int

    @property
    def measurable(self) -> bool:
        """True when enough rounds were timed and the spread of the ratios does not contain 1."""
        return self.rounds >= MIN_ROUNDS and not self.low <= 1.0 <= self.high

    @property
    def verdict(self) -> str:
        """``faster``, ``slower``, ``no measurable difference`` or ``too few rounds`` (the candidate's)."""
        if self.rounds < MIN_ROUNDS:
            return TOO_FEW_ROUNDS
        if not self.measurable:
            return NO_DIFFERENCE
        return FASTER if self.median > 1 else SLOWER


def speedup_of(baseline_samples: tuple[float, ...], candidate_samples: tuple[float, ...]) -> Speedup:
    """The :class:`Speedup` from two plans' aligned per-round run times (seconds)."""
    ratios = sorted(b / c for b, c in zip(baseline_samples, candidate_samples, strict=True) if c > 0)
    if not ratios:
        return Speedup(math.nan, math.nan, math.nan, 0)
    if len(ratios) >= 4:
        low, _, high = statistics.quantiles(ratios, n=4, method="inclusive")
    else:
        low, high = ratios[0], ratios[-1]
    return Speedup(statistics.median(ratios), low, high, len(ratios))


def speedup_text(speedup: Speedup, baseline: str, candidate: str) -> str:
    """The one wording: ``deferred is 2.22x faster than naive (per-round ratios 2.10-2.35x)``.

    Or ``no measurable difference between naive and deferred (per-round ratios 0.93-1.12x,
    median 1.03x)`` when the spread contains 1: the median is stated, so a reader who divides the
    two plans' median times (a different number) sees which ratio the verdict is about. Says so
    when too few rounds were timed to tell.
    """
    spread = f"per-round ratios {speedup.low:.2f}-{speedup.high:.2f}x"
    verdict = speedup.verdict
    if verdict == TOO_FEW_ROUNDS:
        return (
            f"{speedup.rounds} timed round(s) are too few to tell {candidate} from {baseline} "
            f"(median ratio {speedup.median:.2f}x; time {MIN_ROUNDS} or more)"
        )
    if verdict == NO_DIFFERENCE:
        return f"no measurable difference between {baseline} and {candidate} ({spread}, median {speedup.median:.2f}x)"
    if verdict == FASTER:
        return f"{candidate} is {speedup.median:.2f}x faster than {baseline} ({spread})"
    return f"{candidate} is {1 / speedup.median:.2f}x slower than {baseline} ({spread})"


def speedup_short_text(speedup: Speedup, baseline: str, candidate: str) -> str:
    """The same verdict in a few words, for a status line: ``deferred 2.22x faster``."""
    verdict = speedup.verdict
    if verdict == FASTER:
        return f"{candidate} {speedup.median:.2f}x faster"
    if verdict == SLOWER:
        return f"{candidate} {1 / speedup.median:.2f}x slower"
    return verdict
