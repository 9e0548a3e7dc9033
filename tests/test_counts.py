"""Per-call counts as every view writes them (``shardscope.engine.counts``): a count inside a
``cond`` branch is an upper bound, on its runs and its bytes alike, and one run is singular."""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.engine.counts import PerCall, runs_per_call


@dataclass(frozen=True)
class _Sum(PerCall):
    executions: int | None
    bytes_per_execution: int
    in_conditional: bool = False


def test_a_sum_in_a_cond_branch_is_at_most_its_runs_and_its_bytes():
    bounded = _Sum(6, 16, in_conditional=True)  # 6 runs of f32[4] at most: 96 B
    assert (bounded.runs.text(), bounded.bytes_count.text()) == ("≤ 6", "≤ 96")
    assert (_Sum(6, 16).runs.text(), _Sum(6, 16).bytes_count.text()) == ("6", "96")
    assert _Sum(None, 16, in_conditional=True).bytes_count.text() == "?"  # unknown: no bound to state


def test_one_run_is_singular_bounded_or_not():
    assert [runs_per_call(text) for text in ("1", "≤ 1", "2", "≤ 2", "unknown")] == [
        "1 run/call", "≤ 1 run/call", "2 runs/call", "≤ 2 runs/call", "unknown runs/call"]


def test_a_time_is_never_written_in_exponent_form():
    """A layouts sweep's progress said 'compiled in 2.2e+02 ms': two significant digits of 220."""
    from shardscope.engine.hlo.roofline import seconds_words
    from shardscope.render.layout_progress import duration_words

    assert [seconds_words(s, 2) for s in (0.22, 0.667, 12.3, 0.0022)] == ["220 ms", "670 ms", "12 s", "2.2 ms"]
    assert [seconds_words(s) for s in (0.22, 0.667, 5e-10)] == ["220 ms", "667 ms", "<1 ns"]
    assert duration_words(0.22) == "220 ms" and duration_words(200) == "3 min 20 s"
