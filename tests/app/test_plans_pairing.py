"""How n/N pairs the plans' collectives: the first step, found without pairing them all, is step one of the pairing."""

from __future__ import annotations

import random
from types import SimpleNamespace

from shardscope.app.plans_view import first_step, pair_by_value


def _plans(values_per_plan: dict[str, list[str]]) -> dict[str, tuple]:
    return {name: tuple(SimpleNamespace(value=v) for v in values) for name, values in values_per_plan.items()}


def test_the_first_step_is_the_pairings_first_step_on_random_plans():
    rng = random.Random(0)
    for _ in range(2000):
        values = [f"v{i}" for i in range(rng.randint(1, 4))]
        plans = _plans({name: [rng.choice(values) for _ in range(rng.randint(0, 6))] for name in ("a", "b", "c")})
        steps = pair_by_value(plans)
        assert first_step(plans) == (steps[0] if steps else {}), plans


def test_the_first_step_starts_from_the_first_plan_that_has_a_collective():
    plans = _plans({"reference": [], "naive": ["W", "b", "W"], "deferred": ["b", "W"]})
    assert first_step(plans) == {"naive": 0, "deferred": 1}  # the deferred plan's first collective of W
    assert first_step(_plans({"a": [], "b": []})) == {}
