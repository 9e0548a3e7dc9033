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
