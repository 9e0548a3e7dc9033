"""How n/N pairs the plans' collectives: by the value each carries, the k-th of a value with the k-th."""

from __future__ import annotations

from types import SimpleNamespace

from shardscope.app.plans_view import pair_by_value


def _plans(values_per_plan: dict[str, list[str]]) -> dict[str, tuple]:
    return {name: tuple(SimpleNamespace(value=v) for v in values) for name, values in values_per_plan.items()}


def test_collectives_pair_by_value_in_the_first_plans_order_and_the_kth_of_a_value_with_the_kth():
    plans = _plans({"reference": [], "naive": ["W", "b", "W"], "deferred": ["b", "W", "c"]})
    assert pair_by_value(plans) == [
        {"naive": 0, "deferred": 1},  # the first W of each plan
        {"naive": 1, "deferred": 0},  # b
        {"naive": 2},  # the second W: the deferred plan has one W only
        {"deferred": 2},  # c: no partner, a step of its own, after the steps of the plans before
    ]
    assert pair_by_value(_plans({"a": [], "b": []})) == []
