"""The speedup: per-round ratios of aligned samples, their median, the confidence interval of that
median, their interquartile range, one wording; and the timing loop that adds rounds until a
comparison is settled. Every expected number is derived by hand here (binomial tail sums written
out as fractions), never read back from the module."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from shardscope.measure.speedup import (
    CONFIDENCE, FASTER, MIN_ROUNDS, NO_DIFFERENCE, SLOWER, TOO_FEW_ROUNDS, Speedup, median_rank, settled, speedup_of,
    speedup_short_text, speedup_text,
)
from shardscope.measure.timing import time_interleaved


def binomial_tail(n: int, j: int) -> Fraction:
    """P(B <= j) for B ~ Binomial(n, 1/2), exactly."""
    return Fraction(sum(math.comb(n, i) for i in range(j + 1)), 2 ** n)


def test_the_interval_ranks_are_the_sign_tests():
    # 20 rounds: P(B <= 5) = (1 + 20 + 190 + 1140 + 4845 + 15504) / 2**20 = 21700 / 1048576 = 0.0207
    # is within 2.5%, P(B <= 6) = 60460 / 1048576 = 0.0577 is not: the 6th and the 15th ratio.
    assert binomial_tail(20, 5) == Fraction(21700, 1048576) and binomial_tail(20, 6) == Fraction(60460, 1048576)
    assert median_rank(20) == 6
    # 6 rounds: all on one side of the median has chance 1/64 per side: the extremes are the interval;
    # 5 rounds: 1/32 > 2.5% per side: no 95% interval exists, hence the fewest rounds for a verdict
    assert median_rank(6) == 1 and median_rank(5) == 0 and MIN_ROUNDS == 6
    # 100 rounds: the textbook ranks 40 and 61 (P(B <= 39) = 0.0176, P(B <= 40) = 0.0284)
    assert binomial_tail(100, 39) < Fraction(1, 40) < binomial_tail(100, 40)
    assert median_rank(100) == 40
    assert CONFIDENCE == 0.95


def test_ratios_are_taken_round_by_round_not_from_the_medians():
    # a slow round hits both plans (drift): per round the candidate is always exactly 2x faster
    baseline = (2.0, 20.0, 2.0, 2.0, 20.0, 2.0)
    candidate = (1.0, 10.0, 1.0, 1.0, 10.0, 1.0)
    s = speedup_of(baseline, candidate)
    assert (s.median, s.low, s.high, s.rounds) == (2.0, 2.0, 2.0, 6)
    assert s.verdict == FASTER and s.settled


def test_the_interval_of_twenty_ratios_is_their_6th_and_15th():
    ratios = [0.5 + 0.1 * k for k in range(20)]  # 0.5, 0.6, ..., 2.4
    s = speedup_of(tuple(reversed(ratios)), (1.0,) * 20)  # the order of the rounds does not matter
    assert s.rounds == 20
    assert s.median == pytest.approx((ratios[9] + ratios[10]) / 2)  # 1.45
    assert (s.low, s.high) == (pytest.approx(ratios[5]), pytest.approx(ratios[14]))  # 1.0 and 1.9
    assert not s.measurable and s.verdict == NO_DIFFERENCE  # 1.0 is inside [1.0, 1.9]
    # the interquartile range: quartiles at positions 1 + 19/4 and 1 + 3*19/4 (inclusive method)
    assert (s.q1, s.q3) == (pytest.approx(0.5 + 0.1 * 4.75), pytest.approx(0.5 + 0.1 * 14.25))
    assert not s.narrow and not s.settled  # 1.9 / 1.0 is far wider than 1.10


def test_an_interval_clear_of_one_names_a_winner_though_single_rounds_scatter_across_it():
    # 20 ratios: 5 slow rounds far below 1 (a loaded machine), 15 of 1.20, 1.21, ..., 1.34
    ratios = [0.1] * 5 + [1.2 + 0.01 * k for k in range(15)]
    s = speedup_of(tuple(ratios), (1.0,) * 20)
    assert s.low == pytest.approx(1.20) and s.high == pytest.approx(1.29)  # sorted 6th and 15th
    assert s.median == pytest.approx((1.24 + 1.25) / 2)  # sorted 10th and 11th
    # the 1st quartile sits at position 4.75 (0-based): 0.1 + 0.75 * (1.20 - 0.1) = 0.925
    assert s.q1 == pytest.approx(0.925) and s.q1 < 1.0 < s.q3
    assert s.verdict == FASTER  # a spread of single rounds holding 1 is not a median holding 1


def test_below_six_rounds_there_is_no_interval_and_no_verdict():
    s = speedup_of((1.5, 3.0, 2.0), (1.0, 1.0, 1.0))
    assert s.median == 2.0 and math.isnan(s.low) and math.isnan(s.high)
    assert s.verdict == TOO_FEW_ROUNDS and not s.settled


def test_a_narrow_interval_around_one_is_settled_as_no_difference():
    ratios = [0.97 + 0.003 * k for k in range(20)]  # 0.970 ... 1.027
    s = speedup_of(tuple(ratios), (1.0,) * 20)
    assert (s.low, s.high) == (pytest.approx(0.985), pytest.approx(1.012))  # 6th, 15th
    assert s.narrow and s.settled and s.verdict == NO_DIFFERENCE


def test_the_wording_for_each_verdict():
    assert speedup_text(Speedup(2.2222, 2.1, 2.35, 20), "naive", "deferred") == (
        "deferred is 2.22x faster than naive (median of 20 per-round ratios; 95% confidence interval 2.10-2.35x)")
    assert speedup_text(Speedup(1.03, 0.93, 1.12, 40), "naive", "deferred") == (
        "no measurable difference between naive and deferred (median of 40 per-round ratios 1.03x; "
        "95% confidence interval 0.93-1.12x)")
    assert speedup_text(Speedup(0.8, 0.75, 0.85, 20), "naive", "deferred") == (
        "deferred is 1.25x slower than naive (median of 20 per-round ratios; 95% confidence interval 0.75-0.85x)")
    few = Speedup(1.5, math.nan, math.nan, MIN_ROUNDS - 1)
    assert few.verdict == TOO_FEW_ROUNDS and not few.measurable
    assert speedup_text(few, "naive", "deferred").startswith("5 timed round(s) are too few to tell deferred from naive")
    assert Speedup(0.8, 0.75, 0.85, 20).verdict == SLOWER


def test_the_same_compiled_work_is_noise_whatever_the_rounds_say():
    clear = Speedup(1.42, 1.20, 1.55, 20)  # a winner by the numbers
    assert speedup_text(clear, "deferred", "reduced", same_work=True) == (
        "deferred and reduced compile to the same collectives and memory: their times differ by noise only "
        "(median of 20 per-round ratios 1.42x; 95% confidence interval 1.20-1.55x)")
    assert speedup_short_text(clear, "deferred", "reduced", same_work=True) == "same compiled work: noise only"
    few = Speedup(1.1, math.nan, math.nan, 2)
    assert speedup_text(few, "deferred", "reduced", same_work=True).endswith("(median of 2 per-round ratios 1.10x)")


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


def test_a_winner_is_settled_only_clear_of_one():
    """An interval that only just excludes 1 names a winner, but more rounds may bring 1 back
    into it: the rounds go on until the whole interval lies beyond 1.02 (or under 1 / 1.02)."""
    barely = Speedup(1.39, 1.005, 1.56, 30)
    assert barely.verdict == FASTER and not barely.settled
    assert Speedup(1.39, 1.03, 1.56, 30).settled
    assert Speedup(0.7, 0.6, 0.975, 30).settled and not Speedup(0.7, 0.6, 0.99, 30).settled


def test_settled_asks_every_pair():
    wide = {"a": [1.0] * 20, "b": [0.5 + 0.1 * k for k in range(20)]}  # a/b: ratios 2.0 ... 0.41, holding 1
    clear = {"a": [2.0] * 20, "b": [1.0] * 20}
    assert settled(clear, [("a", "b")]) and not settled(wide, [("a", "b")])
    assert settled(wide, [])  # nothing to compare: nothing to wait for


def test_more_rounds_are_timed_until_settled_and_no_more():
    """``until`` is asked after the rounds asked for, then every tenth more; the loop stops as soon
    as it says so. Counted here in calls, not seconds."""
    calls = {"a": 0, "b": 0}

    def program(name):
        def call():
            calls[name] += 1
        return call

    asked: list[int] = []

    def until(samples) -> bool:
        asked.append(len(samples["a"]))
        return len(samples["a"]) >= 14

    done: list[float] = []
    times = time_interleaved({"a": program("a"), "b": program("b")}, (), 6, warmup=1, on_round=done.append,
                             until=until, budget_s=600.0)
    # asked at 6, then at 6 + max(1, 6 // 10) = 7, 8, ... up to 10, then 10 + 1 = 11, ..., 14: settled
    assert asked == [6, 7, 8, 9, 10, 11, 12, 13, 14]
    assert len(times["a"].samples) == len(times["b"].samples) == 14
    assert calls == {"a": 1 + 14, "b": 1 + 14}  # one warm-up each
    assert done[5] == 0.5 and all(0.5 <= d <= 1.0 for d in done[6:])  # the rounds asked for are half the work


def test_without_a_budget_exactly_the_rounds_asked_for():
    times = time_interleaved({"a": lambda: None}, (), 4, warmup=0, until=lambda samples: False, budget_s=0.0)
    assert len(times["a"].samples) == 4


def test_the_analysis_speedup_comes_from_its_aligned_samples(analysis_of):
    a = analysis_of("linear.py", devices=2, chunk_size=16, repeats=7)
    naive, deferred = a.plans["naive"].run_s.samples, a.plans["deferred"].run_s.samples
    ratios = sorted(n / d for n, d in zip(naive, deferred))
    assert len(ratios) == 7  # the analysis' settings have no budget for more
    # 7 rounds: P(B <= 0) = 1/128 within 2.5%, P(B <= 1) = 8/128 not: the extremes
    assert binomial_tail(7, 0) < Fraction(1, 40) < binomial_tail(7, 1)
    assert a.speedup == ratios[3] == a.measured_speedup.median
    assert (a.measured_speedup.low, a.measured_speedup.high) == (ratios[0], ratios[6])
    assert a.speedup_text() == speedup_text(a.measured_speedup, "naive", "deferred", a.comparison.same_work)


def test_an_analysis_with_a_budget_times_at_least_the_rounds_an_interval_needs():
    """Two rounds asked for, a budget given: no comparison is settled below 6 rounds, so the
    pipeline times 6 at least (as many for every plan: the rounds stay aligned). Deferred and
    reduced compile to the same single all-reduce of W's gradient with the same memory: their
    comparison says noise, whatever the rounds."""
    from pathlib import Path

    from shardscope.config.settings import Settings
    from shardscope.pipeline.run import analyze

    root = Path(__file__).resolve().parent.parent
    a = analyze(Settings(root / "demos" / "linear.py", chunk_size=16, repeats=2, timing_budget_s=60.0))
    rounds = {name: len(plan.run_s.samples) for name, plan in a.plans.items()}
    assert len(set(rounds.values())) == 1 and rounds["naive"] >= MIN_ROUNDS
    assert a.comparison.speedup.rounds == rounds["naive"]
    same = a.compare("deferred", "reduced")
    deferred, reduced = a.plans["deferred"], a.plans["reduced"]
    assert deferred.memory == reduced.memory and deferred.compiled_runs.value == reduced.compiled_runs.value == 1
    assert same.same_work and same.verdict == NO_DIFFERENCE
    assert "compile to the same collectives and memory: their times differ by noise only" in same.speedup_text()
    assert not a.compare("naive", "deferred").same_work  # 2 all-reduces per call against 1
