"""The speedup: per-round ratios of aligned samples, their median and spread, one wording."""

from __future__ import annotations

import math

import pytest

from shardscope.measure.speedup import (
    FASTER, MIN_ROUNDS, NO_DIFFERENCE, SLOWER, TOO_FEW_ROUNDS, Speedup, speedup_of, speedup_short_text, speedup_text,
)


def test_ratios_are_taken_round_by_round_not_from_the_medians():
    # a slow round hits both plans (drift): per round the candidate is always exactly 2x faster
    baseline = (2.0, 20.0, 2.0, 2.0, 20.0)
    candidate = (1.0, 10.0, 1.0, 1.0, 10.0)
    s = speedup_of(baseline, candidate)
    assert (s.median, s.low, s.high, s.rounds) == (2.0, 2.0, 2.0, 5)
    assert s.verdict == FASTER


def test_spread_is_the_interquartile_range_of_the_ratios():
    ratios = [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 3.0]
    s = speedup_of(tuple(ratios), (1.0,) * len(ratios))
    assert s.median == pytest.approx(1.1)
    assert (s.low, s.high) == (pytest.approx(0.95), pytest.approx(1.25))  # the outlier 3.0 does not widen it
    assert not s.measurable and s.verdict == NO_DIFFERENCE


def test_below_four_rounds_the_spread_is_the_range():
    s = speedup_of((1.5, 3.0, 2.0), (1.0, 1.0, 1.0))
    assert (s.median, s.low, s.high) == (2.0, 1.5, 3.0)


def test_the_wording_for_each_verdict():
    assert speedup_text(Speedup(2.2222, 2.1, 2.35, 20), "naive", "deferred") == (
        "deferred is 2.22x faster than naive (per-round ratios 2.10-2.35x)")
    assert speedup_text(Speedup(1.03, 0.93, 1.12, 20), "naive", "deferred") == (
        "no measurable difference between naive and deferred (per-round ratios 0.93-1.12x, median 1.03x)")
    assert speedup_text(Speedup(0.8, 0.75, 0.85, 20), "naive", "deferred") == (
        "deferred is 1.25x slower than naive (per-round ratios 0.75-0.85x)")
    few = Speedup(1.5, 1.5, 1.5, MIN_ROUNDS - 1)
    assert few.verdict == TOO_FEW_ROUNDS and not few.measurable
    assert speedup_text(few, "naive", "deferred").startswith("2 timed round(s) are too few to tell deferred from naive")
    assert Speedup(0.8, 0.75, 0.85, 20).verdict == SLOWER


def test_short_wording_says_the_same():
    assert speedup_short_text(Speedup(2.2222, 2.1, 2.35, 20), "naive", "deferred") == "deferred 2.22x faster"
    assert speedup_short_text(Speedup(1.03, 0.93, 1.12, 20), "naive", "deferred") == "no measurable difference"
    assert speedup_short_text(Speedup(0.8, 0.75, 0.85, 20), "naive", "deferred") == "deferred 1.25x slower"


def test_no_rounds_is_not_a_number():
    s = speedup_of((), ())
    assert s.rounds == 0 and math.isnan(s.median) and s.verdict == TOO_FEW_ROUNDS


def test_misaligned_samples_are_refused():
    with pytest.raises(ValueError):
        speedup_of((1.0, 2.0), (1.0,))


def test_the_analysis_speedup_comes_from_its_aligned_samples(analysis_of):
    a = analysis_of("linear.py", devices=2, chunk_size=16, repeats=5)
    naive, deferred = a.plans["naive"].run_s.samples, a.plans["deferred"].run_s.samples
    ratios = sorted(n / d for n, d in zip(naive, deferred))
    assert len(ratios) == 5
    assert a.speedup == ratios[2] == a.measured_speedup.median
    assert (a.measured_speedup.low, a.measured_speedup.high) == (ratios[1], ratios[3])
    assert a.speedup_text() == speedup_text(a.measured_speedup, "naive", "deferred")
