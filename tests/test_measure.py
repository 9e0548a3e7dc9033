"""Timing: interleaved runs whose order rotates, so no program always runs after a disturbance."""

from __future__ import annotations

import numpy as np

from shardscope.measure.timing import time_interleaved


def test_every_program_takes_a_turn_right_after_the_round_hook():
    calls: list[str] = []

    def program(name):
        def run(x):
            calls.append(name)
            return np.asarray(x)

        return run

    times = time_interleaved(
        {"naive": program("naive"), "deferred": program("deferred"), "reference": program("reference")},
        (1.0,),
        repeats=6,
        warmup=1,
    )
    rounds = [calls[3 + 3 * i : 6 + 3 * i] for i in range(6)]  # after one warm-up round
    assert all(sorted(r) == ["deferred", "naive", "reference"] for r in rounds)
    assert {r[0] for r in rounds} == {"naive", "deferred", "reference"}
    assert all(len(t.samples) == 6 for t in times.values())
